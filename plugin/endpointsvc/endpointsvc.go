// Package endpointsvc is a CoreDNS plugin that answers service names from
// a table built off the hot path, in one of two schemas, each a model of
// its own: the orchestrator's names (<service>[.<namespace>].svc.orch, SRV
// _<port>._<proto>.<service>…, <node>.node.svc.orch; package orch) or the
// Kubernetes DNS specification (schema kubernetes, cluster DNS; package
// k8sdns). Sources (a state file, an orchestrator's HTTP API, the
// Kubernetes API: package kubesource) deliver the schema's states and
// patches (package feed); the plugin turns them into an immutable table,
// swaps it in through an atomic pointer and keeps it in a snapshot.
// ServeDNS only reads that table.
package endpointsvc

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"

	"github.com/miekg/dns"
)

// Endpointsvc is the plugin handler. The fields set by parse are read-only
// after setup; the table is swapped by the syncer and read by ServeDNS.
type Endpointsvc struct {
	Next plugin.Handler

	Zones  []string // lowercased FQDNs
	Fall   fall.F
	schema schema // the names and records served (orch or kubernetes)
	source feed.Source

	// counters holds the requests_total counters: server → *serverCounters,
	// resolved on the first query per server and zone, then only loaded.
	counters sync.Map

	*syncer // the served table, the snapshot, the carry-over

	publishing  *publishing  // publish: nil without it
	replicating *replicating // replicate: nil without it
	stale       staleEDE     // stale_ede
}

// ServeDNS implements plugin.Handler: it matches the zone, loads the
// table and hands the question to the schema.
func (e *Endpointsvc) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := state.Name()
	zi, zlen := -1, 0
	for i, z := range e.Zones {
		if len(z) > zlen && inZone(qname, z) {
			zi, zlen = i, len(z)
		}
	}
	if zi < 0 {
		return plugin.NextOrFailure(e.Name(), e.Next, ctx, w, r)
	}
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
	rp := e.schema.serve(ctx, state, zi, t)
	if rp.refused {
		return dns.RcodeRefused, nil
	}
	return e.reply(ctx, w, r, zi, rp, t)
}

// reply is a schema's answer to a question.
type reply struct {
	nxdomain, refused bool
	answer, extra     []dns.RR
}

// reply writes the answer of zone number zi: NXDOMAIN (or the next plugin,
// when fallthrough says so) when the name does not exist, NODATA when it
// has no records of the type, else answer and extra. The authority
// section's SOA is the schema's, in the question's spelling of the zone.
func (e *Endpointsvc) reply(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zi int, rp reply, t *table) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	result := resultAnswer
	switch {
	case rp.nxdomain:
		if e.Fall.Through(dns.CanonicalName(r.Question[0].Name)) {
			e.count(ctx, zi, resultFallthrough)
			return plugin.NextOrFailure(e.Name(), e.Next, ctx, w, r)
		}
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{e.schema.soa(zi, r.Question[0].Name, t.serial)}
		result = resultNxdomain
	case len(rp.answer) == 0:
		m.Ns = []dns.RR{e.schema.soa(zi, r.Question[0].Name, t.serial)}
		result = resultNodata
	default:
		m.Answer, m.Extra = rp.answer, rp.extra
	}
	e.count(ctx, zi, result)
	e.markStale(m, r)
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

// inZone reports whether name is zone or below it; both are lowercased
// FQDNs (dns.IsSubDomain without its allocations, for the query path).
func inZone(name, zone string) bool {
	if zone == "." {
		return true
	}
	return name == zone || (len(name) > len(zone) && name[len(name)-len(zone)-1] == '.' && name[len(name)-len(zone):] == zone)
}
