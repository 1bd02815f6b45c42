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
	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/mdns"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"

	"github.com/miekg/dns"
)

// List implements inspect.Lister (GET /mdnsfallback): the block's zones,
// the configured interfaces (joined, over which families, or missing),
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
	recs, gen := p.db.Listed(name)
	checks := p.checkStates()
	now := time.Now()
	bw := bufio.NewWriterSize(w, 32<<10)
	nCache, nNeg := p.lan.Lens()
	b, err := json.Marshal(mdnsHead{Zones: p.cfg.zones, Interfaces: p.lan.Interfaces(), Generation: gen, Records: p.db.Len(), TTL: p.cfg.ttl,
		CacheEntries: nCache, NegativeEntries: nNeg, AsOf: now.UTC(), Name: name})
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
	p.lan.WriteCache(bw, false, name, now)
	bw.WriteString("\n],\"negative\":[")
	p.lan.WriteCache(bw, true, name, now)
	bw.WriteString("\n]}")
	return bw.Flush()
}

// mdnsHead is the listing's object before its lists.
type mdnsHead struct {
	Zones []string `json:"zones"`
	// Interfaces are the configured ones: joined (over which families)
	// or missing (waited for).
	Interfaces      []mdns.InterfaceState `json:"interfaces,omitempty"`
	Generation      uint64                `json:"generation"`
	Records         int                   `json:"records_count"`
	TTL             uint32                `json:"ttl"` // what a record's ttl 0 means
	CacheEntries    int                   `json:"cache_entries"`
	NegativeEntries int                   `json:"negative_entries"`
	AsOf            time.Time             `json:"as_of"`
	Name            string                `json:"name,omitempty"`
}

// listName reads ?name= (a name in any spelling, trailing dot optional).
func listName(q url.Values) (string, error) {
	name := ""
	for k, v := range q {
		if k != "name" || len(v) != 1 {
			return "", &inspect.BadRequest{Msg: "/mdnsfallback takes one ?name= and nothing else"}
		}
		name = dnsname.Lower(dns.Fqdn(v[0]))
	}
	return name, nil
}

// withheld returns the IDs of the containers whose records are withheld
// (of name; all with ""), by domain then ID.
func withheld(checks map[string]updater.CheckState, name string) []string {
	var ids []string
	for id, c := range checks {
		if c.Withheld && (name == "" || c.Domain == name) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(strings.Compare(checks[a].Domain, checks[b].Domain), strings.Compare(a, b))
	})
	return ids
}

// appendRecord appends record r as a JSON object, with its container's
// check when it has one.
func appendRecord(b []byte, r *records.Record, checks map[string]updater.CheckState, comma bool) []byte {
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
	if c, ok := checks[r.ID]; ok && r.Owner == updater.Owner && c.Check != "" {
		b = append(b, ",\"check\":"...)
		b = jsonw.AppendString(b, c.Check)
		b = append(b, ",\"check_state\":"...)
		b = jsonw.AppendString(b, c.State)
	}
	return append(b, '}')
}

// appendWithheld appends a tracked container whose records are withheld.
func appendWithheld(b []byte, id string, c updater.CheckState) []byte {
	b = append(b, "{\"id\":"...)
	b = jsonw.AppendString(b, id)
	b = append(b, ",\"container\":"...)
	b = jsonw.AppendString(b, c.Name)
	b = append(b, ",\"domain\":"...)
	b = jsonw.AppendString(b, c.Domain)
	b = append(b, ",\"check\":"...)
	b = jsonw.AppendString(b, c.Check)
	b = append(b, ",\"check_state\":"...)
	b = jsonw.AppendString(b, c.State)
	return append(b, '}')
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkStates returns the check state of every container the updater
// tracks, by container ID (nil without an updater).
func (p *MDNSFallback) checkStates() map[string]updater.CheckState {
	if u := p.upd.Load(); u != nil {
		return u.CheckStates()
	}
	return nil
}
