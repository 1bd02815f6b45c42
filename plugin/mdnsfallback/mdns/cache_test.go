package mdns

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestCacheTTLAndGoodbye(t *testing.T) {
	c := newCache(10)
	now := time.Unix(1000, 0)
	c.Add("a.weave.local.", ip("10.0.0.1"), 10, false, now)
	c.Add("a.weave.local.", ip("fd00::1"), 7200, false, now)
	rrs, res, _ := c.lookup("a.weave.local.", "A.weave.local.", dns.TypeA, now.Add(3*time.Second), nil)
	if res != Positive || len(rrs) != 1 || rrs[0].Header().Ttl != 7 || rrs[0].Header().Name != "A.weave.local." {
		t.Fatalf("lookup A: %v %v", res, rrs)
	}
	rrs, _, _ = c.lookup("a.weave.local.", "a.weave.local.", dns.TypeAAAA, now, nil)
	if len(rrs) != 1 || rrs[0].Header().Ttl != 3600 {
		t.Fatalf("TTL not capped at 1h: %v", rrs)
	}
	// The A RRset expired: the cache knows nothing of A (the network is
	// asked again), whatever it knows of AAAA.
	rrs, res, _ = c.lookup("a.weave.local.", "a.weave.local.", dns.TypeA, now.Add(11*time.Second), nil)
	if res != Unknown || len(rrs) != 0 {
		t.Fatalf("expired A still served: %v %v", res, rrs)
	}
	// A goodbye leaves the address one more second (RFC 6762 §10.1).
	c.Add("a.weave.local.", ip("fd00::1"), 0, false, now.Add(12*time.Second))
	if _, res, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeAAAA, now.Add(12500*time.Millisecond), nil); res != Positive {
		t.Fatalf("goodbye removed the address at once: %v", res)
	}
	if _, res, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeAAAA, now.Add(13*time.Second), nil); res != Unknown || c.Len() != 0 {
		t.Fatalf("goodbye not honoured after 1 s: %v, len %d", res, c.Len())
	}
	c.Add("b.weave.local.", ip("10.0.0.2"), 0, false, now) // goodbye for an unknown name adds nothing
	if c.Len() != 0 {
		t.Fatal("goodbye created an entry")
	}
}

// TestCachePerType: the two address families of a name are cached apart:
// a name heard with A only knows nothing of AAAA (the caller asks), and
// ANY is positive when either is.
func TestCachePerType(t *testing.T) {
	c := newCache(10)
	now := time.Unix(1000, 0)
	c.Add("a.weave.local.", ip("10.0.0.1"), 60, false, now)
	if _, res, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeAAAA, now, nil); res != Unknown {
		t.Fatalf("AAAA of an A-only name: %v, want none", res)
	}
	c.SetNegative("a.weave.local.", true, now.Add(5*time.Second), now)
	if _, res, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeAAAA, now, nil); res != Negative {
		t.Fatalf("AAAA negative: %v", res)
	}
	if rrs, res, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeANY, now, nil); res != Positive || len(rrs) != 1 {
		t.Fatalf("ANY: %v %v", res, rrs)
	}
	if !c.live("a.weave.local.", false, now) || c.live("a.weave.local.", true, now) || c.Len() != 2 {
		t.Fatalf("live A/AAAA wrong, len %d", c.Len())
	}
	c.forget("a.weave.local.")
	if c.Len() != 0 {
		t.Fatalf("forget left %d entries", c.Len())
	}
}

// TestCacheRefreshPoints: a cached address asks to be refreshed once at
// each of 80, 85, 90 and 95 % of its TTL, and not before.
func TestCacheRefreshPoints(t *testing.T) {
	c := newCache(10)
	now := time.Unix(1000, 0)
	c.Add("r.weave.local.", ip("10.0.0.1"), 100, false, now)
	var due []int
	for s := 0; s < 100; s++ {
		if _, _, refresh := c.lookup("r.weave.local.", "r.weave.local.", dns.TypeA, now.Add(time.Duration(s)*time.Second), nil); refresh {
			due = append(due, s)
		}
	}
	if fmt.Sprint(due) != "[80 85 90 95]" {
		t.Fatalf("refresh points at %v s, want [80 85 90 95]", due)
	}
	c.Add("r.weave.local.", ip("10.0.0.1"), 100, false, now.Add(96*time.Second)) // the refresh answer starts over
	if _, _, refresh := c.lookup("r.weave.local.", "r.weave.local.", dns.TypeA, now.Add(97*time.Second), nil); refresh {
		t.Fatal("refresh due right after a fresh answer")
	}
}

