package k8sdns

import (
	"net/netip"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"

	"github.com/miekg/dns"
)

// ptr answers a reverse name of a whole address as the kubernetes plugin
// does: the Service whose cluster IP it is, else every ready endpoint with
// that address - of any slice labelled with a Service name, whether or not
// that Service exists - each target once. Targets are in the block's
// first forward zone. Any other name in the zones is looked up as a name.
func (q *query) ptr(name, owner string) ([]dns.RR, error) {
	a := dnsutil.ExtractAddressFromReverse(name)
	if a == "" {
		_, err := q.items(name)
		return nil, err
	}
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return nil, errName
	}
	rs, ok := q.t.rev.Get(ip.Unmap().As16())
	if !ok {
		return nil, errName
	}
	primary := q.s.Zones[q.s.Primary]
	if r := rs.first; r.slice == clusterIP {
		s := q.t.refSvc(r)
		return []dns.RR{&dns.PTR{Hdr: q.hdr(owner, dns.TypePTR), Ptr: s.Name + "." + s.Namespace + ".svc." + primary}}, nil
	}
	var out []dns.RR
	for _, r := range rs.list() {
		sl := q.t.refSlice(r)
		target := sl.label(int(r.ep), q.s.EndpointPodNames, ip.Unmap().String()) + "." + sl.Service + "." + sl.Namespace + ".svc." + primary
		if !hasPTR(out, target) {
			out = append(out, &dns.PTR{Hdr: q.hdr(owner, dns.TypePTR), Ptr: target})
		}
	}
	if len(out) == 0 {
		return nil, errName
	}
	return out, nil
}

// hasPTR reports whether rrs has a PTR to target (an address is in few
// endpoints).
func hasPTR(rrs []dns.RR, target string) bool {
	for _, rr := range rrs {
		if rr.(*dns.PTR).Ptr == target {
			return true
		}
	}
	return false
}
