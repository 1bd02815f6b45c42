package endpointsvc

import (
	"maps"
	"slices"
)

// patched returns a new table that is t with the services of st (each with
// its whole endpoint set) replacing or adding theirs, the services in
// removed gone, and, when setNS, the namespaces of st. It copies the
// services map and the slot list (a pointer per service), and of the
// reverse index only the shards the replaced and new services' addresses
// fall in; every other service's records are shared with t, which stays
// valid and unchanged for the readers that still hold it.
func (t *specTable) patched(st *State, removed []svcKey, setNS bool) *specTable {
	n := &specTable{
		namespaces: t.namespaces,
		derivedNS:  t.derivedNS,
		services:   maps.Clone(t.services),
		list:       slices.Clone(t.list),
		free:       t.free,
		ptrs:       t.ptrs, // the array of shard headers is copied; touched shards are replaced below
		nEndpts:    t.nEndpts,
	}
	gone := map[uint32]bool{} // slots whose old entries leave the index
	touched := map[int]bool{} // shards to rebuild
	drop := func(old *specSvc) {
		gone[old.slot] = true
		n.nEndpts -= int(old.admitted)
		for _, p := range old.reverseEntries() {
			touched[ptrShard(p.key)] = true
		}
	}
	for _, k := range removed {
		if old, ok := n.services[k]; ok {
			drop(old)
			delete(n.services, k)
			n.list[old.slot] = nil
			n.free = append(slices.Clip(n.free), old.slot)
		}
	}
	added := map[int][]specPTR{} // new entries by shard
	for _, se := range EndpointSet(st, false) {
		s := newSpecSvc(se)
		k := svcKey{s.namespace, s.name}
		if old, ok := n.services[k]; ok {
			drop(old)
			s.slot = old.slot
		} else if len(n.free) > 0 {
			s.slot = n.free[len(n.free)-1]
			n.free = n.free[: len(n.free)-1 : len(n.free)-1]
		} else {
			s.slot = uint32(len(n.list))
			n.list = append(n.list, nil)
		}
		n.list[s.slot] = s
		n.services[k] = s
		n.nEndpts += int(s.admitted)
		for _, p := range s.reverseEntries() {
			sh := ptrShard(p.key)
			touched[sh] = true
			added[sh] = append(added[sh], p.ptr)
		}
	}
	for sh := range touched {
		// the old shard is sorted: keep its surviving entries in order and
		// merge in the new ones, sorted on their own
		add := added[sh]
		n.sortShard(add)
		ps := make([]specPTR, 0, len(t.ptrs[sh])+len(add))
		for _, p := range t.ptrs[sh] {
			if gone[p.svc] {
				continue
			}
			for len(add) > 0 && n.ptrLess(add[0], p) {
				ps, add = append(ps, add[0]), add[1:]
			}
			ps = append(ps, p)
		}
		n.ptrs[sh] = append(ps, add...)
	}
	switch {
	case setNS:
		n.derivedNS = len(st.Namespaces) == 0
		n.namespaces = make(map[string]struct{}, len(st.Namespaces))
		for _, ns := range st.Namespaces {
			n.namespaces[ns] = struct{}{}
		}
		if n.derivedNS {
			n.deriveNamespaces()
		}
	case n.derivedNS && (len(removed) > 0 || len(st.Services) > 0):
		n.namespaces = make(map[string]struct{}, len(t.namespaces))
		n.deriveNamespaces()
	}
	return n
}

// deriveNamespaces adds the namespace of every service.
func (t *specTable) deriveNamespaces() {
	for k := range t.services {
		t.namespaces[k.namespace] = struct{}{}
	}
}
