package clustergen

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// External addresses (Config.External): what k8s_external answers.
// Services get spec.externalIPs, and LoadBalancer Services
// status.loadBalancer.ingress entries (an IP, a hostname, or both), from
// the documentation blocks 203.0.113.0/24 and 2001:db8::/64; a share of
// the addresses is given to two Services. The draws come after every
// other draw of Generate, so that a seed's cluster is otherwise what it is
// without. status.loadBalancer is written by a controller, not on create:
// in-process use only.

// ExternalHostnames are the LoadBalancer ingress hostnames the generator
// uses: one the test's upstream answers, one it does not.
var ExternalHostnames = []string{"ext.example.test", "lb.example.test"}

// generateExternal gives a share of the Services external addresses.
func (c *Cluster) generateExternal(r *rand.Rand) {
	var pool []string // addresses handed out, some reused
	next := func() string {
		if len(pool) > 0 && r.Intn(6) == 0 {
			return pool[r.Intn(len(pool))]
		}
		var ip string
		for ip == "" || c.used[ip] {
			if r.Intn(3) == 0 {
				ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(r.Intn(256)), 15: byte(1 + r.Intn(255))}).String()
			} else {
				ip = netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + r.Intn(254))}).String()
			}
		}
		c.used[ip] = true
		pool = append(pool, ip)
		return ip
	}
	for i, s := range c.Services {
		k := kindOf(s)
		if k == kindExternalName && r.Intn(4) > 0 || r.Intn(3) == 0 {
			continue
		}
		n := s.DeepCopy()
		for range r.Intn(3) {
			n.Spec.ExternalIPs = append(n.Spec.ExternalIPs, next())
		}
		if k == kindLoadBalancer {
			for range 1 + r.Intn(2) {
				var in corev1.LoadBalancerIngress
				switch r.Intn(4) {
				case 0:
					in.Hostname = ExternalHostnames[r.Intn(len(ExternalHostnames))]
				case 1:
					in.IP, in.Hostname = next(), fmt.Sprintf("lb-%d.example.test", i)
				default:
					in.IP = next()
				}
				n.Status.LoadBalancer.Ingress = append(n.Status.LoadBalancer.Ingress, in)
			}
		}
		c.Services[i] = n
	}
}

// ExternalQuestions lists what a client could ask k8s_external about c in
// zone: the apex, its name server names, every Service's name, SRV names
// and endpoint names (by hostname and dashed address), names that do not
// exist or are too long, and the reverse names of the external addresses
// (asked when k8s_external also serves the reverse zones).
func ExternalQuestions(c *Cluster, zone string, r *rand.Rand) []Question {
	z := "." + strings.TrimSuffix(zone, ".") + "."
	qs := &questions{r: r, seen: map[Question]bool{}}
	qs.add(zone, dns.TypeSOA, dns.TypeNS, dns.TypeA, dns.TypeTXT)
	qs.add("dns"+z, dns.TypeA, dns.TypeSOA)
	qs.add("x.ns1.dns"+z, dns.TypeA)
	qs.add("ns2.dns"+z, dns.TypeA)
	for _, ns := range append(c.namespaceNames(), "no-such-ns") {
		qs.add(ns+z, dns.TypeA, dns.TypeSRV)
		qs.add("gone."+ns+z, dns.TypeA, dns.TypeSRV)
	}
	var ips []string
	for _, s := range c.Services {
		base := s.Name + "." + s.Namespace + z
		qs.add(base, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeMX, dns.TypePTR, dns.TypeCNAME)
		for _, p := range s.Spec.Ports {
			proto := strings.ToLower(string(p.Protocol))
			qs.add("_"+p.Name+"._"+proto+"."+base, dns.TypeSRV, dns.TypeA)
			qs.add("_"+p.Name+"._sctp."+base, dns.TypeSRV)
			if p.Name != "" {
				qs.add(p.Name+"."+proto+"."+base, dns.TypeSRV) // without underscores
			}
		}
		qs.add("_nope._tcp."+base, dns.TypeSRV)
		qs.add("anything."+base, dns.TypeA, dns.TypeSRV)
		qs.add("a.b.c."+base, dns.TypeA)
		ips = append(ips, s.Spec.ExternalIPs...)
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				ips = append(ips, in.IP)
			}
		}
	}
	for _, sl := range c.Slices {
		base := sl.Labels[discoveryv1.LabelServiceName] + "." + sl.Namespace + z
		for _, p := range sl.Ports {
			if p.Name != nil && p.Protocol != nil {
				qs.add("_"+*p.Name+"._"+strings.ToLower(string(*p.Protocol))+"."+base, dns.TypeSRV)
			}
		}
		for _, e := range sl.Endpoints {
			if e.Hostname != nil {
				qs.add(*e.Hostname+"."+base, dns.TypeA, dns.TypeAAAA, dns.TypeSRV)
			}
			for _, a := range e.Addresses {
				qs.add(dashed(a)+"."+base, dns.TypeA, dns.TypeAAAA, dns.TypeSRV)
			}
		}
	}
	ips = append(ips, "203.0.113.255", "2001:db8::ffff")
	for _, ip := range ips {
		if rev, err := dns.ReverseAddr(ip); err == nil {
			qs.add(rev, dns.TypePTR, dns.TypeA)
		}
	}
	return slices.DeleteFunc(qs.list, func(q Question) bool {
		_, ok := dns.IsDomainName(q.Name)
		return !ok // a dashed FQDN endpoint's label may be too long
	})
}
