package source

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"sort"

	"github.com/hashicorp/consul/api"

	"github.com/meshdns/meshdns/plugin/pkg/pause"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// round is what one catalog round read: the entries the catalog carries,
// which came from terminating gateways, how many were skipped, and the
// agent's datacenter.
type round struct {
	entries []table.Entry
	gateway map[string]bool // entry names carried by terminating gateways
	watch   map[string]bool // entry names whose VIP may outlive their carrier
	skipped int
	dc      string
}

// collect reads the services listed that are new, pending, stale (their
// VIP moved: recheck) or terminating gateways whose config entry moved
// (consul_gateways.go), keeps what it read before of the
// others, and sets when the next round waits less (a VIP still pending).
func (s *consulSource) collect(ctx context.Context, client *api.Client, listed map[string][]string, moved bool, stale map[string]bool) (round, error) {
	names := make([]string, 0, len(listed))
	for n := range listed {
		names = append(names, n)
	}
	sort.Strings(names)
	known := make(map[string]proxyEntries, len(names))
	var unread []string
	for _, n := range names {
		p, ok := s.known[n]
		if ok && !p.pending && !(p.gateway && s.gw.stale(n, moved)) && !stale[n] {
			known[n] = p
		} else {
			unread = append(unread, n)
		}
	}
	if err := s.agentDatacenter(ctx, client); err != nil {
		return round{}, err
	}
	read, err := s.read(ctx, client.Raw(), unread)
	if err != nil {
		return round{}, err
	}
	maps.Copy(known, read)
	s.known = known
	for n, p := range read {
		if p.gateway {
			s.gw.readAt(n, s.roundIndex)
		}
	}
	r := round{gateway: map[string]bool{}, watch: map[string]bool{}, dc: s.dc}
	pending := false
	for _, n := range names {
		p := known[n]
		r.entries = append(r.entries, p.entries...)
		for _, e := range p.entries {
			r.gateway[e.Name] = r.gateway[e.Name] || p.gateway
		}
		for _, n := range p.watch {
			r.watch[n] = true
		}
		r.skipped += p.skipped
		pending = pending || p.pending
		if r.dc == "" {
			r.dc = p.dc
		}
	}
	switch s.pending = pending; {
	case !pending:
		s.pendingWait = 0
	case moved: // the catalog moved: a new proxy may be waiting for its VIP
		s.pendingWait = consulPendingWait
	default:
		s.pendingWait = pause.Double(s.pendingWait, consulPendingWait, consulPendingMax)
	}
	return r, nil
}

// build returns the round's table, or SyncUnchanged when it holds what the
// last one held.
func (s *consulSource) build(r round) Sync {
	entries := r.entries
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].Name != entries[j].Name {
			return entries[i].Name < entries[j].Name
		}
		return entries[i].Addresses[0] < entries[j].Addresses[0]
	})
	h := sha256.New()
	fmt.Fprintf(h, "dc %s skipped %d\n", r.dc, r.skipped) // a change shows in entries_skipped
	for _, e := range entries {
		fmt.Fprintf(h, "%s %s\n", e.Name, e.Addresses[0])
	}
	sum := sumOf(h)
	if s.built && sum == s.last {
		return Sync{Result: SyncUnchanged}
	}
	b := table.NewBuilder(len(entries))
	b.SetDatacenter(r.dc)
	for _, e := range entries {
		if err := b.Add(e); err != nil {
			return Sync{Result: SyncRejected, Err: fmt.Errorf("consul %s: %w", s.display(), err)}
		}
	}
	s.last, s.built = sum, true
	sy := Sync{Result: SyncOK, Table: b.Table()}
	if r.skipped > 0 {
		sy.Skipped = map[string]int{table.SkipName: r.skipped}
	}
	return sy
}
