package k8sdns

import (
	"context"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// Server answers the specification's names from a Table. Its fields are
// set once (from the Corefile) and only read afterwards.
type Server struct {
	Zones        []string // lowercased FQDNs
	Multicluster []bool   // per zone (nil: none): a multicluster zone, whose names are the ServiceImports'
	Primary      int      // the zone PTR targets are in (the first forward zone)
	TTL          uint32
	PodsInsecure bool     // answer <a-b-c-d>.<ns>.pod.<zone> with the address in the name
	PodsVerified bool     // answer it when a Pod of <ns> has that address (the table's pod index)
	Upstream     Upstream // looks CNAME targets outside the zone up; nil: none
	Search       []string // the server's own search list (its resolv.conf), lowercased FQDNs: AutoPath's tail

	EndpointPodNames   bool // endpoint_pod_names: an endpoint without hostname is named by its Pod
	IgnoreEmptyService bool // ignore empty_service: a ClusterIP Service without ready endpoints is NXDOMAIN

	localIPs atomic.Pointer[[]netip.Addr] // the server's own addresses (SetLocalIPs)
}

// Upstream looks a name up through the whole server (plugin/pkg/upstream).
type Upstream interface {
	Lookup(ctx context.Context, state request.Request, name string, typ uint16) (*dns.Msg, error)
}

// Reply is the answer to one query: NXDOMAIN (NameError), REFUSED, NODATA
// (no Answer) or Answer and Extra.
type Reply struct {
	NameError bool
	Refused   bool
	Answer    []dns.RR
	Extra     []dns.RR
}

// Version is the version of the Kubernetes DNS specification that
// dns-version.<zone> announces; versionTTL its TTL (the kubernetes
// plugin's).
const (
	Version    = "1.1.0"
	versionTTL = 28800
)

// maxChain bounds a chain of CNAMEs (the kubernetes plugin's).
const maxChain = 10

// Serve answers state's question, whose name is in zone number zi, from t.
// Answers echo the question's spelling; names the table makes up (SRV
// targets) use the question's spelling of the zone.
func (s *Server) Serve(ctx context.Context, state request.Request, zi int, t *Table, serial uint32) Reply {
	name, owner := state.Name(), state.QName()
	zone := s.Zones[zi]
	q := &query{s: s, t: t, ctx: ctx, state: state, zone: zone, zoneq: owner[len(owner)-len(zone):], mc: zi < len(s.Multicluster) && s.Multicluster[zi]}
	var err error
	var rp Reply
	qtype := state.QType()
	if isNSName(name, q.zoneq) {
		rp.Answer, err = q.nsNameAnswer(owner, qtype)
		rp.NameError = err != nil
		return rp
	}
	switch qtype {
	case dns.TypeA, dns.TypeAAAA:
		rp.Answer, err = q.addrs(name, owner, qtype, nil)
	case dns.TypeTXT:
		rp.Answer, err = q.txt(name, owner)
	case dns.TypeCNAME:
		rp.Answer, err = q.cname(name, owner)
	case dns.TypePTR:
		rp.Answer, err = q.ptr(name, owner)
	case dns.TypeSRV:
		rp.Answer, rp.Extra, err = q.srv(name, owner)
	case dns.TypeSOA:
		// the zone's SOA; NODATA for any other name, whether or not it
		// exists (the kubernetes plugin's rule)
		if name == zone {
			rp.Answer = []dns.RR{s.SOA(q.zoneq, serial)}
		}
	case dns.TypeAXFR, dns.TypeIXFR:
		rp.Refused = true
	case dns.TypeNS:
		if name == q.zoneq { // the lowercased name equals the zone as asked
			rp.Answer, rp.Extra = q.nsAnswer(owner)
			break
		}
		_, err = q.items(name)
	default:
		// does the name exist? (the kubernetes plugin asks for its A records)
		_, err = q.items(name)
	}
	rp.NameError = err != nil
	return rp
}

// SOA is the zone's SOA as the kubernetes plugin writes it, zone in the
// question's spelling: ns.dns.<zone>, hostmaster.<zone>.
func (s *Server) SOA(zoneq string, serial uint32) *dns.SOA {
	return &dns.SOA{Hdr: dns.RR_Header{Name: zoneq, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: min(s.TTL, 300)},
		Ns: dnsutil.Join("ns.dns", zoneq), Mbox: dnsutil.Join("hostmaster", zoneq),
		Serial: serial, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: s.TTL}
}

// query is one question being answered.
type query struct {
	s     *Server
	t     *Table
	ctx   context.Context
	state request.Request
	zone  string // lowercased
	zoneq string // the question's spelling
	mc    bool   // a multicluster zone
}

func (q *query) hdr(owner string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: rrtype, Class: dns.ClassINET, Ttl: q.s.TTL}
}

