package mdns

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

const (
	// maxCacheTTL caps the TTL of a heard answer.
	maxCacheTTL = time.Hour
	// maxAddrsPerName bounds the addresses one cached (name, type) may
	// hold, so a flood of answers for one name cannot grow memory either.
	maxAddrsPerName = 32
	// flushGrace is RFC 6762 §10.2's one second: a cache-flush record
	// evicts same-type records received more than this long ago.
	flushGrace = time.Second
	// goodbyeGrace is RFC 6762 §10.1's one second: a goodbye (TTL 0)
	// leaves the record in the cache for one more second, so a peer that
	// still holds it can correct the goodbye.
	goodbyeGrace = time.Second
)

// cacheKey is one cached RRset: a lowercased FQDN and its address family
// (A or AAAA). The two families of a name are known, expire and are asked
// for apart. A reverse name's PTR records are cached under v6 false (the
// reverse names never hold addresses).
type cacheKey struct {
	name string
	v6   bool
}

// cachedAddr is one address heard for a name.
type cachedAddr struct {
	addr     netip.Addr
	ptr      string // a PTR record's target (then addr is unset)
	ip       net.IP // shared by replies, never mutated
	expires  time.Time
	received time.Time
	ttl      time.Duration // as heard (capped), for the refresh points
	refresh  int           // refresh points (80, 85, 90, 95 %) already asked for
}

// cacheEntry is the cache's knowledge of one (name, type): addresses heard,
// or a negative entry ("nobody answered") until negUntil.
type cacheEntry struct {
	key      cacheKey
	addrs    []cachedAddr
	negUntil time.Time
}

// Result says what a lookup found.
type Result int

const (
	Unknown  Result = iota // nothing known
	Positive               // addresses of the asked type
	Negative               // nobody answered recently
)

// Cache is a bounded LRU of answers heard over mDNS, keyed by
// (lowercased FQDN, address family), under one mutex. It never holds more
// than max entries of at most maxAddrsPerName addresses each. (It was
// split into hash shards once; the server-level benchmark showed no
// difference on this machine, see docs/measurements/mdnsfallback.md, so
// it is one LRU.)
type Cache struct {
	mu  sync.Mutex
	max int
	m   map[cacheKey]*list.Element // value: *cacheEntry
	lru *list.List                 // front = most recently used
}

func newCache(max int) *Cache {
	return &Cache{max: max, m: make(map[cacheKey]*list.Element), lru: list.New()}
}

// Len returns the number of entries held (positive and negative).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

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

// keysOf returns the cache keys a question of qtype reads.
func keysOf(name string, qtype uint16) []cacheKey {
	switch qtype {
	case dns.TypeA:
		return []cacheKey{{name, false}}
	case dns.TypeAAAA:
		return []cacheKey{{name, true}}
	case dns.TypeANY:
		return []cacheKey{{name, false}, {name, true}}
	case dns.TypePTR:
		return []cacheKey{{name, false}}
	}
	return nil
}

// lookup appends to out the A/AAAA records (as qtype asks, owner qname,
// TTL the time left) that the cache holds for name. The result is
// positive when any asked type has addresses, negative when every asked
// type is negative, none otherwise. refresh reports that an address
// passed one of its refresh points (80, 85, 90, 95 % of its TTL, RFC 6762
// §5.2) since the last lookup said so: a client still asks for the name,
// so the caller should ask the network again.
func (c *Cache) lookup(name, qname string, qtype uint16, now time.Time, out []dns.RR) (rrs []dns.RR, res Result, refresh bool) {
	keys := keysOf(name, qtype)
	c.mu.Lock()
	defer c.mu.Unlock()
	neg := 0
	for _, k := range keys {
		e := c.get(k, now)
		switch {
		case e == nil:
		case len(e.addrs) == 0:
			neg++
		default:
			res = Positive
			out = appendRRs(out, e, qname, now)
			refresh = e.dueRefresh(now) || refresh
		}
	}
	if res == Unknown && neg > 0 && neg == len(keys) {
		res = Negative
	}
	return out, res, refresh
}

// dueRefresh reports whether an address of e passed a refresh point it
// was not refreshed for yet, and marks it.
func (e *cacheEntry) dueRefresh(now time.Time) bool {
	due := false
	for i := range e.addrs {
		a := &e.addrs[i]
		if a.ttl <= 0 {
			continue
		}
		spent := 100 - int(a.expires.Sub(now)*100/a.ttl) // per cent of the TTL gone
		point := min((spent-80)/5+1, 4)                  // 1 at 80 %, 2 at 85 %, … 4 at 95 %
		if spent >= 80 && point > a.refresh {
			a.refresh, due = point, true
		}
	}
	return due
}

