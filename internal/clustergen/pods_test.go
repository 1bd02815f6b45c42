package clustergen

import (
	"math/rand"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPodShapes: generated Pods, after steps too, are valid (one address
// per family, a hostNetwork Pod's its node's) and cover the shapes the
// pod index distinguishes: every phase, Pending without addresses,
// terminating, hostNetwork Pods of several namespaces on one address, an
// endpoint's address.
func TestPodShapes(t *testing.T) {
	cfg := Small()
	cfg.Pods, cfg.Terminating = 60, true
	c := Generate(1, cfg)
	r := rand.New(rand.NewSource(1))
	for range 100 {
		c.Step(r)
	}
	seen := map[string]bool{}
	byAddr := map[string]map[string]bool{}
	endpoints := map[string]bool{}
	for _, sl := range c.Slices {
		for _, e := range sl.Endpoints {
			for _, a := range e.Addresses {
				endpoints[a] = true
			}
		}
	}
	for _, p := range c.Pods {
		seen[string(p.Status.Phase)] = true
		seen["terminating"] = seen["terminating"] || p.DeletionTimestamp != nil
		seen["pending without addresses"] = seen["pending without addresses"] || (p.Status.Phase == corev1.PodPending && len(p.Status.PodIPs) == 0)
		fams := map[bool]bool{}
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err != nil || a.String() != ip.IP || fams[a.Is4()] {
				t.Errorf("%s/%s: bad or repeated-family address %q", p.Namespace, p.Name, ip.IP)
			}
			fams[a.Is4()] = true
			if byAddr[ip.IP] == nil {
				byAddr[ip.IP] = map[string]bool{}
			}
			byAddr[ip.IP][p.Namespace] = true
			seen["endpoint address"] = seen["endpoint address"] || endpoints[ip.IP]
		}
		if len(p.Status.PodIPs) > 0 && p.Status.PodIP != p.Status.PodIPs[0].IP {
			t.Errorf("%s/%s: podIP %q is not podIPs[0]", p.Namespace, p.Name, p.Status.PodIP)
		}
	}
	for _, nss := range byAddr {
		seen["an address of several namespaces"] = seen["an address of several namespaces"] || len(nss) > 1
	}
	for _, want := range []string{"Running", "Pending", "Succeeded", "Failed", "terminating", "pending without addresses", "endpoint address", "an address of several namespaces"} {
		if !seen[want] {
			t.Errorf("no Pod of shape %q", want)
		}
	}
}
