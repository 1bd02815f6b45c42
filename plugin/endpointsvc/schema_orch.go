package endpointsvc

import (
	"context"
	"net/netip"
	"time"

	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"

	"github.com/miekg/dns"
)

// orchSchema is schema orch: the orchestrator's names, from orch's table.
// Hostname advertise addresses are resolved off the hot path (at sync and
// again every TTL, orch.HostResolver): a table is built with the addresses
// cached so far, and rebuilt from the last state when they change.
type orchSchema struct {
	srv              orch.Server
	includeUnhealthy bool
	endpointMode     bool
	refresh          time.Duration // how often hostnames are re-resolved

	resolver *orch.HostResolver
	state    *orch.State   // the last state, kept only when it has hostnames; syncer's lock
	kick     chan struct{} // asks background to resolve hostnames not cached yet
}

// orchCarry is what a reload hands over besides the table.
type orchCarry struct {
	state *orch.State
	hosts map[string][]netip.Addr
}

func (o *orchSchema) name() string { return "orch" }

func (o *orchSchema) decode(b []byte) (feed.State, error) { return orch.DecodeState(b) }

func (o *orchSchema) decodeSnapshot(b []byte) (feed.State, error) { return orch.DecodeSnapshot(b) }

func (o *orchSchema) logRecord(p feed.Patch) func([]byte) []byte {
	if op, ok := p.(*orch.Patch); ok {
		return op.AppendRecord
	}
	return nil
}

func (o *orchSchema) replay(st feed.State, recs [][]byte) (feed.State, int, error) {
	s, ok := st.(*orch.State)
	if !ok {
		return st, 0, errSchemaState(o, st)
	}
	return orch.Replay(s, recs)
}

func (o *orchSchema) build(st feed.State) modelTable {
	s, ok := st.(*orch.State)
	if !ok {
		log.Errorf("%v", errSchemaState(o, st))
		s = &orch.State{}
	}
	hosts := orch.Hostnames(s)
	resolved, missing := o.resolver.Cached(hosts)
	o.state = nil
	if len(hosts) > 0 {
		o.state = s // kept only to rebuild when a hostname's addresses change
	}
	if missing {
		select {
		case o.kick <- struct{}{}:
		default:
		}
	}
	return orch.BuildTable(s, o.srv.Zones, o.includeUnhealthy, o.endpointMode, resolved)
}

// patch applies p, unless hostnames are involved: their addresses are
// resolved from a whole state, which the source then builds.
func (o *orchSchema) patch(cur modelTable, p feed.Patch) (modelTable, feed.State) {
	op, ok := p.(*orch.Patch)
	t, ok2 := cur.(*orch.Table)
	if !ok || !ok2 {
		log.Errorf("%v", errSchemaState(o, p))
		return cur, nil
	}
	if o.state != nil || len(orch.Hostnames(op.State)) > 0 {
		return nil, op.Whole()
	}
	return t.Patched(op, o.srv.Zones, o.includeUnhealthy, o.endpointMode, nil), nil
}

func (o *orchSchema) serve(ctx context.Context, state request.Request, zi int, t *table) reply {
	answer, extra, nxdomain := o.srv.Serve(ctx, state, zi, t.model.(*orch.Table), t.serial)
	return reply{nxdomain: nxdomain, answer: answer, extra: extra}
}

// soa is the zone's SOA, owned by the zone as configured.
func (o *orchSchema) soa(zi int, _ string, serial uint32) dns.RR {
	return o.srv.SOA(zi, o.srv.Zones[zi], serial)
}

// background resolves the last state's hostnames: those not cached yet
// when build asks, all of them every refresh period.
func (o *orchSchema) background(ctx context.Context, rebuild func(func() modelTable)) {
	o.resolve(ctx, false, rebuild)
	t := time.NewTimer(o.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.kick:
			o.resolve(ctx, false, rebuild)
		case <-t.C:
			o.resolve(ctx, true, rebuild)
			t.Reset(o.refresh)
		}
	}
}

// resolve looks up the last state's hostnames (all of them with refresh,
// else those not cached yet) without holding the syncer's lock, and
// rebuilds the table when an address changed.
func (o *orchSchema) resolve(ctx context.Context, refresh bool, rebuild func(func() modelTable)) {
	var st *orch.State
	rebuild(func() modelTable { st = o.state; return nil }) // read under the lock
	if st == nil {
		return
	}
	if !o.resolver.Resolve(ctx, orch.Hostnames(st), refresh) || ctx.Err() != nil {
		return
	}
	rebuild(func() modelTable {
		if o.state == nil || ctx.Err() != nil {
			return nil
		}
		log.Infof("Hostname advertise addresses changed; rebuilt the table")
		return o.build(o.state)
	})
}

func (o *orchSchema) carry() any { return &orchCarry{state: o.state, hosts: o.resolver.Snapshot()} }

func (o *orchSchema) restore(c any) {
	if oc, ok := c.(*orchCarry); ok {
		o.resolver.Restore(oc.hosts)
		o.state = oc.state
	}
}