func TestCacheFlushBit(t *testing.T) {
	c := newCache(10)
	now := time.Unix(1000, 0)
	c.Add("a.weave.local.", ip("10.0.0.1"), 100, false, now)
	c.Add("a.weave.local.", ip("fd00::1"), 100, false, now)
	c.Add("a.weave.local.", ip("10.0.0.2"), 100, true, now.Add(5*time.Second))
	c.Add("a.weave.local.", ip("10.0.0.3"), 100, true, now.Add(5500*time.Millisecond)) // within 1s: both stay
	rrs, _, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeANY, now.Add(6*time.Second), nil)
	if len(rrs) != 3 {
		t.Fatalf("flush: want 10.0.0.2, 10.0.0.3 and the AAAA, got %v", rrs)
	}
}

func TestCacheNegative(t *testing.T) {
	c := newCache(10)
	now := time.Unix(1000, 0)
	c.SetNegative("n.weave.local.", false, now.Add(5*time.Second), now)
	if _, res, _ := c.lookup("n.weave.local.", "n.weave.local.", dns.TypeA, now.Add(4*time.Second), nil); res != Negative {
		t.Fatalf("want negative, got %v", res)
	}
	if _, res, _ := c.lookup("n.weave.local.", "n.weave.local.", dns.TypeA, now.Add(6*time.Second), nil); res != Unknown {
		t.Fatalf("negative outlived negative_ttl: %v", res)
	}
	c.SetNegative("n.weave.local.", false, now.Add(5*time.Second), now)
	c.Add("n.weave.local.", ip("10.0.0.1"), 60, true, now.Add(time.Second)) // an answer replaces it
	if _, res, _ := c.lookup("n.weave.local.", "n.weave.local.", dns.TypeA, now.Add(2*time.Second), nil); res != Positive {
		t.Fatalf("answer did not replace negative: %v", res)
	}
	c.SetNegative("n.weave.local.", false, now.Add(9*time.Second), now.Add(2*time.Second)) // never over live addresses
	if !c.Has("n.weave.local.", now.Add(3*time.Second)) {
		t.Fatal("negative overrode live addresses")
	}
}

func TestCacheBounds(t *testing.T) {
	c := newCache(100)
	now := time.Unix(1000, 0)
	for i := 0; i < 10000; i++ {
		c.Add(fmt.Sprintf("n%d.weave.local.", i), ip("10.0.0.1"), 60, false, now)
		if i == 50 {
			c.lookup("n0.weave.local.", "n0.weave.local.", dns.TypeA, now, nil) // keep n0 recently used
		}
	}
	if c.Len() != 100 || c.mapLen() != 100 {
		t.Fatalf("cache grew past its bound: %d", c.Len())
	}
	if c.Has("n0.weave.local.", now) {
		t.Fatal("n0 should be evicted after 10000 newer names")
	}
	if !c.Has("n9999.weave.local.", now) || c.Has("n9899.weave.local.", now) {
		t.Fatal("not LRU")
	}
	// LRU order: a touched entry survives the next eviction.
	c2 := newCache(2)
	c2.Add("a.", ip("10.0.0.1"), 60, false, now)
	c2.Add("b.", ip("10.0.0.1"), 60, false, now)
	c2.lookup("a.", "a.", dns.TypeA, now, nil)
	c2.Add("c.", ip("10.0.0.1"), 60, false, now)
	if !c2.Has("a.", now) || c2.Has("b.", now) {
		t.Fatal("LRU evicted the wrong entry")
	}
	// One name flooded with addresses stays bounded too.
	for i := 0; i < 1000; i++ {
		c.Add("flood.weave.local.", ip(fmt.Sprintf("10.1.%d.%d", i/256, i%256)), uint32(60+i), false, now)
	}
	rrs, _, _ := c.lookup("flood.weave.local.", "flood.weave.local.", dns.TypeA, now, nil)
	if len(rrs) != maxAddrsPerName {
		t.Fatalf("addresses per name: %d", len(rrs))
	}
}

// mapLen counts the entries in the map (checking it against the list).
func (c *Cache) mapLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru.Len() != len(c.m) {
		panic("list and map disagree")
	}
	return len(c.m)
}

// TestCacheConcurrent: the cache never holds more than its bound, also
// under concurrent use.
func TestCacheConcurrent(t *testing.T) {
	c := newCache(1000)
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				name := fmt.Sprintf("g%d-n%d.weave.local.", g, i)
				c.Add(name, ip("10.0.0.1"), 60, false, now)
				c.lookup(name, name, dns.TypeA, now, nil)
				if i%7 == 0 {
					c.forget(name)
				}
				if i%11 == 0 {
					c.SetNegative("neg"+name, i%2 == 0, now.Add(time.Second), now)
				}
			}
		}()
	}
	wg.Wait()
	if c.Len() != 1000 || c.Len() != c.mapLen() {
		t.Fatalf("len %d, map %d, bound 1000", c.Len(), c.mapLen())
	}
}
