package endpointsvc

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// dnsSchemaVersion is the version of the Kubernetes DNS specification that
// dns-version.<zone> announces.
const dnsSchemaVersion = "1.1.0"

// dnsVersionTTL is the TTL of the dns-version record (the kubernetes
// plugin's).
const dnsVersionTTL = 28800

// maxSpecChain bounds the CNAME chain followed inside the zones.
const maxSpecChain = 10

// serveSpec answers a query in zone number zi with schema kubernetes from
// table t. Answers echo the query's spelling; names the table makes up
// (SRV targets, the SOA) use the query's spelling of the zone.
func (e *Endpointsvc) serveSpec(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, state request.Request, zi int, t *table) (int, error) {
	qname, owner := state.Name(), state.QName()
	zone := e.Zones[zi]
	zoneq := owner[len(owner)-len(zone):]
	st := t.spec
	var answer, extra []dns.RR
	var err error
	switch qtype := state.QType(); qtype {
	case dns.TypeA, dns.TypeAAAA:
		answer, err = e.specAddrs(ctx, state, st, qname, owner, zone, qtype, 0)
	case dns.TypeTXT:
		answer, err = e.specTXT(st, qname, owner, zone)
	case dns.TypeCNAME:
		var items []specItem
		if items, err = e.specRecords(st, qname, zone); err == nil && len(items) > 0 && items[0].host != "" {
			answer = []dns.RR{&dns.CNAME{Hdr: e.hdr(owner, dns.TypeCNAME), Target: items[0].host}}
		}
	case dns.TypePTR:
		answer, err = e.specPTR(st, qname, owner, zone)
	case dns.TypeSRV:
		answer, extra, err = e.specSRV(st, qname, owner, zone, zoneq)
	case dns.TypeSOA:
		if qname == zone {
			answer = []dns.RR{e.specSOA(zoneq, t.serial)}
		}
	case dns.TypeAXFR, dns.TypeIXFR:
		return dns.RcodeRefused, nil
	default:
		// does the name exist? (the kubernetes plugin asks for its A records)
		_, err = e.specRecords(st, qname, zone)
	}

	return e.reply(ctx, w, r, zi, err != nil, answer, extra, func() dns.RR { return e.specSOA(zoneq, t.serial) })
}

func (e *Endpointsvc) hdr(owner string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: rrtype, Class: dns.ClassINET, Ttl: e.ttl}
}

// specSOA is the zone's SOA as the kubernetes plugin writes it: zone in the
// query's spelling, ns.dns.<zone>, hostmaster.<zone>.
func (e *Endpointsvc) specSOA(zoneq string, serial uint32) dns.RR {
	ttl := min(e.ttl, 300)
	return &dns.SOA{Hdr: dns.RR_Header{Name: zoneq, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns: dnsutil.Join("ns.dns", zoneq), Mbox: dnsutil.Join("hostmaster", zoneq),
		Serial: serial, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: e.ttl}
}

// specAddrs answers A or AAAA for name (lowercased), owner its spelling:
// the addresses of that family, once each; a CNAME target inside the zone
// is followed here (the CNAME and the target's records only when it has
// some), one outside through the whole server.
func (e *Endpointsvc) specAddrs(ctx context.Context, state request.Request, st *specTable, name, owner, zone string, qtype uint16, depth int) ([]dns.RR, error) {
	items, err := e.specRecords(st, name, zone)
	if err != nil {
		return nil, err
	}
	var out []dns.RR
	for i := range items {
		it := &items[i]
		if it.host != "" {
			out = append(out, e.specChase(ctx, state, st, name, owner, zone, it.host, qtype, depth)...)
			continue
		}
		if it.ip.Is4() != (qtype == dns.TypeA) || seenAddr(items[:i], it) {
			continue
		}
		if qtype == dns.TypeA {
			out = append(out, &dns.A{Hdr: e.hdr(owner, dns.TypeA), A: it.ip.AsSlice()})
		} else {
			out = append(out, &dns.AAAA{Hdr: e.hdr(owner, dns.TypeAAAA), AAAA: it.ip.AsSlice()})
		}
	}
	return out, nil
}

// seenAddr reports whether an item before it has its address.
func seenAddr(before []specItem, it *specItem) bool {
	for i := range before {
		if before[i].host == "" && before[i].ip == it.ip {
			return true
		}
	}
	return false
}

// specChase returns owner's CNAME to target and the target's records of
// qtype. A loop (the target is the name or below it) or a chain longer than
// maxSpecChain gives nothing.
func (e *Endpointsvc) specChase(ctx context.Context, state request.Request, st *specTable, name, owner, zone, target string, qtype uint16, depth int) []dns.RR {
	lower := strings.ToLower(target)
	if inZone(lower, name) || depth >= maxSpecChain {
		return nil
	}
	cname := &dns.CNAME{Hdr: e.hdr(owner, dns.TypeCNAME), Target: target}
	if inZone(lower, zone) {
		next, err := e.specAddrs(ctx, state, st, lower, target, zone, qtype, depth+1)
		if err != nil || len(next) == 0 {
			return nil
		}
		return append([]dns.RR{cname}, next...)
	}
	depthOut, _ := ctx.Value(chaseKey{}).(int)
	if e.upstream == nil || depthOut >= maxChase {
		return nil
	}
	m, err := e.upstream.Lookup(context.WithValue(ctx, chaseKey{}, depthOut+1), state, target, qtype)
	if err != nil || m == nil {
		return nil
	}
	return append([]dns.RR{cname}, m.Answer...)
}

// specTXT answers dns-version.<zone> (in every zone of the block); any
// other name that exists has no TXT record (NODATA), and one that stands
// for nothing, such as a namespace, is NXDOMAIN (the kubernetes plugin's
// rule).
func (e *Endpointsvc) specTXT(st *specTable, name, owner, zone string) ([]dns.RR, error) {
	if relative(name, zone) == "dns-version" {
		return []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: dnsVersionTTL},
			Txt: []string{dnsSchemaVersion}}}, nil
	}
	items, _ := e.specRecords(st, name, zone)
	if len(items) == 0 {
		return nil, errSpecName
	}
	return nil, nil
}