// appendRRs appends the records of e under qname.
func appendRRs(out []dns.RR, e *cacheEntry, qname string, now time.Time) []dns.RR {
	for _, a := range e.addrs {
		ttl := uint32(a.expires.Sub(now) / time.Second)
		if ttl == 0 {
			ttl = 1
		}
		if a.ptr != "" {
			out = append(out, &dns.PTR{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: ttl}, Ptr: a.ptr})
		} else if e.key.v6 {
			out = append(out, &dns.AAAA{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.ip})
		} else {
			out = append(out, &dns.A{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.ip})
		}
	}
	return out
}

// get returns the live entry of k, marking it used, or nil; c.mu is held.
func (c *Cache) get(k cacheKey, now time.Time) *cacheEntry {
	el, ok := c.m[k]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !e.prune(now) {
		c.remove(el)
		return nil
	}
	c.lru.MoveToFront(el)
	return e
}

// Has reports whether name has live addresses of either family.
func (c *Cache) Has(name string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v6 := range [2]bool{false, true} {
		if e := c.get(cacheKey{name, v6}, now); e != nil && len(e.addrs) > 0 {
			return true
		}
	}
	return false
}

// live reports whether (name, family) has live addresses.
func (c *Cache) live(name string, v6 bool, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.get(cacheKey{name, v6}, now)
	return e != nil && len(e.addrs) > 0
}

// Add records an address heard for name. A TTL of 0 is a goodbye: the
// address expires one second later (RFC 6762 §10.1); flush (the
// cache-flush bit) evicts older same-family addresses of name first.
func (c *Cache) Add(name string, addr netip.Addr, ttl uint32, flush bool, now time.Time) {
	addr = addr.Unmap()
	c.put(cacheKey{name, addr.Is6()}, cachedAddr{addr: addr, ip: net.IP(addr.AsSlice())}, ttl, flush, now)
}

// addPTR records a PTR record heard for the reverse name, as add does.
func (c *Cache) addPTR(name, target string, ttl uint32, flush bool, now time.Time) {
	c.put(cacheKey{name, false}, cachedAddr{ptr: target}, ttl, flush, now)
}

// put records v (its addr or ptr) heard under k.
func (c *Cache) put(k cacheKey, v cachedAddr, ttl uint32, flush bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		if ttl == 0 {
			return
		}
		el = c.insert(k)
	}
	e := el.Value.(*cacheEntry)
	e.prune(now)
	if ttl == 0 {
		for i := range e.addrs {
			if e.addrs[i].same(v) && e.addrs[i].expires.After(now.Add(goodbyeGrace)) {
				e.addrs[i].expires = now.Add(goodbyeGrace)
			}
		}
		return
	}
	d := min(time.Duration(ttl)*time.Second, maxCacheTTL)
	e.negUntil = time.Time{}
	if flush {
		kept := e.addrs[:0]
		for _, a := range e.addrs {
			if now.Sub(a.received) <= flushGrace {
				kept = append(kept, a)
			}
		}
		e.addrs = kept
	}
	c.lru.MoveToFront(el)
	v.expires, v.received, v.ttl = now.Add(d), now, d
	for i := range e.addrs {
		if e.addrs[i].same(v) {
			v.ip = e.addrs[i].ip
			e.addrs[i] = v
			return
		}
	}
	if len(e.addrs) >= maxAddrsPerName {
		// Drop the address that expires first to make room.
		first := 0
		for i := range e.addrs {
			if e.addrs[i].expires.Before(e.addrs[first].expires) {
				first = i
			}
		}
		e.addrs = append(e.addrs[:first], e.addrs[first+1:]...)
	}
	e.addrs = append(e.addrs, v)
}

// same reports whether a and b are the same record (address or target).
func (a *cachedAddr) same(b cachedAddr) bool { return a.addr == b.addr && a.ptr == b.ptr }

// SetNegative remembers until `until` that nobody answered for the
// (name, family), unless the cache holds live addresses for it.
func (c *Cache) SetNegative(name string, v6 bool, until, now time.Time) {
	k := cacheKey{name, v6}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		el = c.insert(k)
	}
	e := el.Value.(*cacheEntry)
	if e.prune(now) && len(e.addrs) > 0 {
		return
	}
	e.negUntil = until
	c.lru.MoveToFront(el)
}

// forget drops both families of name.
func (c *Cache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v6 := range [2]bool{false, true} {
		if el, ok := c.m[cacheKey{name, v6}]; ok {
			c.remove(el)
		}
	}
}

// insert adds an empty entry for k, evicting the least recently used
// entry when the cache is full; c.mu is held.
func (c *Cache) insert(k cacheKey) *list.Element {
	for c.lru.Len() >= c.max && c.lru.Len() > 0 {
		c.remove(c.lru.Back())
	}
	el := c.lru.PushFront(&cacheEntry{key: k})
	c.m[k] = el
	return el
}

func (c *Cache) remove(el *list.Element) {
	delete(c.m, el.Value.(*cacheEntry).key)
	c.lru.Remove(el)
}
