package virtualconsul

import (
	"context"
	"fmt"
	"strings"

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
// asks for the extinction index; only when it moved past the one at which
// the cached entries were last checked are they checked again, all in one
// filtered list (validate), and only those whose instances no longer carry
// the VIP the cache holds are read again.

// extinctionProbe is a service name no one registers: a read of a service
// that does not exist answers with the extinction index as its
// X-Consul-Index (state.maxIndexAndWatchChForService).
const extinctionProbe = "meshdns-virtualconsul-extinction-probe"

// validateChunk bounds one validation request's filter (its URL stays far
// below the 1 MB Consul's HTTP server accepts).
const validateChunk = 16 << 10

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

// validate returns the names, among the cached services in check, whose
// instances carry a VIP (or a destination) other than the cached one, or
// that cannot be checked by filter: those are read again. One list query
// per validateChunk of filter.
func (s *consulSource) validate(ctx context.Context, cat *api.Catalog, check []string) (map[string]bool, error) {
	stale := map[string]bool{}
	var clauses []string
	size := 0
	flush := func() error {
		if len(clauses) == 0 {
			return nil
		}
		q := s.query(ctx)
		q.Filter = strings.Join(clauses, " or ")
		listed, meta, err := cat.Services(q)
		if err == nil {
			err = trusted(meta)
		}
		if err != nil {
			return fmt.Errorf("validating cached VIPs: %w", err)
		}
		for n := range listed {
			stale[n] = true
		}
		clauses, size = clauses[:0], 0
		return nil
	}
	for _, n := range check {
		c := s.known[n].clause(n)
		if c == "" {
			stale[n] = true
			continue
		}
		if size+len(c) > validateChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		clauses, size = append(clauses, c), size+len(c)+4
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return stale, nil
}

// clause is the filter that selects service name's instances when one of
// them carries none of the cached (VIP, destination) pairs; "" when the
// pairs cannot be written as a filter (a quote in a name).
func (p proxyEntries) clause(name string) string {
	if len(p.pairs) == 0 || !filterSafe(name) {
		return ""
	}
	terms := make([]string, 0, len(p.pairs))
	for _, pr := range p.pairs {
		if !filterSafe(pr.vip) || !filterSafe(pr.dest) {
			return ""
		}
		t := `ServiceTaggedAddresses["` + consulVirtualTag + `"].Address == "` + pr.vip + `" and `
		if pr.native {
			t += `ServiceConnect.Native == true`
		} else {
			t += `ServiceProxy.DestinationServiceName == "` + pr.dest + `"`
		}
		terms = append(terms, "("+t+")")
	}
	return `(ServiceName == "` + name + `" and not (` + strings.Join(terms, " or ") + `))`
}

// vipPair is what one instance of a cached service carries: its VIP and,
// for a proxy, its destination as the catalog spells it.
type vipPair struct {
	vip, dest string
	native    bool
}

// addPair records pr once.
func (p *proxyEntries) addPair(pr vipPair) {
	for _, x := range p.pairs {
		if x == pr {
			return
		}
	}
	p.pairs = append(p.pairs, pr)
}

// filterSafe says whether v can be written in a filter's double quotes.
func filterSafe(v string) bool { return !strings.ContainsAny(v, "\"\\") }