// items parses name (lowercased, in q.zone) and returns its items.
func (q *query) items(name string) ([]item, error) {
	r, empty, err := parseRequest(relative(name, q.zone), q.mc)
	if err != nil || empty {
		return nil, err
	}
	if dnsutil.IsReverse(name) > 0 {
		return nil, errName
	}
	return q.s.records(q.t, &r, q.mc)
}

// addrs answers A or AAAA for name (lowercased; owner its spelling): the
// addresses of that family, once each. Without addresses, a CNAME target
// (an ExternalName, or a headless Service's FQDN endpoints: the first) is
// followed inside the zone, or through the server for a name outside it,
// as the kubernetes plugin follows it; chain holds the CNAMEs followed so
// far.
func (q *query) addrs(name, owner string, qtype uint16, chain []*dns.CNAME) ([]dns.RR, error) {
	if rrs, host, ok := q.headlessAddrs(name, owner, qtype); ok {
		if host == "" {
			return rrs, nil
		}
		return q.chase(name, owner, host, qtype, chain), nil
	}
	items, err := q.items(name)
	if err != nil {
		return nil, err
	}
	host, hasIP := "", false
	ips := make([]netip.Addr, 0, len(items))
	for i := range items {
		switch it := &items[i]; {
		case it.host != "":
			if host == "" || it.host < host {
				host = it.host
			}
		case it.ip.Is4() == (qtype == dns.TypeA):
			ips = append(ips, it.ip)
			hasIP = true
		default:
			hasIP = true // of the other family
		}
	}
	if hasIP || host == "" {
		return q.addrRecords(owner, qtype, dedupe(ips)), nil // beside addresses, FQDNs are conflicts: IPs win
	}
	return q.chase(name, owner, host, qtype, chain), nil
}

// headlessAddrs answers A or AAAA for the plain name of a headless
// Service from the entry's precomputed addresses; ok is false for any
// other name. host is the CNAME target to follow when the Service has
// ready FQDN endpoints and no IP.
func (q *query) headlessAddrs(name, owner string, qtype uint16) (rrs []dns.RR, host string, ok bool) {
	r, empty, err := parseRequest(relative(name, q.zone), q.mc)
	if err != nil || empty || r.pod || r.service == "" || r.endpoint != "" || r.port != "" || r.protocol != "" {
		return nil, "", false
	}
	if _, exists := q.t.namespaces[r.namespace]; !exists {
		return nil, "", false
	}
	names := q.t.names
	if q.mc {
		names = q.t.imports
	}
	e, _ := names.Get(Key{Namespace: r.namespace, Name: r.service, Import: q.mc})
	if e == nil || e.svc == nil || e.svc.Kind != Headless || !e.hasReady() {
		return nil, "", false // the general path says what it is
	}
	if len(e.v4) == 0 && len(e.v6) == 0 {
		return nil, e.fqdn, true
	}
	n, size := len(e.v4)/4, 4
	if qtype == dns.TypeAAAA {
		n, size = len(e.v6)/16, 16
	}
	if n == 0 {
		return nil, "", true
	}
	rrs = make([]dns.RR, n)
	if qtype == dns.TypeA {
		recs := make([]dns.A, n)
		for i := range recs {
			recs[i] = dns.A{Hdr: q.hdr(owner, dns.TypeA), A: net.IP(e.v4[size*i : size*(i+1) : size*(i+1)])}
			rrs[i] = &recs[i]
		}
		return rrs, "", true
	}
	recs := make([]dns.AAAA, n)
	for i := range recs {
		recs[i] = dns.AAAA{Hdr: q.hdr(owner, dns.TypeAAAA), AAAA: net.IP(e.v6[size*i : size*(i+1) : size*(i+1)])}
		rrs[i] = &recs[i]
	}
	return rrs, "", true
}

// addrRecords makes the A or AAAA records of ips (one family, distinct).
func (q *query) addrRecords(owner string, qtype uint16, ips []netip.Addr) []dns.RR {
	if len(ips) == 0 {
		return nil
	}
	rrs := make([]dns.RR, len(ips))
	for i, ip := range ips {
		if qtype == dns.TypeA {
			rrs[i] = &dns.A{Hdr: q.hdr(owner, dns.TypeA), A: ip.AsSlice()}
		} else {
			rrs[i] = &dns.AAAA{Hdr: q.hdr(owner, dns.TypeAAAA), AAAA: ip.AsSlice()}
		}
	}
	return rrs
}

