package mdns

import (
	"bufio"
	"strconv"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// WriteCache writes the live entries of the answer cache (of the negative
// one with negative) as the inspect listing's JSON objects, of name (all
// with ""), most recently used first, without marking them used.
func (n *Node) WriteCache(bw *bufio.Writer, negative bool, name string, now time.Time) {
	c := n.cache
	if negative {
		c = n.neg
	}
	writeCache(bw, c.listed(name, now), now)
}

// listedEntry is a copy of one cache entry's live part.
type listedEntry struct {
	key      cacheKey
	addrs    []cachedAddr
	negUntil time.Time
}

// listed copies the live entries (of name; all with ""), most recently
// used first, without marking them used or pruning them.
func (c *Cache) listed(name string, now time.Time) []listedEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []listedEntry
	for el := c.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*cacheEntry)
		if name != "" && e.key.name != name {
			continue
		}
		le := listedEntry{key: e.key}
		for _, a := range e.addrs {
			if now.Before(a.expires) {
				le.addrs = append(le.addrs, a)
			}
		}
		if now.Before(e.negUntil) {
			le.negUntil = e.negUntil
		}
		if len(le.addrs) > 0 || !le.negUntil.IsZero() {
			out = append(out, le)
		}
	}
	return out
}

// writeCache writes cache entries as JSON objects: name, type, the
// addresses (or PTR targets) with their remaining TTL in seconds as
// answered, and a negative entry's seconds left.
func writeCache(bw *bufio.Writer, es []listedEntry, now time.Time) {
	var b []byte
	for i, e := range es {
		b = append(b[:0], ",\n"[boolIndex(i == 0):]...)
		b = append(b, "{\"name\":"...)
		b = jsonw.AppendString(b, e.key.name)
		typ := "A"
		switch {
		case e.key.v6:
			typ = "AAAA"
		case dnsname.IsReverse(e.key.name):
			typ = "PTR"
		}
		b = append(b, ",\"type\":\""...)
		b = append(b, typ...)
		b = append(b, "\",\"answers\":["...)
		for j, a := range e.addrs {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, "{\"data\":"...)
			if a.ptr != "" {
				b = jsonw.AppendString(b, a.ptr)
			} else {
				b = append(b, '"')
				b = a.addr.AppendTo(b)
				b = append(b, '"')
			}
			b = append(b, ",\"ttl_remaining\":"...)
			b = strconv.AppendUint(b, uint64(max(a.expires.Sub(now)/time.Second, 1)), 10) // as appendRRs answers it
			b = append(b, '}')
		}
		b = append(b, ']')
		if !e.negUntil.IsZero() {
			b = append(b, ",\"negative_remaining\":"...)
			b = strconv.AppendFloat(b, e.negUntil.Sub(now).Seconds(), 'f', 1, 64)
		}
		b = append(b, '}')
		bw.Write(b)
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
