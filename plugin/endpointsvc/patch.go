package endpointsvc

import (
	"context"
	"io"
	"time"
)

// Patch is a change to part of a source's state, for sources that know
// what changed (the kubernetes source): applying it costs work in
// proportion to the change, not to the cluster.
type Patch struct {
	// State holds the services that changed, each with all of its tasks,
	// and the nodes those tasks run on (with every service that has a task
	// on a dirty node); its Namespaces are the namespace list when
	// SetNamespaces.
	State         *State
	Removed       []svcKey        // services no longer in the state
	DirtyNodes    map[string]bool // names of nodes that changed: their entries are State's, or gone
	SetNamespaces bool

	// Full builds the whole state, for when the table cannot be patched
	// (hostname advertise addresses, which the plugin re-resolves from a
	// whole state).
	Full func() *State
	// Snapshot writes the source's whole current state in the snapshot
	// form (encodeCompact's); the snapshot writer calls it, at most once a
	// second, off the sync path.
	Snapshot func(io.Writer) error
}

// applyPatch patches the served table, or rebuilds it from p.Full when it
// cannot, and hands the snapshot writer the source's whole state. Once ctx
// is done it does nothing.
func (e *Endpointsvc) applyPatch(ctx context.Context, p *Patch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	cur := e.tbl.Load()
	switch {
	case cur == nil || e.state != nil || len(hostnames(p.State)) > 0:
		e.swap(p.Full())
	case e.spec:
		sp := cur.spec.patched(p.State, p.Removed, p.SetNamespaces)
		e.publish(&table{spec: sp, serial: e.nextSerial(), nServices: len(sp.services), nEndpts: sp.nEndpts})
	default:
		e.publish(cur.patched(p.State, p.Removed, p.DirtyNodes, e.Zones, e.includeUnhealthy, e.endpointMode, nil, e.nextSerial()))
	}
	if e.snapshot != nil && p.Snapshot != nil {
		e.snapshot.Offer(p.Snapshot, e.tbl.Load().nServices, start)
	}
}

// nextSerial advances the SOA serial: the time in seconds, or one more than
// the last when that is not later; e.mu is held.
func (e *Endpointsvc) nextSerial() uint32 {
	e.serial++
	if now := uint32(time.Now().Unix()); now > e.serial {
		e.serial = now
	}
	return e.serial
}
