package source

import (
	"context"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// Consul v1.16.3 frees a service's VIP only when the service's last
// instance leaves (agent/consul/state/catalog.go, freeServiceVirtualIP):
// deregistering a sidecar frees nothing while its destination still has
// an instance, and unlinking a service from a terminating gateway frees
// nothing at all (updateTerminatingGatewayVirtualIPs compares the new
// config entry with itself), so a linked service that never had an
// instance keeps its VIP for good. Consul's DNS keeps answering those VIPs
// although no catalog entry carries them any more. The source does the
// same: an entry that no catalog entry gives any more is kept (retained)
// while its service has an instance, or, when it came from a terminating
// gateway, unless its service was seen with an instance; checked when the
// entry vanishes and again whenever the catalog moved.

// prevEntry is an entry of the last round, and where it came from.
type prevEntry struct {
	entry    table.Entry
	gateway  bool // carried by a terminating gateway's entries
	watch    bool // its VIP may outlive its carrier: ask whether its service has an instance
	instance bool // its service was seen with an instance since it vanished
	retained bool // kept although no catalog entry carries it
}

// retain returns entries with the entries of the last round that vanished
// from them but that Consul still answers. r says which entries came from
// terminating gateways and which may outlive their carrier; moved says
// whether the catalog changed since the last round. An entry carried only
// by proxies that front no instance of their destination (a proxy
// registered alone) is dropped with them, without asking. Whether a
// service has an instance comes from one list of every service name, asked
// only when a round needs it.
func (s *consulSource) retain(ctx context.Context, cat *api.Catalog, r round, moved bool) ([]table.Entry, error) {
	entries := r.entries
	var all map[string][]string
	has := func(name string) (bool, error) {
		if all == nil {
			var meta *api.QueryMeta
			var err error
			if all, meta, err = cat.Services(s.query(ctx)); err == nil {
				err = trusted(meta)
			}
			if err != nil {
				return false, err
			}
		}
		_, ok := all[name[:strings.IndexByte(name, '.')]]
		return ok, nil
	}
	next := make(map[string]prevEntry, len(entries))
	for _, e := range entries {
		p, seen := s.prev[e.Name]
		p = prevEntry{entry: e, gateway: r.gateway[e.Name], watch: r.watch[e.Name], instance: seen && p.instance}
		if p.gateway && !p.instance && (moved || !seen) {
			var err error
			if p.instance, err = has(e.Name); err != nil {
				return nil, err
			}
		}
		next[e.Name] = p
	}
	// A VIP another entry carries now was freed and given to that
	// service: an entry kept without a carrier never keeps it.
	carried := make(map[string]bool, len(entries))
	for _, e := range entries {
		for _, a := range e.Addresses {
			carried[a] = true
		}
	}
	for name, p := range s.prev {
		if _, ok := next[name]; ok || !p.watch || slices.ContainsFunc(p.entry.Addresses, func(a string) bool { return carried[a] }) {
			continue
		}
		if !moved && p.retained {
			next[name] = p
			entries = append(entries, p.entry)
			continue
		}
		ok, err := has(name)
		if err != nil {
			return nil, err
		}
		p.instance = p.instance || ok
		if ok || (p.gateway && !p.instance) {
			p.retained = true
			next[name] = p
			entries = append(entries, p.entry)
		}
	}
	s.prev = next
	return entries, nil
}

// Seed takes the table already serving (the snapshot, or the table carried
// across a reload) as the last round's entries, each one whose VIP may
// outlive its carrier: after a restart, an entry no catalog entry carries
// any more (a sidecar deregistered alone, a service unlinked from its
// gateway) is kept while its service has an instance, as before it. Which
// came from a gateway is not known: a linked service that never had an
// instance and was unlinked (whose VIP Consul 1.16.3 keeps for good) is
// dropped.
func (s *consulSource) Seed(t *table.Table) {
	s.prev = make(map[string]prevEntry, t.Len())
	for _, e := range t.Entries() {
		s.prev[e.Name] = prevEntry{entry: e, watch: true}
	}
}
