package mdnsfallback

import (
	"bufio"
	"cmp"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"

	"github.com/miekg/dns"
)

// List implements inspect.Lister (GET /mdnsfallback): the block's zones,
// the record database's generation (one more at every change) and its
// local records with their owner (the API: "", or the updater) and, for a
// container's, the state of its check; the containers the updater tracks
// whose records are withheld (a failing or invalid check); then the mDNS
// cache: every (name, type) other hosts answered, with each address's
// remaining TTL, and the names nobody answered with the time left on
// their negative entry. ?name= keeps one name.
//
// The records are copied under the database's lock (the records only:
// their strings are shared) so that they come from one generation and no
// slow client holds the writers up; the cache likewise, under its lock,
// bounded by its size. Remaining TTLs are as of "as_of".
func (p *MDNSFallback) List(w io.Writer, q url.Values) error {
	name, err := listName(q)
	if err != nil {
		return err
	}
	recs, gen := p.db.listed(name)
	checks := p.checkStates()
	now := time.Now()
	bw := bufio.NewWriterSize(w, 32<<10)
	b, err := json.Marshal(mdnsHead{Zones: p.cfg.zones, Generation: gen, Records: p.db.Len(), TTL: p.cfg.ttl,
		CacheEntries: p.cache.Len(), NegativeEntries: p.neg.Len(), AsOf: now.UTC(), Name: name})
	if err != nil {
		return err
	}
	bw.Write(b[:len(b)-1]) // the object without its closing brace: the lists follow
	bw.WriteString(",\"records\":[")
	var buf []byte
	for i := range recs {
		buf = appendRecord(buf[:0], &recs[i], checks, i > 0)
		bw.Write(buf)
	}
	bw.WriteString("\n],\"withheld\":[")
	for i, id := range withheld(checks, name) {
		buf = append(buf[:0], ",\n"[boolIndex(i == 0):]...)
		buf = appendWithheld(buf, id, checks[id])
		bw.Write(buf)
	}
	bw.WriteString("\n],\"cache\":[")
	writeCache(bw, p.cache.listed(name, now), now)
	bw.WriteString("\n],\"negative\":[")
	writeCache(bw, p.neg.listed(name, now), now)
	bw.WriteString("\n]}")
	return bw.Flush()
}

// mdnsHead is the listing's object before its lists.
type mdnsHead struct {
	Zones           []string  `json:"zones"`
	Generation      uint64    `json:"generation"`
	Records         int       `json:"records_count"`
	TTL             uint32    `json:"ttl"` // what a record's ttl 0 means
	CacheEntries    int       `json:"cache_entries"`
	NegativeEntries int       `json:"negative_entries"`
	AsOf            time.Time `json:"as_of"`
	Name            string    `json:"name,omitempty"`
}

// listName reads ?name= (a name in any spelling, trailing dot optional).
func listName(q url.Values) (string, error) {
	name := ""
	for k, v := range q {
		if k != "name" || len(v) != 1 {
			return "", &inspect.BadRequest{Msg: "/mdnsfallback takes one ?name= and nothing else"}
		}
		name = lowerName(dns.Fqdn(v[0]))
	}
	return name, nil
}

// listed returns the records (of name; all with "") sorted by domain, id
// and address, and the generation they are of.
func (d *DB) listed(name string) ([]Record, uint64) {
	d.mu.Lock()
	var out []Record
	if name == "" {
		out = make([]Record, 0, len(d.records))
		for _, r := range d.records {
			out = append(out, r)
		}
	} else {
		for k := range d.byName[name] {
			out = append(out, d.records[k])
		}
	}
	gen := d.generation()
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(strings.Compare(a.Domain, b.Domain), strings.Compare(a.ID, b.ID), a.IP.Compare(b.IP))
	})
	return out, gen
}

// checkState is what the listing shows of a tracked container's check.
type checkState struct {
	check    string // the label as parsed ("" without a check)
	state    string // pass, fail, invalid; "" without a check
	withheld bool   // its records are kept out of the database
	name     string // the container's name
	domain   string // its name in the zone
}

// checkStates returns the check state of every container the updater
// tracks, by container ID (nil without an updater).
func (p *MDNSFallback) checkStates() map[string]checkState {
	u := p.updater.Load()
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]checkState, len(u.tracked))
	for id, t := range u.tracked {
		c := checkState{name: t.c.Name, withheld: !t.counts(), domain: t.c.fqdn()}
		switch {
		case t.bad != "":
			c.check, c.state = t.bad, "invalid"
		case t.check != nil && t.healthy:
			c.check, c.state = t.check.String(), "pass"
		case t.check != nil:
			c.check, c.state = t.check.String(), "fail"
		}
		out[id] = c
	}
	return out
}

// withheld returns the IDs of the containers whose records are withheld
// (of name; all with ""), by domain then ID.
func withheld(checks map[string]checkState, name string) []string {
	var ids []string
	for id, c := range checks {
		if c.withheld && (name == "" || c.domain == name) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(strings.Compare(checks[a].domain, checks[b].domain), strings.Compare(a, b))
	})
	return ids
}

// appendRecord appends record r as a JSON object, with its container's
// check when it has one.
func appendRecord(b []byte, r *Record, checks map[string]checkState, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, "\n{\"domain\":"...)
	b = jsonw.AppendString(b, r.Domain)
	b = append(b, ",\"id\":"...)
	b = jsonw.AppendString(b, r.ID)
	b = append(b, ",\"ip\":\""...)
	b = r.IP.AppendTo(b)
	b = append(b, "\",\"routing_prefix\":"...)
	b = strconv.AppendInt(b, int64(r.RoutingPrefix), 10)
	b = append(b, ",\"ttl\":"...)
	b = strconv.AppendUint(b, uint64(r.TTL), 10)
	b = append(b, ",\"owner\":"...)
	b = jsonw.AppendString(b, r.Owner)
	if c, ok := checks[r.ID]; ok && r.Owner == updaterOwner && c.check != "" {
		b = append(b, ",\"check\":"...)
		b = jsonw.AppendString(b, c.check)
		b = append(b, ",\"check_state\":"...)
		b = jsonw.AppendString(b, c.state)
	}
	return append(b, '}')
}

// appendWithheld appends a tracked container whose records are withheld.
func appendWithheld(b []byte, id string, c checkState) []byte {
	b = append(b, "{\"id\":"...)
	b = jsonw.AppendString(b, id)
	b = append(b, ",\"container\":"...)
	b = jsonw.AppendString(b, c.name)
	b = append(b, ",\"domain\":"...)
	b = jsonw.AppendString(b, c.domain)
	b = append(b, ",\"check\":"...)
	b = jsonw.AppendString(b, c.check)
	b = append(b, ",\"check_state\":"...)
	b = jsonw.AppendString(b, c.state)
	return append(b, '}')
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// listedEntry is a copy of one cache entry's live part.
type listedEntry struct {
	key      cacheKey
	addrs    []cachedAddr
	negUntil time.Time
}

// listed copies the live entries (of name; all with ""), most recently
// used first, without marking them used or pruning them.
func (c *answerCache) listed(name string, now time.Time) []listedEntry {
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
		case isReverse(e.key.name):
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

// generation is the database's generation (one more at every change);
// d.mu is held, so that it is the generation of what d holds.
func (d *DB) generation() uint64 { return d.gen.Load() }
