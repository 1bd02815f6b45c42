package source

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"
)

// A service's VIP moves only after Consul freed it, and Consul v1.16.3
// frees a VIP only when the service's last instance leaves (or a config
// entry that held it goes): the same transaction moves the catalog's
// service extinction index (agent/consul/state/catalog.go,
// deleteServiceTxn). The list of services cannot show a service that left
// and came back between two of its answers (a slow round, a paused
// process): its name is listed before and after, and its new VIP may be
// another service's old one. So every round in which the catalog moved
// asks for the extinction index (one read of a service that does not
// exist); only when it moved past the one at which the cached entries were
// last checked are the cached services read again, each on its own
// (/v1/catalog/service/NAME: a lookup of that service's instances on the
// server, what a new service costs). A filtered list of the whole catalog
// did the same check in one request, but the servers evaluate its filter
// against every instance of the catalog (tens of milliseconds of server
// CPU each, for every node of a fleet at every extinction).

// extinctionProbe is a service name no one registers: a read of a service
// that does not exist answers with the extinction index as its
// X-Consul-Index (state.maxIndexAndWatchChForService).
const extinctionProbe = "meshdns-virtualconsul-extinction-probe"

// extinction returns the catalog's service extinction index. ok is false
// when the answer cannot be one (someone registered the probe's name):
// then the cache is checked in every round that moved.
func (s *consulSource) extinction(ctx context.Context, raw *api.Raw) (idx uint64, ok bool, err error) {
	var svcs []*catalogEntry
	meta, err := raw.Query("/v1/catalog/service/"+extinctionProbe, &svcs, s.query(ctx))
	if err == nil {
		err = trusted(meta)
	}
	if err != nil {
		return 0, false, fmt.Errorf("extinction index: %w", err)
	}
	return meta.LastIndex, len(svcs) == 0, nil
}

// recheck returns, for a round in which the catalog moved, the cached
// services listed to read again, and the extinction index the cache is
// checked at once the round completes (the caller keeps it only then: a
// round that fails before its reads checks again next time). An
// extinction index that went backwards (a restored snapshot) drops the
// cache whole.
func (s *consulSource) recheck(ctx context.Context, raw *api.Raw, listed map[string][]string, moved bool) (map[string]bool, uint64, error) {
	if !moved {
		return nil, s.checked, nil
	}
	ext, ok, err := s.extinction(ctx, raw)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		ext = 0 // the probe's name is taken: check in every round that moved
	}
	switch {
	case ext < s.checked:
		s.known = nil
		return nil, ext, nil
	case ext == s.checked && ok:
		return nil, ext, nil
	}
	stale := map[string]bool{}
	for n := range listed {
		// Gateways follow their config entries (consul_gateways.go);
		// pending services are read anyway.
		if p, ok := s.known[n]; ok && !p.pending && !p.gateway {
			stale[n] = true
		}
	}
	return stale, ext, nil
}
