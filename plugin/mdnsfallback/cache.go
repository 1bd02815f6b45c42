package mdnsfallback

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

const (
	// maxCacheTTL caps the TTL of a heard answer.
	maxCacheTTL = time.Hour
	// maxAddrsPerName bounds the addresses one cached name may hold, so a
	// flood of answers for one name cannot grow memory either.
	maxAddrsPerName = 32
	// flushGrace is RFC 6762 §10.2's one second: a cache-flush record
	// evicts same-type records received more than this long ago.
	flushGrace = time.Second
)

// cachedAddr is one address heard for a name.
type cachedAddr struct {
	addr     netip.Addr
	ip       net.IP // shared by replies, never mutated
	expires  time.Time
	received time.Time
}

// cacheEntry is the cache's knowledge of one name: addresses heard, or a
// negative entry ("nobody answered") until negUntil.
type cacheEntry struct {
	name     string
	addrs    []cachedAddr
	negUntil time.Time
}

// cacheResult says what a lookup found.
type cacheResult int

const (
	cacheNone     cacheResult = iota // nothing known
	cachePositive                    // the name exists (answer may be empty: NODATA)
	cacheNegative                    // nobody answered recently
)

// answerCache is a bounded cache of answers heard over mDNS, keyed by
// lowercased FQDN. It never holds more than max names of at most
// maxAddrsPerName addresses each.
//
// Names are spread by hash over shards, each its own LRU under its own
// mutex with a share of the bound, so concurrent queries for different names
// do not queue on one lock. Small caches have one shard (an exact LRU);
// larger ones one shard per minShardSize names, up to maxShards.
type answerCache struct {
	shards []cacheShard
	mask   uint32
	n      atomic.Int64 // names held, over all shards
}

// cacheShard is one LRU of the cache.
type cacheShard struct {
	mu  sync.Mutex
	max int
	m   map[string]*list.Element // value: *cacheEntry
	lru *list.List               // front = most recently used
	n   *atomic.Int64            // the cache's name count
	_   [24]byte                 // 64 bytes a shard: mutexes on separate cache lines
}

const (
	// minShardSize is the smallest share of the bound a shard gets, so
	// per-shard LRU order stays close to global LRU order.
	minShardSize = 256
	maxShards    = 64
)

func newAnswerCache(max int) *answerCache {
	n := 1
	for n*2 <= maxShards && n*2*minShardSize <= max {
		n *= 2
	}
	c := &answerCache{shards: make([]cacheShard, n), mask: uint32(n - 1)}
	for i := range c.shards {
		size := max / n
		if i < max%n {
			size++ // the shares add up to max exactly
		}
		c.shards[i] = cacheShard{max: size, m: make(map[string]*list.Element), lru: list.New(), n: &c.n}
	}
	return c
}

// shard returns name's shard (FNV-1a of the name, without allocating).
func (c *answerCache) shard(name string) *cacheShard {
	if c.mask == 0 {
		return &c.shards[0]
	}
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return &c.shards[h&c.mask]
}

// Len returns the number of names held (positive and negative).
func (c *answerCache) Len() int { return int(c.n.Load()) }

// prune drops expired addresses; it reports whether e still says anything.
func (e *cacheEntry) prune(now time.Time) bool {
	kept := e.addrs[:0]
	for _, a := range e.addrs {
		if now.Before(a.expires) {
			kept = append(kept, a)
		}
	}
	for i := len(kept); i < len(e.addrs); i++ {
		e.addrs[i] = cachedAddr{}
	}
	e.addrs = kept
	return len(e.addrs) > 0 || now.Before(e.negUntil)
}

// lookup appends to out the A/AAAA records (as qtype asks, owner qname,
// TTL the time left) that the cache holds for name.
func (c *answerCache) lookup(name, qname string, qtype uint16, now time.Time, out []dns.RR) ([]dns.RR, cacheResult) {
	return c.shard(name).lookup(name, qname, qtype, now, out)
}

