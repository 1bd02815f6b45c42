// Package mdns is mdnsfallback's multicast DNS side (RFC 6762): the
// responder that answers other hosts' questions for the local records and
// announces them, the bounded cache of what other hosts answered, and the
// queries the fallback sends for names nobody here holds, shared between
// concurrent requests and bounded by a budget.
//
// It reaches the local records only through Local. Invariants: cache keys
// are lowercased FQDNs; records it sends never carry the cache-flush bit
// (every name is shared); the cache never holds more than CacheSize
// (name, address family) entries.
package mdns

import (
	"context"
	"net/netip"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/pkg/gauges"

	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin("mdnsfallback")

// Local is what the mDNS side needs of the local record database: look a
// name or an address up, and list the records (to announce them, or to say
// goodbye).
type Local interface {
	// Lookup returns the entry of a lowercased FQDN, or nil.
	Lookup(name string) *records.Entry
	// LookupPTR returns the names bound to an address.
	LookupPTR(a netip.Addr) []string
	// Records returns the records of an identifier, all with "".
	Records(id string) []records.Record
}

// Config is what the mDNS side takes from the Corefile stanza.
type Config struct {
	Servers     []string       // server labels of the cache_entries gauge
	Zones       []string       // lowercased; answers outside them are not cached
	Reverse     []netip.Prefix // networks whose PTR records are cached and asked for
	TTL         uint32         // what a record's TTL 0 stands for
	CacheSize   int            // entries of the answer cache (and of the negative one)
	NegativeTTL time.Duration  // how long "nobody answered" is remembered
	QueryRate   int            // queries a second over all names
	Timeout     time.Duration  // how long a query waits for answers
}

// Node is one server block's mDNS side: the caches, the queries in
// flight and their budget, and the responder while it is open.
type Node struct {
	cfg      Config
	local    Local
	cache    *Cache // names peers answered
	neg      *Cache // names nobody answered: a budget of its own, so a flood of them never evicts an answer
	inflight *inflight
	limiter  *queryLimiter
	gauge    gauges.Set // cache_entries of this block
	resp     atomic.Pointer[Responder]

	queries, answers atomic.Int64
}

// New returns a node with empty caches and no responder.
func New(cfg Config, local Local) *Node {
	listCounters()
	return &Node{
		cfg: cfg, local: local,
		cache:    newCache(cfg.CacheSize),
		neg:      newCache(cfg.CacheSize),
		inflight: newInflight(1024),
		limiter:  newQueryLimiter(cfg.QueryRate),
		gauge:    gauges.Of(cacheEntries, cfg.Servers),
	}
}

// SetTimeout changes how long the next queries wait (tests).
func (n *Node) SetTimeout(d time.Duration) { n.cfg.Timeout = d }

// Answers is the cache of what other hosts answered; Negatives the names
// nobody answered.
func (n *Node) Answers() *Cache   { return n.cache }
func (n *Node) Negatives() *Cache { return n.neg }

// Stats returns the queries sent (one per interface) and the answer
// records cached.
func (n *Node) Stats() (queries, answers int64) { return n.queries.Load(), n.answers.Load() }

// Active reports whether the responder is open (interfaces configured and
// started).
func (n *Node) Active() bool { return n.resp.Load() != nil }

// Lookup appends to out the records the caches hold for name as qtype
// asks (owner qname): positive when any asked type has addresses,
// negative when every asked type is known to have none, Unknown
// otherwise. refresh says a cached address passed a refresh point: the
// caller should ask the network again.
func (n *Node) Lookup(name, qname string, qtype uint16, now time.Time) ([]dns.RR, Result, bool) {
	rrs, res, refresh := n.cache.lookup(name, qname, qtype, now, nil)
	if res == Unknown {
		_, res, _ = n.neg.lookup(name, qname, qtype, now, nil)
	}
	return rrs, res, refresh
}

// Has reports whether name has live cached addresses of either family.
func (n *Node) Has(name string, now time.Time) bool { return n.cache.Has(name, now) }

// Len is the number of cache entries, answered and negative.
func (n *Node) Len() int { return n.cache.Len() + n.neg.Len() }

// Lens returns the entries of the answer cache and of the negative one.
func (n *Node) Lens() (answers, negatives int) { return n.cache.Len(), n.neg.Len() }

func (n *Node) setGauge() { n.gauge.Set(float64(n.Len())) }

// Outcomes of Resolve.
const (
	Asked  = iota // the network was asked (or a query in flight joined)
	Busy          // not asked: no responder, too many queries in flight, or the query budget spent
	Recent        // not asked: the name was asked less than a second ago
)

// Resolve asks the network for name, sharing one mDNS query between
// concurrent requests, and waits at most the timeout (or until ctx ends).
// A new query must pass the limiter; one it holds back ends the call at
// once, without a negative entry (nobody was asked).
func (n *Node) Resolve(ctx context.Context, name string) int {
	resp := n.resp.Load()
	if resp == nil {
		return Busy
	}
	c, why := n.ask(resp, name, queryAsked)
	switch {
	case c == nil && why == limitedName:
		return Recent
	case c == nil:
		return Busy
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	return Asked
}

// Refresh asks the network for a cached name clients still use, without
// waiting, within half the query budget.
func (n *Node) Refresh(name string) {
	if resp := n.resp.Load(); resp != nil {
		n.ask(resp, name, queryRefresh)
	}
}

// AskOthers asks the network for the other holders of a name this host
// holds, without waiting, within a budget of its own: the refreshes of
// other hosts' names are never refused for them.
func (n *Node) AskOthers(name string) {
	if resp := n.resp.Load(); resp != nil {
		n.ask(resp, name, queryOthers)
	}
}

// Await waits for the query for name in flight, if any, to end (or ctx);
// it never sends one.
func (n *Node) Await(ctx context.Context, name string) {
	if c := n.inflight.get(name); c != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
		}
	}
}

