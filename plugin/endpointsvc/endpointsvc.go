// Package endpointsvc is a CoreDNS plugin that answers service names of an
// orchestrator (<service>[.<namespace>].svc.orch, SRV
// _<port>._<proto>.<service>…, <node>.node.svc.orch) from one endpoint set:
// the tasks that IsEndpoint admits. Sources (a state file, an orchestrator's
// HTTP API) build a State off the hot path; the plugin turns it into an
// immutable table and swaps it in through an atomic pointer. ServeDNS only
// reads that table.
package endpointsvc

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/pkg/upstream"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/pkg/soa"

	"github.com/miekg/dns"
)

// Endpointsvc is the plugin handler. The fields set by parse are read-only
// after setup; tbl is swapped by the sync loop and read by ServeDNS.
type Endpointsvc struct {
	Next plugin.Handler

	Zones     []string // lowercased FQDNs
	Fall      fall.F
	namespace string // namespace of short names
	spec      bool   // schema kubernetes: the Kubernetes DNS specification (spec_serve.go)
	primary   int    // schema kubernetes: the zone PTR targets are in (the first forward zone)

	podsInsecure bool // schema kubernetes: answer <a-b-c-d>.<ns>.pod.<zone>
	ttl          uint32
	source       Source
	upstream     *upstream.Upstream // chases CNAME targets through the server

	soas []soa.Names // per zone, precomputed SOA names

	// counters holds the requests_total counters: server → *serverCounters,
	// resolved on the first query per server and zone, then only loaded.
	counters sync.Map

	*syncer // includeUnhealthy, snapshotPath and the served table
}

// ServeDNS implements plugin.Handler.
func (e *Endpointsvc) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := state.Name()
	zi := -1
	zlen := 0
	for i, z := range e.Zones {
		if len(z) > zlen && inZone(qname, z) {
			zi, zlen = i, len(z)
		}
	}
	if zi < 0 {
		return plugin.NextOrFailure(e.Name(), e.Next, ctx, w, r)
	}
	zone := e.Zones[zi]
	t := e.tbl.Load()
	if t == nil {
		// no table yet: a name the block's fallthrough covers goes on (as
		// the kubernetes plugin does before its first sync), anything else
		// is SERVFAIL
		if e.Fall.Through(qname) {
			e.count(ctx, zi, resultFallthrough)
			return plugin.NextOrFailure(e.Name(), e.Next, ctx, w, r)
		}
		e.count(ctx, zi, resultServfail)
		return dns.RcodeServerFailure, nil
	}
	if e.spec {
		return e.serveSpec(ctx, w, r, state, zi, t)
	}

	owner := state.QName()
	qtype := state.QType()
	var answer, extra []dns.RR
	exists := false
	n := parseName(qname, zone, e.namespace)
	switch n.kind {
	case kindApex:
		exists = true
		if qtype == dns.TypeSOA {
			answer = []dns.RR{e.soa(zi, owner, t.serial)}
		}
	case kindService:
		if se := t.services[svcKey{n.namespace, n.service}]; se != nil {
			exists = true
			if se.cname != "" {
				answer = e.cname(ctx, state, owner, se.cname, qtype)
				break
			}
			switch qtype {
			case dns.TypeA:
				answer = e.a(owner, se.addrs)
			case dns.TypeAAAA:
				answer = e.aaaa(owner, se.addrs)
			case dns.TypeSRV:
				answer, extra = e.srv(owner, zi, se.srv)
			}
		}
	case kindSRV:
		if se := t.services[svcKey{n.namespace, n.service}]; se != nil {
			if targets, ok := se.port(portKey{n.port, n.proto}); ok {
				exists = true
				if qtype == dns.TypeSRV {
					answer, extra = e.srv(owner, zi, targets)
				}
			}
		}
	case kindNode:
		if ne := t.nodes[n.node]; ne != nil {
			exists = true
			switch qtype {
			case dns.TypeA:
				answer = e.a(owner, ne.addrs)
			case dns.TypeAAAA:
				answer = e.aaaa(owner, ne.addrs)
			}
		}
	}

	return e.reply(ctx, w, r, zi, !exists, answer, extra, func() dns.RR { return e.soa(zi, zone, t.serial) })
}