// dedupe drops repeated addresses, keeping the first of each, in time
// linear in their number.
func dedupe(ips []netip.Addr) []netip.Addr {
	if len(ips) < 2 {
		return ips
	}
	if len(ips) <= 8 {
		out := ips[:0]
	next:
		for _, ip := range ips {
			for _, o := range out {
				if o == ip {
					continue next
				}
			}
			out = append(out, ip)
		}
		return out
	}
	seen := make(map[netip.Addr]struct{}, len(ips))
	out := ips[:0]
	for _, ip := range ips {
		if _, dup := seen[ip]; !dup {
			seen[ip] = struct{}{}
			out = append(out, ip)
		}
	}
	return out
}

// chase returns owner's CNAME to target with the target's records of
// qtype, as the kubernetes plugin's A/AAAA follow one: nothing for a
// target at or below the name (a loop), past maxChain CNAMEs, or already
// in the chain; a target in the zone answers from the table, and only when
// it has records; one outside it through the server, with whatever that
// answers (the CNAME alone when it answers nothing).
func (q *query) chase(name, owner, target string, qtype uint16, chain []*dns.CNAME) []dns.RR {
	ftarget := dns.Fqdn(target)
	if dns.IsSubDomain(name, ftarget) || len(chain) > maxChain {
		return nil
	}
	for _, c := range chain {
		if c.Target == ftarget {
			return nil
		}
	}
	cname := &dns.CNAME{Hdr: q.hdr(owner, dns.TypeCNAME), Target: ftarget}
	if dns.IsSubDomain(q.zone, ftarget) {
		next, err := q.addrs(strings.ToLower(ftarget), ftarget, qtype, append(chain, cname))
		if err != nil || len(next) == 0 {
			return nil
		}
		return append([]dns.RR{cname}, next...)
	}
	if q.s.Upstream == nil {
		return []dns.RR{cname}
	}
	m, err := q.s.Upstream.Lookup(q.ctx, q.state, ftarget, qtype)
	if err != nil || m == nil {
		return nil
	}
	return append([]dns.RR{cname}, m.Answer...)
}

// txt answers dns-version.<zone> (in every zone of the block); any other
// name that stands for something has no TXT record (NODATA), and one that
// stands for nothing, such as a namespace, is NXDOMAIN (the kubernetes
// plugin's rule).
func (q *query) txt(name, owner string) ([]dns.RR, error) {
	if relative(name, q.zone) == "dns-version" {
		return []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: versionTTL},
			Txt: []string{Version}}}, nil
	}
	if items, _ := q.items(name); len(items) > 0 {
		return nil, nil
	}
	return nil, errName
}

// cname answers CNAME: the name's CNAME target when it stands for one and
// for no address.
func (q *query) cname(name, owner string) ([]dns.RR, error) {
	items, err := q.items(name)
	if err != nil {
		return nil, err
	}
	host := ""
	for i := range items {
		if items[i].host == "" {
			return nil, nil
		}
		if host == "" || items[i].host < host {
			host = items[i].host
		}
	}
	if host == "" {
		return nil, nil
	}
	return []dns.RR{&dns.CNAME{Hdr: q.hdr(owner, dns.TypeCNAME), Target: dns.Fqdn(host)}}, nil
}

// srv answers SRV: one record per distinct (target, port) of the addressed
// items, weight 100 divided by their number (at least 1, rounded down as
// the kubernetes plugin does), and each target's address once in the
// additional section. CNAME items have no SRV records and do not count.
func (q *query) srv(name, owner string) (answer, extra []dns.RR, err error) {
	items, err := q.items(name)
	if err != nil {
		return nil, nil, err
	}
	n := 0
	for i := range items {
		if items[i].host == "" {
			items[n] = items[i]
			n++
		}
	}
	items = items[:n]
	if n == 0 {
		return nil, nil, nil
	}
	weight := uint16(math.Floor(100.0 / float64(100*n) * 100))
	if weight == 0 {
		weight = 1
	}
	type srvKey struct {
		target string
		port   int32
		addr   netip.Addr
	}
	seen := make(map[srvKey]struct{}, 2*n)
	once := func(k srvKey) bool {
		if _, dup := seen[k]; dup {
			return false
		}
		seen[k] = struct{}{}
		return true
	}
	for i := range items {
		it := &items[i]
		if it.port == -1 {
			continue
		}
		target := it.target(q.zoneq, q.s.EndpointPodNames)
		if once(srvKey{target: target, port: it.port}) {
			answer = append(answer, &dns.SRV{Hdr: q.hdr(owner, dns.TypeSRV), Weight: weight, Port: uint16(it.port), Target: target})
		}
		if once(srvKey{target: target, port: -1, addr: it.ip}) {
			if it.ip.Is4() {
				extra = append(extra, &dns.A{Hdr: q.hdr(target, dns.TypeA), A: it.ip.AsSlice()})
			} else {
				extra = append(extra, &dns.AAAA{Hdr: q.hdr(target, dns.TypeAAAA), AAAA: it.ip.AsSlice()})
			}
		}
	}
	return answer, extra, nil
}