// ask sends a query for name unless one is in flight (then it joins it),
// and returns the call; nil and why when the query was held back.
// When the call ends, each address family nobody answered is remembered
// as such for negative_ttl.
func (n *Node) ask(resp *Responder, name string, kind int) (*call, string) {
	qm := resp.shared.Load()
	c, leader := n.inflight.join(name, n.cfg.Timeout, qm, func() {
		now := time.Now()
		if n.cfg.NegativeTTL <= 0 {
			return
		}
		for _, v6 := range [2]bool{false, true} {
			if v6 && dnsname.IsReverse(name) {
				break // a reverse name's PTR records are cached under v6 false
			}
			if !n.cache.live(name, v6, now) {
				n.neg.SetNegative(name, v6, now.Add(n.cfg.NegativeTTL), now)
			}
		}
		n.setGauge()
	})
	if c == nil {
		return nil, limitedRate
	}
	if leader {
		if ok, why := n.limiter.allowKind(name, time.Now(), kind); !ok {
			mdnsLimited.WithLabelValues(why).Inc()
			n.inflight.abandon(name, c)
			return nil, why
		}
		resp.query(name, qm)
	}
	return c, ""
}

// Open binds the mDNS sockets, joins the groups on the interfaces named
// that exist (the others when they appear), starts the responder and
// announces every local record.
func (n *Node) Open(names []string) error {
	r := newResponder(n, names)
	if err := r.open(); err != nil {
		return err
	}
	n.resp.Store(r)
	r.announceAll(nil) // the records of a snapshot or a reload, and any put before
	r.opened.Store(true)
	return nil
}

// Close stops the responder (when open) and ends every query in flight.
func (n *Node) Close() {
	if r := n.resp.Swap(nil); r != nil {
		r.close()
	}
	n.inflight.stop()
}

// Announce is the database's put hook: peers learn the name at once (RFC
// 6762 §8.3). The other hosts' addresses heard for the name stay: the name
// answers the union of its local records and theirs.
func (n *Node) Announce(rec records.Record) {
	if r := n.resp.Load(); r != nil {
		r.scheduleAnnounce(rec.Domain, time.Now())
	}
}

// Goodbye is the database's deletion hook, and what a stop sends for
// every local record: TTL-0 records on every link.
func (n *Node) Goodbye(gone []records.Record) {
	if r := n.resp.Load(); r != nil {
		r.goodbye(gone)
	}
}

// GoodbyeAll is what a stop sends: goodbyes for recs (every local
// record) on every interface, after which the responder sends nothing
// else (a reply or announcement still due would contradict them).
func (n *Node) GoodbyeAll(recs []records.Record) {
	if r := n.resp.Load(); r != nil {
		r.quiet.Store(true)
		r.goodbye(recs)
	}
}

// ttl is the TTL a record's t stands for.
func (n *Node) ttl(t uint32) uint32 {
	if t == 0 {
		return n.cfg.TTL
	}
	return t
}

// inZones reports whether name (a lowercased FQDN) is inside the zones.
func (n *Node) inZones(name string) bool { return dnsname.Longest(n.cfg.Zones, name) >= 0 }
