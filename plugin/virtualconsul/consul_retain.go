package virtualconsul

import (
	"context"
	"net/url"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Consul v1.16.3 frees a service's VIP only when the service's last
// instance leaves (agent/consul/state/catalog.go, freeServiceVirtualIP):
// deregistering a sidecar frees nothing while its destination still has
// an instance, and a service unlinked from a terminating gateway keeps its
// VIP while it has one; Consul's DNS keeps answering the VIP although no
// catalog entry carries it any more. The source does the same: an entry
// that no catalog entry gives any more is kept (retained) while its
// service still has an instance, checked with one read of the service
// when it vanishes and again whenever the catalog moved.

// retain returns entries with the entries of the last table that vanished
// from them but whose service still has an instance. moved says whether
// the catalog changed since the last round.
func (s *consulSource) retain(ctx context.Context, raw *api.Raw, entries []Entry, moved bool) ([]Entry, error) {
	cur := make(map[string]bool, len(entries))
	for _, e := range entries {
		cur[e.Name] = true
	}
	retained := map[string]bool{}
	for name, e := range s.prev {
		if cur[name] {
			continue
		}
		if !moved && s.retained[name] {
			entries, retained[name] = append(entries, e), true
			continue
		}
		ok, err := s.hasInstance(ctx, raw, name[:strings.IndexByte(name, '.')])
		if err != nil {
			return nil, err
		}
		if ok {
			entries, retained[name] = append(entries, e), true
		}
	}
	s.retained = retained
	s.prev = make(map[string]Entry, len(entries))
	for _, e := range entries {
		s.prev[e.Name] = e
	}
	return entries, nil
}

// hasInstance reports whether service svc has an instance in the catalog.
func (s *consulSource) hasInstance(ctx context.Context, raw *api.Raw, svc string) (bool, error) {
	var svcs []struct{ ServiceID string }
	meta, err := raw.Query("/v1/catalog/service/"+url.PathEscape(svc), &svcs, s.query(ctx))
	if err == nil {
		err = trusted(meta)
	}
	return len(svcs) > 0, err
}
