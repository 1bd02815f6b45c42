package clustergen

import (
	"math/rand"
	"strings"
	"unicode"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Question is one name and type a client could ask. Name is fully
// qualified; its letter case may be mixed.
type Question struct {
	Name string
	Type uint16
}

func (q Question) String() string { return q.Name + " " + dns.TypeToString[q.Type] }

// Type lists for the questions.
var (
	// allTypes: every type a client asks, and some it should not.
	allTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeCNAME, dns.TypeMX,
		dns.TypePTR, dns.TypeSOA, dns.TypeNS, dns.TypeANY, dns.TypeHINFO}
	addrTypes     = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeCNAME}
	shortTypes    = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeSRV, dns.TypeSOA}
	caseShare     = 6 // one question in caseShare has its letter case mixed
	maxPodQueries = 60
)

// questions collects questions without duplicates: a name asked twice
// with the same type (in any letter case) is asked once, so that a cache
// in front of a server never answers one of them.
type questions struct {
	r    *rand.Rand
	list []Question
	seen map[Question]bool
}

func (qs *questions) add(name string, types ...uint16) {
	name = dns.Fqdn(strings.ToLower(name))
	for _, t := range types {
		k := Question{name, t}
		if qs.seen[k] {
			continue
		}
		qs.seen[k] = true
		if qs.r.Intn(caseShare) == 0 {
			k.Name = mixCase(qs.r, name)
		}
		qs.list = append(qs.list, k)
	}
}

// mixCase flips the case of about half the letters of name.
func mixCase(r *rand.Rand, name string) string {
	b := []rune(name)
	for i, c := range b {
		if unicode.IsLetter(c) && r.Intn(2) == 0 {
			b[i] = unicode.ToUpper(c)
		}
	}
	return string(b)
}

// Questions lists every name and type a client could ask about c: the zone
// apex and the schema's fixed names, namespaces, Services (also deleted
// ones), their _port._proto SRV names, endpoints by hostname and by dashed
// address, pods, reverse names of every cluster IP and endpoint address
// and of addresses that exist nowhere, and names that do not exist. Each
// (name, type) appears once; a share of the names has mixed letter case.
// The list depends only on c, cfg.Zone and r.
func Questions(c *Cluster, cfg Config, r *rand.Rand) []Question {
	cfg = cfg.withDefaults()
	z := "." + cfg.Zone + "."
	qs := &questions{r: r, seen: map[Question]bool{}}

	qs.add(cfg.Zone, dns.TypeSOA, dns.TypeNS, dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeANY, dns.TypeSRV)
	qs.add("dns-version"+z, dns.TypeTXT, dns.TypeA, dns.TypeSRV, dns.TypeANY)
	qs.add("ns.dns"+z, dns.TypeA, dns.TypeAAAA, dns.TypeTXT)
	for _, n := range []string{"svc", "pod", "nothing", "a.b.c.d", "x.svc.svc", "_tcp.svc", "dns-version.svc"} {
		qs.add(n+z, shortTypes...)
	}
	for _, ns := range append(c.namespaceNames(), "no-such-ns") {
		qs.add(ns+".svc"+z, shortTypes...)
		qs.add(ns+".pod"+z, dns.TypeA, dns.TypeTXT)
		qs.add("gone."+ns+".svc"+z, dns.TypeA, dns.TypeSRV)
	}
	for _, s := range c.Services {
		c.serviceQuestions(qs, s, z)
	}
	for _, g := range c.gone {
		qs.add(g.service+"."+g.namespace+".svc"+z, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT)
	}
	for _, sl := range c.Slices {
		c.sliceQuestions(qs, sl, z)
	}
	c.podQuestions(qs, z)
	c.podAddrQuestions(qs, z)
	c.reverseQuestions(qs)
	if cfg.Imports > 0 {
		c.importQuestions(qs, "."+cfg.ClusterSetZone+".")
	}
	return qs.list
}

// namespaceNames are the names of c's namespaces.
func (c *Cluster) namespaceNames() []string {
	var out []string
	for _, ns := range c.Namespaces {
		out = append(out, ns.Name)
	}
	return out
}

