package source

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// A terminating gateway carries the VIPs of the services its config entry
// links, and those change only with that config entry (Consul v1.16.3
// assigns a linked service its VIP when the entry is written, and frees
// none while it stays linked). So a gateway is read again only when its
// own config entry moved, which one blocking query over every
// terminating-gateway config entry (/v1/config/terminating-gateway) tells,
// beside the list's: a change elsewhere in the catalog costs the gateways
// nothing. The watch wakes the round's list wait when a gateway's entry
// moved. Until the watch has answered, and while it fails, every gateway is
// read again in every round in which the catalog moved (the old rule).

// gatewayWatch follows the terminating-gateway config entries.
type gatewayWatch struct {
	mu     sync.Mutex
	ok     bool               // the last query answered (mods is current)
	mods   map[string]uint64  // gateway → its config entry's ModifyIndex
	read   map[string]uint64  // gateway → the catalog index at which a round last read it
	wake   context.CancelFunc // ends the round's list wait; nil while it does not wait
	woken  bool               // wake was called in this wait
	due    bool               // a change came while the round did not wait
	cancel context.CancelFunc // ends the watch; nil before it started
}

// start runs the watch until ctx ends, unless it runs already.
func (g *gatewayWatch) start(ctx context.Context, s *consulSource) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		return
	}
	ctx, g.cancel = context.WithCancel(ctx)
	go g.run(ctx, s)
}

// run asks for the config entries, blocking on their index.
func (g *gatewayWatch) run(ctx context.Context, s *consulSource) {
	var (
		client *api.Client
		index  uint64
		retry  time.Duration
	)
	for ctx.Err() == nil {
		var err error
		if client == nil {
			client, err = s.client()
		}
		var entries []api.ConfigEntry
		var meta *api.QueryMeta
		if err == nil {
			q := &api.QueryOptions{AllowStale: true, WaitIndex: index, WaitTime: consulWait}
			if tok, terr := s.token(); terr == nil && tok != "" {
				q.Token = tok
			}
			entries, meta, err = client.ConfigEntries().List(api.TerminatingGateway, q.WithContext(ctx))
			if err == nil {
				err = trusted(meta)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			g.set(nil, false)
			client, index = nil, 0
			retry = pause.Double(retry, consulRetryMin, consulRetryMax)
			if !pause.Sleep(ctx, pause.Jitter(retry)) {
				return
			}
			continue
		}
		retry = 0
		mods := make(map[string]uint64, len(entries))
		for _, e := range entries {
			mods[e.GetName()] = e.GetModifyIndex()
		}
		g.set(mods, true)
		if meta.LastIndex < index {
			meta.LastIndex = 0 // went backwards: ask again at once
		}
		index = max(meta.LastIndex, 1)
	}
}

// set records the watch's answer (ok false: it failed) and wakes the
// round's wait when a gateway's entry moved or the watch failed.
func (g *gatewayWatch) set(mods map[string]uint64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	changed := ok != g.ok || len(mods) != len(g.mods)
	for n, m := range mods {
		changed = changed || g.mods[n] != m
	}
	g.mods, g.ok = mods, ok
	switch {
	case !changed:
	case g.wake != nil:
		g.woken = true
		g.wake()
	default:
		g.due = true // the round is not waiting now: its next wait ends at once
	}
}

// arm makes wake end the round's list wait; woken reports whether it did.
func (g *gatewayWatch) arm(wake context.CancelFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake, g.woken = wake, g.due
	if g.due {
		g.due = false
		wake()
	}
}

func (g *gatewayWatch) disarm() (woken bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake = nil
	return g.woken
}

// stale reports whether gateway name must be read again: its entry moved
// past the catalog index at which a round read it (the entry's write and
// the gateway's catalog entries are one transaction), or the watch cannot
// say (then: in a round in which the catalog moved).
func (g *gatewayWatch) stale(name string, moved bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.ok {
		return moved
	}
	return g.mods[name] > g.read[name]
}

// readAt records that a round read gateway name at catalog index idx.
func (g *gatewayWatch) readAt(name string, idx uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.read == nil {
		g.read = map[string]uint64{}
	}
	g.read[name] = idx
}

// anyStale reports whether one of the gateways needs a read.
func (g *gatewayWatch) anyStale(gateways []string) bool {
	for _, n := range gateways {
		if g.stale(n, false) {
			return true
		}
	}
	return false
}
