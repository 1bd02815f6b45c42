package clustergen

import (
	"fmt"
	"math/rand"
	"net/netip"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pods (Config.Pods > 0): what `pods verified` and autopath read. A Pod's
// addresses are its own pod-range addresses (one per family, sometimes an
// endpoint address the cluster has: a Service's backend), or, for a
// hostNetwork Pod, its node's addresses - which every hostNetwork Pod of
// that node shares, in any namespace. Phases are Running mostly, Pending
// (with or without addresses), Succeeded and Failed (which the stock
// plugin's field selector leaves out); Config.Terminating marks a share
// of new Pods as already terminating (a deletion timestamp: the stock
// plugin leaves a Pod first seen so out; only for in-process use, an API
// server clears the field on create).

// nodeCount is the number of nodes the Pods run on.
const nodeCount = 3

// NodeIPs are the addresses of node i: 10.250.0.<i+1>, and
// fd00:250::<i+1> in a dual-stack cluster.
func (c *Cluster) NodeIPs(i int) []string {
	ips := []string{netip.AddrFrom4([4]byte{10, 250, 0, byte(i + 1)}).String()}
	if c.cfg.DualStack {
		ips = append(ips, netip.AddrFrom16([16]byte{0xfd, 0x00, 0x02, 0x50, 15: byte(i + 1)}).String())
	}
	return ips
}

// newPod is a new Pod in namespace ns.
func (c *Cluster) newPod(r *rand.Rand, ns string) *corev1.Pod {
	node := r.Intn(nodeCount)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.uniqueName("pod", ns, "pod")},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", node), HostNetwork: r.Intn(5) == 0,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}},
	}
	switch n := r.Intn(20); {
	case n < 14:
		p.Status.Phase = corev1.PodRunning
	case n < 16:
		p.Status.Phase = corev1.PodPending
	case n < 18:
		p.Status.Phase = corev1.PodSucceeded
	default:
		p.Status.Phase = corev1.PodFailed
	}
	if p.Status.Phase != corev1.PodPending || r.Intn(2) == 0 {
		c.setPodIPs(r, p, node)
	}
	if c.cfg.Terminating && r.Intn(10) == 0 {
		t := metav1.Unix(1700000000, 0)
		p.DeletionTimestamp = &t
	}
	return p
}

// setPodIPs gives p its addresses: the node's (hostNetwork), or its own.
func (c *Cluster) setPodIPs(r *rand.Rand, p *corev1.Pod, node int) {
	var ips []string
	if p.Spec.HostNetwork {
		ips = c.NodeIPs(node)
	} else {
		fams := []family{v4}
		if c.cfg.DualStack && r.Intn(3) == 0 {
			fams = append(fams, v6)
		}
		for _, fam := range fams {
			a := ""
			if r.Intn(4) == 0 {
				a = c.existingAddress(r, fam, false)
			}
			if a == "" {
				a = c.podIP(r, fam)
			}
			ips = append(ips, a)
		}
	}
	p.Status.PodIP = ips[0]
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	p.Status.HostIP = c.NodeIPs(node)[0]
}

// podStep is a Pod change: a new Pod, a Pending Pod that starts (gets its
// addresses), a Running Pod that ends (Succeeded or Failed), or a Pod
// deleted - the transitions an API server accepts.
func (c *Cluster) podStep(r *rand.Rand) Change {
	if len(c.Pods) == 0 || r.Intn(3) == 0 {
		p := c.newPod(r, c.pickNamespace(r))
		c.Pods = append(c.Pods, p)
		return Change{Add, p.DeepCopy()}
	}
	i := r.Intn(len(c.Pods))
	p := c.Pods[i].DeepCopy()
	switch {
	case r.Intn(3) == 0:
		c.Pods = append(c.Pods[:i:i], c.Pods[i+1:]...)
		return Change{Delete, p}
	case p.Status.Phase == corev1.PodPending && len(p.Status.PodIPs) == 0:
		p.Status.Phase = corev1.PodRunning
		var node int
		_, _ = fmt.Sscanf(p.Spec.NodeName, "node-%d", &node)
		c.setPodIPs(r, p, node)
	case p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending:
		p.Status.Phase = []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}[r.Intn(2)]
	default:
		c.Pods = append(c.Pods[:i:i], c.Pods[i+1:]...)
		return Change{Delete, p}
	}
	c.Pods[i] = p
	return Change{Update, p.DeepCopy()}
}

// podAddrQuestions asks for the pod names of every Pod address: in the Pod's
// namespace and in another, IPv6 addresses also written out in full (a
// spelling the stock plugin does not match), for A, AAAA, SRV and TXT.
func (c *Cluster) podAddrQuestions(qs *questions, z string) {
	nss := append(c.namespaceNames(), "no-such-ns")
	for _, p := range c.Pods {
		for _, ip := range p.Status.PodIPs {
			qs.add(dashed(ip.IP)+"."+p.Namespace+".pod"+z, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT)
			qs.add(dashed(ip.IP)+"."+nss[qs.r.Intn(len(nss))]+".pod"+z, dns.TypeA, dns.TypeAAAA)
			if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is6() {
				qs.add(dashed(a.StringExpanded())+"."+p.Namespace+".pod"+z, dns.TypeA, dns.TypeAAAA)
			}
		}
	}
}

// ClientAddrs are the client addresses to ask autopath questions from:
// every Pod address (Running, Pending, Succeeded, Failed: the last two
// are no Pod to the stock plugin), each node's (hostNetwork Pods of
// several namespaces, or none) and addresses of no Pod.
func (c *Cluster) ClientAddrs() []string {
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, p := range c.Pods {
		for _, ip := range p.Status.PodIPs {
			add(ip.IP)
		}
	}
	for i := range nodeCount {
		for _, ip := range c.NodeIPs(i) {
			add(ip)
		}
	}
	add("10.244.255.9")
	add("192.0.2.10")
	return out
}