// serviceQuestions asks for Service s with every type, for its SRV names
// (every port by name and protocol, the other protocol, the unnamed-port
// form, a protocol alone, a port that does not exist) and for names under
// it that do not exist.
func (c *Cluster) serviceQuestions(qs *questions, s *corev1.Service, z string) {
	base := s.Name + "." + s.Namespace + ".svc" + z
	qs.add(base, allTypes...)
	for _, p := range s.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		qs.add("_"+p.Name+"._"+proto+"."+base, dns.TypeSRV, dns.TypeA)
		other := "udp"
		if proto == "udp" {
			other = "tcp"
		}
		qs.add("_"+p.Name+"._"+other+"."+base, dns.TypeSRV)
		if p.Name != "" {
			qs.add(p.Name+"."+proto+"."+base, dns.TypeSRV) // without underscores
		}
	}
	qs.add("_tcp."+base, dns.TypeSRV, dns.TypeA)
	qs.add("_._tcp."+base, dns.TypeSRV)
	qs.add("_nope._tcp."+base, dns.TypeSRV)
	qs.add("x.y."+base, dns.TypeA)
	qs.add("a.b.c."+base, dns.TypeA)
	qs.add("no-such-endpoint."+base, dns.TypeA, dns.TypeSRV)
}

// sliceQuestions asks for every endpoint of sl by hostname and by dashed
// address, for SRV names of the slice's ports, and (too long a name) for
// a port under an endpoint.
func (c *Cluster) sliceQuestions(qs *questions, sl *discoveryv1.EndpointSlice, z string) {
	base := sl.Labels[discoveryv1.LabelServiceName] + "." + sl.Namespace + ".svc" + z
	for _, p := range sl.Ports {
		if p.Name != nil && p.Protocol != nil {
			qs.add("_"+*p.Name+"._"+strings.ToLower(string(*p.Protocol))+"."+base, dns.TypeSRV, dns.TypeA)
		}
	}
	for _, e := range sl.Endpoints {
		if e.Hostname != nil {
			qs.add(*e.Hostname+"."+base, addrTypes...)
		}
		for _, a := range e.Addresses {
			qs.add(dashed(a)+"."+base, addrTypes...)
		}
		if len(e.Addresses) > 0 {
			qs.add("_http._tcp."+dashed(e.Addresses[0])+"."+base, dns.TypeSRV)
		}
	}
}

// podQuestions asks for pod names (a-b-c-d.<ns>.pod) of endpoint
// addresses in their own namespace, in another and in none, of an
// address that exists nowhere, and of labels that are no address.
func (c *Cluster) podQuestions(qs *questions, z string) {
	var addrs []string
	for _, sl := range c.Slices {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, e := range sl.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
	}
	addrs = append(addrs, nowhereIPs(qs.r)...)
	nss := append(c.namespaceNames(), "no-such-ns")
	for i, a := range addrs {
		if i >= maxPodQueries {
			break
		}
		qs.add(dashed(a)+"."+nss[qs.r.Intn(len(nss))]+".pod"+z, dns.TypeA, dns.TypeAAAA)
	}
	ns := nss[0]
	for _, l := range []string{"bad-label", "1-2-3", "1-2-3-4-5", "300-1-1-1", "fd00--1", "a.b"} {
		qs.add(l+"."+ns+".pod"+z, dns.TypeA, dns.TypeAAAA)
	}
}

// reverseQuestions asks PTR (and a few A) for the reverse name of every
// cluster IP and endpoint address, of addresses that exist nowhere, and
// for partial reverse names.
func (c *Cluster) reverseQuestions(qs *questions) {
	var ips []string
	for _, s := range c.Services {
		for _, ip := range s.Spec.ClusterIPs {
			if ip != corev1.ClusterIPNone && ip != "" {
				ips = append(ips, ip)
			}
		}
	}
	for _, sl := range c.Slices {
		if sl.AddressType != discoveryv1.AddressTypeFQDN {
			for _, e := range sl.Endpoints {
				ips = append(ips, e.Addresses...)
			}
		}
	}
	ips = append(ips, nowhereIPs(qs.r)...)
	for i, ip := range ips {
		rev, err := dns.ReverseAddr(ip)
		if err != nil {
			continue
		}
		qs.add(rev, dns.TypePTR)
		if i%7 == 0 {
			qs.add(rev, dns.TypeA, dns.TypeTXT)
		}
	}
	for _, n := range []string{"96.10.in-addr.arpa.", "10.in-addr.arpa.", "dns-version.in-addr.arpa."} {
		qs.add(n, dns.TypePTR, dns.TypeTXT)
	}
}
