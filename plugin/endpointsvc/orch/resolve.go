package orch

import (
	"context"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// LookupFunc resolves a hostname to its addresses.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// defaultLookup uses the system resolver (/etc/hosts, then DNS). The name
// goes without its trailing dot: Go's /etc/hosts lookup misses "name.".
func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", strings.TrimSuffix(host, "."))
}

// HostResolver resolves hostname advertise addresses off the hot path and
// keeps the last good result of each hostname, so a failing lookup does not
// take addresses away. Lookups run without any lock; mu guards the cache.
type HostResolver struct {
	lookup  LookupFunc
	Timeout time.Duration // of one lookup
	mu      sync.Mutex
	cache   map[string][]netip.Addr // fqdn → sorted addresses (last good)
}

// NewHostResolver returns a resolver using lookup (nil: the system's).
func NewHostResolver(lookup LookupFunc) *HostResolver {
	if lookup == nil {
		lookup = defaultLookup
	}
	return &HostResolver{lookup: lookup, Timeout: 2 * time.Second, cache: map[string][]netip.Addr{}}
}

// Cached returns the cached addresses of hosts and reports whether any host
// was never looked up; it forgets hosts that are no longer asked for.
func (r *HostResolver) Cached(hosts []string) (map[string][]netip.Addr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		want[h] = true
	}
	for h := range r.cache {
		if !want[h] {
			delete(r.cache, h)
		}
	}
	out := make(map[string][]netip.Addr, len(hosts))
	missing := false
	for _, h := range hosts {
		ips, ok := r.cache[h]
		if !ok {
			missing = true
			continue
		}
		out[h] = ips
	}
	return out, missing
}

// Snapshot returns a copy of the cache (the address slices are not
// modified once cached, so they are shared).
func (r *HostResolver) Snapshot() map[string][]netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string][]netip.Addr, len(r.cache))
	for h, ips := range r.cache {
		m[h] = ips
	}
	return m
}

// Restore fills the cache from a snapshot.
func (r *HostResolver) Restore(m map[string][]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for h, ips := range m {
		r.cache[h] = ips
	}
}

// Hostnames returns the distinct hostname advertise addresses of st's nodes.
func Hostnames(st *State) []string {
	seen := map[string]bool{}
	var out []string
	for i := range st.Nodes {
		if _, h, err := ParseAddress(st.Nodes[i].Address); err == nil && h != "" && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// Resolve looks hosts up and caches the results. Hosts already cached are
// looked up again only when refresh is set. It reports whether any cached
// result changed.
func (r *HostResolver) Resolve(ctx context.Context, hosts []string, refresh bool) bool {
	var todo []string
	r.mu.Lock()
	for _, h := range hosts {
		if _, ok := r.cache[h]; refresh || !ok {
			todo = append(todo, h)
		}
	}
	r.mu.Unlock()
	results := make([][]netip.Addr, len(todo))
	oks := make([]bool, len(todo))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, h := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, cancel := context.WithTimeout(ctx, r.Timeout)
			defer cancel()
			ips, err := r.lookup(c, h)
			if err != nil || len(ips) == 0 {
				return
			}
			for j := range ips {
				ips[j] = ips[j].Unmap().WithZone("")
			}
			sort.Slice(ips, func(a, b int) bool { return ips[a].Less(ips[b]) })
			results[i], oks[i] = ips, true
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for i, h := range todo {
		old, had := r.cache[h]
		switch {
		case oks[i]:
			if !had || !equalAddrs(old, results[i]) {
				changed = true
			}
			r.cache[h] = results[i]
		case !had:
			r.cache[h] = nil // unresolved for now: no addresses, retried on refresh
			changed = true
		}
	}
	return changed
}
