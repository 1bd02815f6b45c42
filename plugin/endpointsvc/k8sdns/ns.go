package k8sdns

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// The name server's own names, as the kubernetes plugin answers them: NS
// at the zone's apex, and the addresses of ns.dns.<zone>. They are made of
// the server's own addresses (SetLocalIPs): the Services whose endpoints
// hold one of them (every endpoint address of a headless one, else the
// cluster IPs), or, when no endpoint holds any, the addresses themselves
// under ns.dns.<zone>.

// nsPrefix is the name server's name below the zone.
const nsPrefix = "ns.dns."

// SetLocalIPs sets the server's own addresses: those it listens on, or
// the machine's when it listens on every address (the kubernetes plugin's
// boundIPs). It may be called while queries are served.
func (s *Server) SetLocalIPs(ips []netip.Addr) { s.localIPs.Store(&ips) }

// nsRecord is an address of the name server's records, with its owner.
type nsRecord struct {
	name string
	ip   netip.Addr
}

// nsRecords are the name server's records in zone (the question's
// spelling), as the kubernetes plugin's nsAddrs makes them.
func (q *query) nsRecords() []nsRecord {
	var local []netip.Addr
	if p := q.s.localIPs.Load(); p != nil {
		local = *p
	}
	var out []nsRecord
	found := false
	for _, ip := range local {
		rs, ok := q.t.rev.Get(ip.Unmap().As16())
		if !ok {
			continue
		}
		var seen []*Slice // the slices holding ip, each once
		for _, r := range rs.list() {
			if r.slice == clusterIP {
				continue
			}
			sl := q.t.refSlice(r)
			if contains(seen, sl) {
				continue
			}
			seen = append(seen, sl)
			found = true
			out = append(out, q.nsOfSlice(sl)...)
		}
	}
	if !found {
		out = out[:0]
		for _, ip := range local {
			out = append(out, nsRecord{nsPrefix + q.zoneq, ip})
		}
	}
	return out
}

func contains(sls []*Slice, sl *Slice) bool {
	for _, x := range sls {
		if x == sl {
			return true
		}
	}
	return false
}

// nsOfSlice are the records a slice holding a local address gives: its
// Service's cluster IPs, or, headless, every ready address of the slice.
func (q *query) nsOfSlice(sl *Slice) []nsRecord {
	e, _ := q.t.names.Get(Key{Namespace: sl.Namespace, Name: sl.Service})
	if e == nil || e.svc == nil || e.svc.Name != sl.Service {
		return nil
	}
	svc := e.svc
	name := svc.Name + "." + svc.Namespace + ".svc." + q.zoneq
	var out []nsRecord
	if svc.Kind == Headless {
		for i := range sl.Endpoints {
			if !sl.Endpoints[i].IsReady() || sl.Type == FQDN {
				continue
			}
			for j := range sl.Endpoints[i].Len() {
				a := sl.Addr(i, j)
				out = append(out, nsRecord{sl.label(i, q.s.EndpointPodNames, a.String()) + "." + name, a})
			}
		}
		return out
	}
	if svc.Kind == ClusterIP {
		for _, a := range svc.ClusterIPs {
			out = append(out, nsRecord{name, a})
		}
	}
	return out
}

// nsAnswer answers the NS question at the apex: an NS record per distinct
// name of the records, and their addresses in the additional section.
func (q *query) nsAnswer(owner string) (answer, extra []dns.RR) {
	for _, r := range q.nsRecords() {
		extra = append(extra, q.addrRR(r.name, r.ip))
		target := dns.Fqdn(r.name)
		if !hasNS(answer, target) {
			answer = append(answer, &dns.NS{Hdr: q.hdr(owner, dns.TypeNS), Ns: target})
		}
	}
	return answer, extra
}

func hasNS(rrs []dns.RR, target string) bool {
	for _, rr := range rrs {
		if rr.(*dns.NS).Ns == target {
			return true
		}
	}
	return false
}

// nsNameAnswer answers ns.dns.<zone> (the zone spelled as asked: the
// kubernetes plugin compares the lowercased name with that spelling):
// A and AAAA the records' addresses of that family, each once; TXT and PTR
// NXDOMAIN; anything else NODATA.
func (q *query) nsNameAnswer(owner string, qtype uint16) ([]dns.RR, error) {
	switch qtype {
	case dns.TypeTXT, dns.TypePTR:
		return nil, errName
	case dns.TypeA, dns.TypeAAAA:
	default:
		return nil, nil
	}
	var ips []netip.Addr
	for _, r := range q.nsRecords() {
		if r.ip.Is4() == (qtype == dns.TypeA) {
			ips = append(ips, r.ip)
		}
	}
	return q.addrRecords(owner, qtype, dedupe(ips)), nil
}

// addrRR is an A or AAAA record of ip owned by name.
func (q *query) addrRR(name string, ip netip.Addr) dns.RR {
	if ip.Is4() {
		return &dns.A{Hdr: q.hdr(name, dns.TypeA), A: ip.AsSlice()}
	}
	return &dns.AAAA{Hdr: q.hdr(name, dns.TypeAAAA), AAAA: ip.AsSlice()}
}

// isNSName reports whether name (lowercased) is the name server's name in
// zoneq, the question's spelling of the zone.
func isNSName(name, zoneq string) bool {
	return strings.HasPrefix(name, nsPrefix) && name[len(nsPrefix):] == zoneq
}