// reply writes the answer of zone number zi: NXDOMAIN (or the next plugin,
// when fallthrough says so) when the name does not exist, NODATA when it
// has no records of the type, else answer and extra. soa gives the
// authority section's record.
func (e *Endpointsvc) reply(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zi int, nxdomain bool, answer, extra []dns.RR, soa func() dns.RR) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	result := resultAnswer
	switch {
	case nxdomain:
		if e.Fall.Through(strings.ToLower(r.Question[0].Name)) {
			e.count(ctx, zi, resultFallthrough)
			return plugin.NextOrFailure(e.Name(), e.Next, ctx, w, r)
		}
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa()}
		result = resultNxdomain
	case len(answer) == 0:
		m.Ns = []dns.RR{soa()}
		result = resultNodata
	default:
		m.Answer, m.Extra = answer, extra
	}
	e.count(ctx, zi, result)
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// count increments requests_total for zone number zi and result.
func (e *Endpointsvc) count(ctx context.Context, zi, result int) {
	server := metrics.WithServer(ctx)
	v, ok := e.counters.Load(server)
	if !ok {
		v, _ = e.counters.LoadOrStore(server, &serverCounters{zones: make([]atomic.Pointer[requestCounters], len(e.Zones))})
	}
	z := &v.(*serverCounters).zones[zi]
	rc := z.Load()
	if rc == nil {
		z.CompareAndSwap(nil, newRequestCounters(server, e.Zones[zi]))
		rc = z.Load()
	}
	rc.c[result].Inc()
}

// Name implements plugin.Handler.
func (e *Endpointsvc) Name() string { return pluginName }

func (e *Endpointsvc) a(owner string, a addrs) []dns.RR {
	n := a.n4()
	if n == 0 {
		return nil
	}
	rrs := make([]dns.RR, n)
	recs := make([]dns.A, n)
	for i := range recs {
		recs[i] = dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: e.ttl}, A: a.ip4(i)}
		rrs[i] = &recs[i]
	}
	return rrs
}

func (e *Endpointsvc) aaaa(owner string, a addrs) []dns.RR {
	n := a.n6()
	if n == 0 {
		return nil
	}
	rrs := make([]dns.RR, n)
	recs := make([]dns.AAAA, n)
	for i := range recs {
		recs[i] = dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: e.ttl}, AAAA: a.ip6(i)}
		rrs[i] = &recs[i]
	}
	return rrs
}

// srv returns one SRV record per target (target <node>.node.<zone>, zone
// number zi) and the targets' A/AAAA records for the additional section,
// each node once.
func (e *Endpointsvc) srv(owner string, zi int, targets []srvTarget) (answer, extra []dns.RR) {
	if len(targets) == 0 {
		return nil, nil
	}
	// targets are sorted by node: count each node's addresses once
	n4, n6 := 0, 0
	for i, t := range targets {
		if i == 0 || t.node != targets[i-1].node {
			n4, n6 = n4+t.node.n4(), n6+t.node.n6()
		}
	}
	answer = make([]dns.RR, len(targets))
	extra = make([]dns.RR, 0, n4+n6)
	recs := make([]dns.SRV, len(targets))
	as, aaaas := make([]dns.A, n4), make([]dns.AAAA, n6)
	for i, t := range targets {
		target := t.node.targets[zi]
		if i == 0 || t.node != targets[i-1].node {
			for j := range t.node.n4() {
				as[0] = dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: e.ttl}, A: t.node.ip4(j)}
				extra, as = append(extra, &as[0]), as[1:]
			}
			for j := range t.node.n6() {
				aaaas[0] = dns.AAAA{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: e.ttl}, AAAA: t.node.ip6(j)}
				extra, aaaas = append(extra, &aaaas[0]), aaaas[1:]
			}
		}
		recs[i] = dns.SRV{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: e.ttl},
			Priority: 0, Weight: 10, Port: t.port, Target: target}
		answer[i] = &recs[i]
	}
	return answer, extra
}

// soa is zone number zi's SOA record with owner (the zone, or the query's
// spelling of it).
func (e *Endpointsvc) soa(zi int, owner string, serial uint32) dns.RR {
	rr := e.soas[zi].New(e.ttl, serial)
	rr.Hdr.Name = owner
	return rr
}

// chaseKey marks a context that is chasing a CNAME target; its value is the
// number of CNAMEs followed so far.
type chaseKey struct{}

// maxChase bounds how many CNAMEs one reply follows (a loop of Services
// pointing at each other ends there).
const maxChase = 8

// cname answers a service that has an FQDN endpoint: one CNAME to target,
// and for any other type than CNAME the target's records of that type,
// looked up through the whole server (as the kubernetes plugin does for
// ExternalName Services), so the client gets the final A/AAAA in the same
// reply.
func (e *Endpointsvc) cname(ctx context.Context, state request.Request, owner, target string, qtype uint16) []dns.RR {
	rr := &dns.CNAME{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: e.ttl}, Target: target}
	answer := []dns.RR{rr}
	if qtype == dns.TypeCNAME || e.upstream == nil {
		return answer
	}
	depth, _ := ctx.Value(chaseKey{}).(int)
	if depth >= maxChase {
		return answer
	}
	m, err := e.upstream.Lookup(context.WithValue(ctx, chaseKey{}, depth+1), state, target, qtype)
	if err != nil || m == nil {
		return answer
	}
	return append(answer, m.Answer...)
}