// specPTR answers a reverse name of a whole address: the Service whose
// cluster IP it is, else every endpoint with that address (each name once).
// Targets are in the block's first forward zone.
func (e *Endpointsvc) specPTR(st *specTable, name, owner, zone string) ([]dns.RR, error) {
	a := dnsutil.ExtractAddressFromReverse(name)
	if a == "" {
		_, err := e.specRecords(st, name, zone)
		return nil, err
	}
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return nil, errSpecName
	}
	primary := e.Zones[e.primary]
	var out []dns.RR
next:
	for _, p := range st.reverse(ip) {
		svc := st.list[p.svc]
		target := svc.name + "." + svc.namespace + ".svc." + primary
		if p.ep >= 0 {
			target = svc.label(int(p.ep)) + "." + target
		}
		for _, rr := range out { // an address is in few Services
			if rr.(*dns.PTR).Ptr == target {
				continue next
			}
		}
		out = append(out, &dns.PTR{Hdr: e.hdr(owner, dns.TypePTR), Ptr: target})
	}
	if len(out) == 0 {
		return nil, errSpecName
	}
	return out, nil
}

// specSRV answers SRV: one record per distinct (target, port) of the
// addressed items, weight 100 divided by the number of items (at least 1),
// and each target's address once in the additional section. CNAME items
// (ExternalName) have no SRV records.
func (e *Endpointsvc) specSRV(st *specTable, name, owner, zone, zoneq string) (answer, extra []dns.RR, err error) {
	items, err := e.specRecords(st, name, zone)
	if err != nil {
		return nil, nil, err
	}
	n := 0
	for i := range items {
		if items[i].host == "" {
			n++
		}
	}
	if n == 0 {
		return nil, nil, nil
	}
	weight := uint16(100 / n)
	if weight == 0 {
		weight = 1
	}
	// dedupe (target, port) and (target, address): a linear scan, as the
	// records of one name are few (a map for a large headless Service)
	var seen map[string]bool
	if n > 16 {
		seen = make(map[string]bool, 2*n)
	}
	once := func(key func() string, rrs []dns.RR, same func(dns.RR) bool) bool {
		if seen != nil {
			k := key()
			if seen[k] {
				return false
			}
			seen[k] = true
			return true
		}
		for _, rr := range rrs {
			if same(rr) {
				return false
			}
		}
		return true
	}
	for i := range items {
		it := &items[i]
		if it.host != "" || it.port == -1 {
			continue
		}
		target := it.target(zoneq)
		port := uint16(it.port)
		if once(func() string { return "s " + strings.ToLower(target) + " " + strconv.Itoa(it.port) }, answer, func(rr dns.RR) bool {
			s := rr.(*dns.SRV)
			return s.Port == port && strings.EqualFold(s.Target, target)
		}) {
			answer = append(answer, &dns.SRV{Hdr: e.hdr(owner, dns.TypeSRV), Priority: 0, Weight: weight, Port: port, Target: target})
		}
		ip := it.ip
		if once(func() string { return "a " + strings.ToLower(target) + " " + ip.String() }, extra, func(rr dns.RR) bool {
			return strings.EqualFold(rr.Header().Name, target) && rrAddr(rr) == ip
		}) {
			if ip.Is4() {
				extra = append(extra, &dns.A{Hdr: e.hdr(target, dns.TypeA), A: ip.AsSlice()})
			} else {
				extra = append(extra, &dns.AAAA{Hdr: e.hdr(target, dns.TypeAAAA), AAAA: ip.AsSlice()})
			}
		}
	}
	return answer, extra, nil
}

// rrAddr is the address of an A or AAAA record.
func rrAddr(rr dns.RR) netip.Addr {
	var ip net.IP
	switch r := rr.(type) {
	case *dns.A:
		ip = r.A
	case *dns.AAAA:
		ip = r.AAAA
	}
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}