func (c *cacheShard) lookup(name, qname string, qtype uint16, now time.Time, out []dns.RR) ([]dns.RR, cacheResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[name]
	if !ok {
		return out, cacheNone
	}
	e := el.Value.(*cacheEntry)
	if !e.prune(now) {
		c.remove(el)
		return out, cacheNone
	}
	c.lru.MoveToFront(el)
	if len(e.addrs) == 0 {
		return out, cacheNegative
	}
	for _, a := range e.addrs {
		ttl := uint32(a.expires.Sub(now) / time.Second)
		if ttl == 0 {
			ttl = 1
		}
		if a.addr.Is4() && (qtype == dns.TypeA || qtype == dns.TypeANY) {
			out = append(out, &dns.A{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.ip})
		} else if a.addr.Is6() && (qtype == dns.TypeAAAA || qtype == dns.TypeANY) {
			out = append(out, &dns.AAAA{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.ip})
		}
	}
	return out, cachePositive
}

// has reports whether name has live addresses in the cache.
func (c *answerCache) has(name string, now time.Time) bool {
	return c.shard(name).has(name, now)
}

func (c *cacheShard) has(name string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[name]
	if !ok {
		return false
	}
	e := el.Value.(*cacheEntry)
	return e.prune(now) && len(e.addrs) > 0
}

// add records an address heard for name. A TTL of 0 is a goodbye and removes
// the address; flush (the cache-flush bit) evicts older same-family
// addresses of name first.
func (c *answerCache) add(name string, addr netip.Addr, ttl uint32, flush bool, now time.Time) {
	c.shard(name).add(name, addr.Unmap(), ttl, flush, now)
}

func (c *cacheShard) add(name string, addr netip.Addr, ttl uint32, flush bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[name]
	if !ok {
		if ttl == 0 {
			return
		}
		el = c.insert(name)
	}
	e := el.Value.(*cacheEntry)
	e.prune(now)
	if ttl == 0 {
		for i, a := range e.addrs {
			if a.addr == addr {
				e.addrs = append(e.addrs[:i], e.addrs[i+1:]...)
				break
			}
		}
		if len(e.addrs) == 0 {
			c.remove(el)
		}
		return
	}
	d := time.Duration(ttl) * time.Second
	if d > maxCacheTTL {
		d = maxCacheTTL
	}
	e.negUntil = time.Time{}
	if flush {
		kept := e.addrs[:0]
		for _, a := range e.addrs {
			if a.addr.Is4() != addr.Is4() || now.Sub(a.received) <= flushGrace {
				kept = append(kept, a)
			}
		}
		e.addrs = kept
	}
	for i := range e.addrs {
		if e.addrs[i].addr == addr {
			e.addrs[i].expires, e.addrs[i].received = now.Add(d), now
			c.lru.MoveToFront(el)
			return
		}
	}
	if len(e.addrs) >= maxAddrsPerName {
		// Drop the address that expires first to make room.
		min := 0
		for i := range e.addrs {
			if e.addrs[i].expires.Before(e.addrs[min].expires) {
				min = i
			}
		}
		e.addrs = append(e.addrs[:min], e.addrs[min+1:]...)
	}
	e.addrs = append(e.addrs, cachedAddr{addr: addr, ip: net.IP(addr.AsSlice()), expires: now.Add(d), received: now})
	c.lru.MoveToFront(el)
}

// setNegative remembers until `until` that nobody answered for name, unless
// the cache holds live addresses for it.
func (c *answerCache) setNegative(name string, until, now time.Time) {
	c.shard(name).setNegative(name, until, now)
}

func (c *cacheShard) setNegative(name string, until, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[name]
	if !ok {
		el = c.insert(name)
	}
	e := el.Value.(*cacheEntry)
	if e.prune(now) && len(e.addrs) > 0 {
		return
	}
	e.negUntil = until
	c.lru.MoveToFront(el)
}

// forget drops name (a local record now owns it).
func (c *answerCache) forget(name string) {
	c.shard(name).forget(name)
}

func (c *cacheShard) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[name]; ok {
		c.remove(el)
	}
}

// insert adds an empty entry for name, evicting the shard's least recently
// used entry when the shard is full; c.mu is held.
func (c *cacheShard) insert(name string) *list.Element {
	for c.lru.Len() >= c.max && c.lru.Len() > 0 {
		c.remove(c.lru.Back())
	}
	el := c.lru.PushFront(&cacheEntry{name: name})
	c.m[name] = el
	c.n.Add(1)
	return el
}

func (c *cacheShard) remove(el *list.Element) {
	delete(c.m, el.Value.(*cacheEntry).name)
	c.lru.Remove(el)
	c.n.Add(-1)
}
