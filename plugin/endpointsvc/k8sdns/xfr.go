package k8sdns

import (
	"cmp"
	"context"
	"math"
	"net"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Transfer writes zone number zi of t as an AXFR, batch by batch in emit,
// as the kubernetes plugin's Transfer does (its xfr.go): the SOA, NS and
// the name server's addresses, then per Service in name order (namespace
// breaking ties, which the kubernetes plugin leaves to its informer) its
// records, and the SOA again. A ClusterIP Service gives its cluster IPs'
// A/AAAA and per port an SRV at its name, and one at
// _<port>._<proto>.<name> when the port is named; a headless one gives
// per ready address an A/AAAA at its name and one at the endpoint's label,
// with an SRV per named port of the slice, weight 100/(ready addresses of
// the slice); an ExternalName one its CNAME (none when the name is an
// address). FQDN endpoints give nothing (the kubernetes plugin writes SRV
// records with target "." for them). Services of namespaces that do not
// exist (namespaces, namespace_labels) are left out. With serial set and
// equal to the table's, only the SOA (IXFR's "up to date").
func (s *Server) Transfer(t *Table, zi int, serial, want uint32, emit func([]dns.RR)) {
	zone := s.Zones[zi]
	soa := []dns.RR{s.SOA(zone, serial)}
	emit(soa)
	if want != 0 && want == serial {
		return
	}
	q := &query{s: s, t: t, ctx: context.Background(), zone: zone, zoneq: zone}
	ns := q.nsRecords()
	var addrs []dns.RR
	for i, r := range ns {
		target := dns.Fqdn(r.name)
		if !slices.ContainsFunc(ns[:i], func(o nsRecord) bool { return dns.Fqdn(o.name) == target }) {
			emit([]dns.RR{&dns.NS{Hdr: q.hdr(zone, dns.TypeNS), Ns: target}})
		}
		addrs = append(addrs, q.addrRR(r.name, r.ip))
	}
	emit(addrs)

	es := make([]*entry, 0, t.services)
	for _, e := range t.names.All() {
		if e.svc == nil {
			continue
		}
		if _, ok := t.namespaces[e.svc.Namespace]; ok {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.svc.Name, b.svc.Name), cmp.Compare(a.svc.Namespace, b.svc.Namespace))
	})
	for _, e := range es {
		q.transferService(e, emit)
	}
	emit(soa)
}

// transferService emits one Service's records.
func (q *query) transferService(e *entry, emit func([]dns.RR)) {
	svc := e.svc
	name := svc.Name + "." + svc.Namespace + ".svc." + q.zone
	srv := func(owner, target string, port int32, weight uint16) {
		emit([]dns.RR{&dns.SRV{Hdr: q.hdr(owner, dns.TypeSRV), Weight: weight, Port: uint16(port), Target: target}})
	}
	switch svc.Kind {
	case ClusterIP:
		if len(svc.ClusterIPs) == 0 {
			return
		}
		for _, ip := range svc.ClusterIPs {
			emit([]dns.RR{q.addrRR(name, ip)})
		}
		for _, p := range svc.Ports {
			srv(name, name, p.Port, 100)
			if p.Name != "" {
				srv(portOwner(p, name), name, p.Port, 100)
			}
		}
	case Headless:
		for _, sl := range e.slices {
			n := 0 // the slice's ready addresses (the kubernetes plugin's subset)
			for i := range sl.Endpoints {
				if sl.Endpoints[i].IsReady() {
					n += sl.Endpoints[i].Len()
				}
			}
			if n == 0 || sl.Type == FQDN {
				continue
			}
			weight := max(uint16(math.Floor((100.0/float64(100*n))*100)), 1) // the kubernetes plugin's calcSRVWeight
			for i := range sl.Endpoints {
				ep := &sl.Endpoints[i]
				if !ep.IsReady() {
					continue
				}
				for j := range ep.Len() {
					a := sl.Addr(i, j)
					emit([]dns.RR{q.addrRR(name, a)})
					host := sl.label(i, q.s.EndpointPodNames, a.String()) + "." + name
					emit([]dns.RR{q.addrRR(host, a)})
					for _, p := range sl.Ports {
						if p.Name != "" {
							srv(portOwner(p, name), host, p.Port, weight)
						}
					}
				}
			}
		}
	case ExternalName:
		if svc.ExternalName == "" || net.ParseIP(svc.ExternalName) != nil {
			return
		}
		emit([]dns.RR{&dns.CNAME{Hdr: q.hdr(name, dns.TypeCNAME), Target: dns.Fqdn(svc.ExternalName)}})
	}
}

// portOwner is _<port>._<proto>.<name>, lowercased.
func portOwner(p Port, name string) string {
	return "_" + strings.ToLower(p.Name) + "._" + strings.ToLower(p.Protocol) + "." + name
}
