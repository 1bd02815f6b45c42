package orch

import (
	"io"
	"net/netip"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
)

// Patch is a change to part of a source's state, for sources that know
// what changed (the kubernetes source): applying it costs work in
// proportion to the change, not to the cluster.
type Patch struct {
	// State holds the services that changed, each with all of its tasks,
	// and the nodes those tasks run on (with every service that has a task
	// on a dirty node). With WriteServices set, State.Tasks is read only
	// while the patch is applied (Table.Patched, which keeps no task), and
	// so is State.Nodes when DirtyNodes is empty (the change log's record
	// carries the dirty nodes only): the source may reuse their arrays for
	// its next patch.
	State      *State
	Removed    []SvcKey        // services no longer in the state
	DirtyNodes map[string]bool // names of nodes that changed: their entries are State's, or gone
	// Programmed are the API changes this patch brings into the table,
	// for the programming latency (the kubernetes source's).
	Programmed []feed.Trigger

	// Whole builds the source's whole state, for when the table cannot be
	// patched (hostname advertise addresses, which the plugin re-resolves
	// from a whole state).
	Whole func() *State
	// WriteServices, when set, writes State's services, each with all of
	// its tasks (CompactWriter.Service, CompactWriter.Task), for the change
	// log's record, which is encoded later, off the sync path: a source
	// that writes them from objects of its own (the kubernetes source, as
	// its snapshot does) keeps no tasks for the record. Without it, the
	// record is written from State.
	WriteServices func(*CompactWriter) error
	// WriteSnapshot writes the source's whole current state in the
	// snapshot form (the compact form); the snapshot writer calls it, at
	// most once a second, off the sync path.
	WriteSnapshot func(io.Writer) error
}

// Triggers implements feed.Triggered.
func (p *Patch) Triggers() []feed.Trigger { return p.Programmed }

// Len is the number of services the patch changes.
func (p *Patch) Len() int { return len(p.State.Services) + len(p.Removed) }

// Snapshot writes the source's whole state.
func (p *Patch) Snapshot(w io.Writer) error { return p.WriteSnapshot(w) }

// Patched returns a new table that is t with the services of p.State
// (each with its whole endpoint set) replacing or adding theirs and the
// services in p.Removed gone; the nodes in p.DirtyNodes get the entries of
// p.State's nodes of that name, or none when it has no such node. A node
// of p.State that is not dirty keeps its entry (services left alone point
// at it). It copies only the paths to what changes in the persistent maps;
// every other entry is shared with t, which stays valid and unchanged for
// the readers that still hold it.
//
// It relies on the source putting in p.State every service with an
// endpoint on a dirty node, so that no entry left alone points at a
// replaced node.
func (t *Table) Patched(p *Patch, zones []string, includeUnhealthy, endpointMode bool, resolved map[string][]netip.Addr) *Table {
	n := &Table{nServices: t.nServices, nEndpts: t.nEndpts, nConflicts: t.nConflicts}
	st := p.State
	nodes := t.nodes.Edit()
	for name := range p.DirtyNodes {
		nodes.Delete(name)
	}
	byID := newIndex[*nodeEntry](len(st.Nodes))
	for i := range st.Nodes {
		node := &st.Nodes[i]
		e, ok := nodes.Get(node.Name)
		if !ok { // dirty, or new to the table
			e = newNodeEntry(node, zones, resolved)
			nodes.Set(node.Name, e)
		}
		byID.add(node.ID, e)
	}
	services := t.services.Edit()
	for _, k := range p.Removed {
		if old, ok := services.Take(k); ok {
			n.add(old, -1)
		}
	}
	for _, se := range EndpointSet(st, includeUnhealthy) {
		e := newSvcEntry(se, &byID, endpointMode)
		if old, ok := services.Swap(SvcKey{se.Service.Namespace, se.Service.Name}, e); ok {
			n.add(old, -1)
		}
		n.add(e, 1)
	}
	n.services, n.nodes = services.Map(), nodes.Map()
	return n
}
