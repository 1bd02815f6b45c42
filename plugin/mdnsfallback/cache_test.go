package mdnsfallback

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestCacheTTLAndGoodbye(t *testing.T) {
	c := newAnswerCache(10)
	now := time.Unix(1000, 0)
	c.add("a.weave.local.", ip("10.0.0.1"), 10, false, now)
	c.add("a.weave.local.", ip("fd00::1"), 7200, false, now)
	rrs, res := c.lookup("a.weave.local.", "A.weave.local.", dns.TypeA, now.Add(3*time.Second), nil)
	if res != cachePositive || len(rrs) != 1 || rrs[0].Header().Ttl != 7 || rrs[0].Header().Name != "A.weave.local." {
		t.Fatalf("lookup A: %v %v", res, rrs)
	}
	rrs, _ = c.lookup("a.weave.local.", "a.weave.local.", dns.TypeAAAA, now, nil)
	if len(rrs) != 1 || rrs[0].Header().Ttl != 3600 {
		t.Fatalf("TTL not capped at 1h: %v", rrs)
	}
	rrs, res = c.lookup("a.weave.local.", "a.weave.local.", dns.TypeA, now.Add(11*time.Second), nil)
	if res != cachePositive || len(rrs) != 0 {
		t.Fatalf("expired A still served: %v %v", res, rrs)
	}
	c.add("a.weave.local.", ip("fd00::1"), 0, false, now.Add(12*time.Second)) // goodbye
	if _, res := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeA, now.Add(12*time.Second), nil); res != cacheNone || c.Len() != 0 {
		t.Fatalf("goodbye not honoured: %v, len %d", res, c.Len())
	}
	c.add("b.weave.local.", ip("10.0.0.2"), 0, false, now) // goodbye for an unknown name adds nothing
	if c.Len() != 0 {
		t.Fatal("goodbye created an entry")
	}
}

func TestCacheFlushBit(t *testing.T) {
	c := newAnswerCache(10)
	now := time.Unix(1000, 0)
	c.add("a.weave.local.", ip("10.0.0.1"), 100, false, now)
	c.add("a.weave.local.", ip("fd00::1"), 100, false, now)
	c.add("a.weave.local.", ip("10.0.0.2"), 100, true, now.Add(5*time.Second))
	c.add("a.weave.local.", ip("10.0.0.3"), 100, true, now.Add(5500*time.Millisecond)) // within 1s: both stay
	rrs, _ := c.lookup("a.weave.local.", "a.weave.local.", dns.TypeANY, now.Add(6*time.Second), nil)
	if len(rrs) != 3 {
		t.Fatalf("flush: want 10.0.0.2, 10.0.0.3 and the AAAA, got %v", rrs)
	}
}

func TestCacheNegative(t *testing.T) {
	c := newAnswerCache(10)
	now := time.Unix(1000, 0)
	c.setNegative("n.weave.local.", now.Add(5*time.Second), now)
	if _, res := c.lookup("n.weave.local.", "n.weave.local.", dns.TypeA, now.Add(4*time.Second), nil); res != cacheNegative {
		t.Fatalf("want negative, got %v", res)
	}
	if _, res := c.lookup("n.weave.local.", "n.weave.local.", dns.TypeA, now.Add(6*time.Second), nil); res != cacheNone {
		t.Fatalf("negative outlived negative_ttl: %v", res)
	}
	c.setNegative("n.weave.local.", now.Add(5*time.Second), now)
	c.add("n.weave.local.", ip("10.0.0.1"), 60, true, now.Add(time.Second)) // an answer replaces it
	if _, res := c.lookup("n.weave.local.", "n.weave.local.", dns.TypeA, now.Add(2*time.Second), nil); res != cachePositive {
		t.Fatalf("answer did not replace negative: %v", res)
	}
	c.setNegative("n.weave.local.", now.Add(9*time.Second), now.Add(2*time.Second)) // never over live addresses
	if !c.has("n.weave.local.", now.Add(3*time.Second)) {
		t.Fatal("negative overrode live addresses")
	}
}

func TestCacheBounds(t *testing.T) {
	c := newAnswerCache(100)
	now := time.Unix(1000, 0)
	for i := 0; i < 10000; i++ {
		c.add(fmt.Sprintf("n%d.weave.local.", i), ip("10.0.0.1"), 60, false, now)
		if i == 50 {
			c.lookup("n0.weave.local.", "n0.weave.local.", dns.TypeA, now, nil) // keep n0 recently used
		}
	}
	if c.Len() != 100 || c.mapLen() != 100 {
		t.Fatalf("cache grew past its bound: %d", c.Len())
	}
	if c.has("n0.weave.local.", now) {
		t.Fatal("n0 should be evicted after 10000 newer names")
	}
	if !c.has("n9999.weave.local.", now) || c.has("n9899.weave.local.", now) {
		t.Fatal("not LRU")
	}
	// LRU order: a touched entry survives the next eviction.
	c2 := newAnswerCache(2)
	c2.add("a.", ip("10.0.0.1"), 60, false, now)
	c2.add("b.", ip("10.0.0.1"), 60, false, now)
	c2.lookup("a.", "a.", dns.TypeA, now, nil)
	c2.add("c.", ip("10.0.0.1"), 60, false, now)
	if !c2.has("a.", now) || c2.has("b.", now) {
		t.Fatal("LRU evicted the wrong entry")
	}
	// One name flooded with addresses stays bounded too.
	for i := 0; i < 1000; i++ {
		c.add("flood.weave.local.", ip(fmt.Sprintf("10.1.%d.%d", i/256, i%256)), uint32(60+i), false, now)
	}
	rrs, _ := c.lookup("flood.weave.local.", "flood.weave.local.", dns.TypeA, now, nil)
	if len(rrs) != maxAddrsPerName {
		t.Fatalf("addresses per name: %d", len(rrs))
	}
}

// mapLen counts the names in the shards' maps (Len is a separate counter).
func (c *answerCache) mapLen() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		if s.lru.Len() != len(s.m) {
			panic("shard list and map disagree")
		}
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// TestCacheShards: a large cache is sharded, the shares add up to the
// bound, and it never holds more than the bound, also under concurrent use.
func TestCacheShards(t *testing.T) {
	for _, tc := range []struct{ max, shards int }{{1, 1}, {100, 1}, {511, 1}, {512, 2}, {4096, 16}, {1 << 20, maxShards}} {
		c := newAnswerCache(tc.max)
		sum := 0
		for i := range c.shards {
			sum += c.shards[i].max
		}
		if len(c.shards) != tc.shards || sum != tc.max {
			t.Errorf("max %d: %d shards holding %d, want %d holding %d", tc.max, len(c.shards), sum, tc.shards, tc.max)
		}
	}
	c := newAnswerCache(1000)
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				name := fmt.Sprintf("g%d-n%d.weave.local.", g, i)
				c.add(name, ip("10.0.0.1"), 60, false, now)
				c.lookup(name, name, dns.TypeA, now, nil)
				if i%7 == 0 {
					c.forget(name)
				}
				if i%11 == 0 {
					c.setNegative("neg"+name, now.Add(time.Second), now)
				}
			}
		}()
	}
	wg.Wait()
	if c.Len() > 1000 || c.Len() != c.mapLen() {
		t.Fatalf("len %d, maps %d, bound 1000", c.Len(), c.mapLen())
	}
	if c.Len() < 900 {
		t.Fatalf("shards badly balanced: %d of 1000 used", c.Len())
	}
}
