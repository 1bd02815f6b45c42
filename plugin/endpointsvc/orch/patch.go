package endpointsvc

import (
	"maps"
	"net/netip"
)

// patched returns a new table that is t with the services of st (each with
// its whole endpoint set) replacing or adding theirs and the services in
// removed gone; the nodes in dirty get the entries of st's nodes of that
// name, or none when st has no such node. A node of st that is not dirty
// keeps its entry (services left alone point at it). It copies the two
// maps (a pointer per entry); every other entry is shared with t, which
// stays valid and unchanged for the readers that still hold it.
//
// It relies on the source putting in st every service with an endpoint on
// a dirty node, so that no entry left alone points at a replaced node.
func (t *table) patched(st *State, removed []svcKey, dirty map[string]bool, zones []string, includeUnhealthy, endpointMode bool, resolved map[string][]netip.Addr, serial uint32) *table {
	n := &table{
		services:   maps.Clone(t.services),
		nodes:      t.nodes,
		serial:     serial,
		nServices:  t.nServices,
		nEndpts:    t.nEndpts,
		nConflicts: t.nConflicts,
	}
	cloned := false
	write := func() {
		if !cloned {
			n.nodes, cloned = maps.Clone(t.nodes), true
		}
	}
	for name := range dirty {
		write()
		delete(n.nodes, name)
	}
	byID := make(map[string]*nodeEntry, len(st.Nodes))
	for i := range st.Nodes {
		node := &st.Nodes[i]
		e, ok := n.nodes[node.Name]
		if !ok { // dirty, or new to the table
			e = newNodeEntry(node, zones, resolved)
			write()
			n.nodes[node.Name] = e
		}
		byID[node.ID] = e
	}
	for _, k := range removed {
		if old, ok := n.services[k]; ok {
			n.add(old, -1)
			delete(n.services, k)
		}
	}
	for _, se := range EndpointSet(st, includeUnhealthy) {
		k := svcKey{se.Service.Namespace, se.Service.Name}
		if old, ok := n.services[k]; ok {
			n.add(old, -1)
		}
		e := newSvcEntry(se, byID, endpointMode)
		n.services[k] = e
		n.add(e, 1)
	}
	return n
}
