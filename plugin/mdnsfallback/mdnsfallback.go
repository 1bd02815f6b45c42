// Package mdnsfallback is a CoreDNS plugin after the Weave DNS design: a
// local record database fed over HTTP answers names in its zones at once,
// answers other hosts' multicast DNS questions for them, and asks the
// network over mDNS (RFC 6762) for names, caching what it hears in a
// bounded LRU. Every name is shared: it answers the union of the local
// records and the records every other host answered.
//
// Invariants: names are keyed as lowercased FQDNs; ServeDNS reads the
// record database through its index's read lock; records sent
// over mDNS never carry the cache-flush bit; the mDNS cache never holds
// more than `cache` (name, address family) entries.
package mdnsfallback

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/pkg/fall"

	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
	"github.com/miekg/dns"
)

// MDNSFallback is the plugin handler.
type MDNSFallback struct {
	Next plugin.Handler
	cfg  config

	db       *DB
	cache    *answerCache // names peers answered
	neg      *answerCache // names nobody answered: a budget of its own, so a flood of them never evicts an answer
	inflight *inflight
	limiter  *queryLimiter

	cacheGauge, recordsGauge gauges.Set                // this block's cache_entries and records
	mdns                     atomic.Pointer[responder] // nil without interfaces or before start
	ready                    atomic.Bool
	restarting               atomic.Bool // a reload is stopping this instance: no goodbyes
	stats                    stats

	soas         []soa.Names // SOA names of cfg.zones, in the same order
	reverseZones []string    // reverse zones covering cfg.reverse, for the SOA
	reverseSOAs  []soa.Names // SOA names of reverseZones, in the same order
	negTTL       uint32      // cfg.negativeTTL in seconds: the SOA's TTL and minimum
	api          *apiServer
	snap         atomic.Pointer[snapshotWriter] // nil without snapshot or when stopped
	updater      atomic.Pointer[updater]        // nil without updater or when stopped

	// newEngine makes the updater's engine client; nil means Docker (tests
	// put a fake here).
	newEngine func(endpoint string) (engine, error)
}

// stats are the counters /status reports (Prometheus has them too).
type stats struct {
	results          [numResults]atomic.Int64
	queries, answers atomic.Int64
}

// config is the parsed Corefile stanza.
type config struct {
	servers     []string // the server labels of the gauges (conf.Servers)
	zones       []string
	block       string // the server block's place in the Corefile: the carry key
	api         string // "" when off
	dnsHost     string // the server block's first listen address ("" for all), for Weave's /dns-address
	dnsPort     string // the server block's port
	apiLine     int    // the Corefile line of api, for the error about it
	insecure    bool   // an API beyond loopback without token_file is allowed
	tokenFile   string
	token       string
	interfaces  []string
	timeout     time.Duration
	ttl         uint32
	cacheSize   int
	negativeTTL time.Duration
	queryRate   int // mDNS queries a second, over all names
	reverse     []netip.Prefix
	maxRecords  int
	snapshot    string
	fall        fall.F
	updater     *updaterConfig // nil without an updater sub-block
}

func newMDNSFallback(cfg config) *MDNSFallback {
	p := &MDNSFallback{cfg: cfg}
	p.cacheGauge, p.recordsGauge = gauges.Of(cacheEntries, cfg.servers), gauges.Of(records, cfg.servers)
	p.db = NewDB(cfg.zones, cfg.maxRecords)
	p.db.defaultTTL = cfg.ttl
	p.cache = newAnswerCache(cfg.cacheSize)
	p.neg = newAnswerCache(cfg.cacheSize)
	p.limiter = newQueryLimiter(cfg.queryRate)
	p.inflight = newInflight(1024)
	p.negTTL = uint32(cfg.negativeTTL / time.Second)
	for _, z := range cfg.zones {
		p.soas = append(p.soas, soa.For(z))
	}
	for _, pr := range cfg.reverse {
		z := reverseZone(pr)
		p.reverseZones = append(p.reverseZones, z)
		p.reverseSOAs = append(p.reverseSOAs, soa.For(z))
	}
	p.db.onGone = p.sendGoodbyes
	p.db.onPut = p.announce
	p.db.onChange = func() {
		p.recordsGauge.Set(float64(p.db.Len()))
		if s := p.snap.Load(); s != nil {
			s.notify()
		}
	}
	return p
}

// Name implements plugin.Handler.
func (p *MDNSFallback) Name() string { return pluginName }

// DB returns the record database (the API and a container updater write
// through it).
func (p *MDNSFallback) DB() *DB { return p.db }

// ServeDNS implements plugin.Handler.
func (p *MDNSFallback) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) == 0 {
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	q := r.Question[0]
	qname, qtype := q.Name, q.Qtype
	name := lowerName(qname)
	if isReverse(name) {
		// Reverse names never reach the mDNS path, even inside the zones.
		if qtype == dns.TypePTR && len(p.cfg.reverse) > 0 {
			return p.servePTR(ctx, w, r, qname)
		}
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	zone := p.zoneSOA(name)
	if zone == nil {
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	server := metrics.WithServer(ctx)

	if e := p.db.ix.lookup(name); e != nil {
		p.count(server, resLocal)
		return p.reply(w, r, zone, p.withRemote(e, name, qname, qtype))
	}
	if name == zone.Zone { // the apex: its SOA, NODATA for anything else, never mDNS
		if qtype == dns.TypeSOA {
			return p.reply(w, r, zone, []dns.RR{p.soa(zone)})
		}
		return p.reply(w, r, zone, nil)
	}
	return p.serveRemote(ctx, w, r, zone, server, name)
}

// withRemote returns the local records of e as qtype asks, with the
// addresses other hosts answered for the name (a name shared by several
// hosts answers the union), shuffled. When nothing is known of the other
// hosts, or a cached address passed a refresh point, the network is asked
// in the background: the local answer never waits.
func (p *MDNSFallback) withRemote(e *nameEntry, name, qname string, qtype uint16) []dns.RR {
	answer := p.entryRRs(e, qname, qtype)
	resp := p.mdns.Load()
	if resp == nil {
		return answer
	}
	now := time.Now()
	remote, res, refresh := p.cache.lookup(name, qname, qtype, now, nil)
	if res == cacheNone {
		_, res, _ = p.neg.lookup(name, qname, qtype, now, nil)
	}
	if res == cacheNone || refresh {
		p.askInBackground(resp, name)
	}
	for _, rr := range remote {
		if !holds(answer, rr) {
			answer = append(answer, rr)
		}
	}
	shuffle(answer)
	return answer
}

// serveRemote answers a name with no local record: from the cache, else
// by asking the network.
func (p *MDNSFallback) serveRemote(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone *soa.Names, server, name string) (int, error) {
	qname, qtype := r.Question[0].Name, r.Question[0].Qtype
	now := time.Now()
	answer, res, refresh := p.cache.lookup(name, qname, qtype, now, nil)
	if res == cacheNone {
		_, res, _ = p.neg.lookup(name, qname, qtype, now, nil)
	}
	resp := p.mdns.Load()
	switch res {
	case cachePositive:
		if refresh && resp != nil {
			p.askInBackground(resp, name)
		}
		p.count(server, resCache)
		return p.reply(w, r, zone, shuffle(answer))
	case cacheNegative:
		p.count(server, resNegative)
		return p.noAnswer(ctx, w, r, zone, name, now)
	}
	if resp == nil {
		p.count(server, resMiss)
		return p.noAnswer(ctx, w, r, zone, name, now)
	}
	switch p.resolve(ctx, resp, name) {
	case resolveBusy:
		p.count(server, resMiss)
		return dns.RcodeServerFailure, nil // too many mDNS queries in flight, or the query budget spent
	case resolveRecent:
		p.count(server, resMiss)
		return p.noAnswer(ctx, w, r, zone, name, time.Now()) // asked less than a second ago, and nobody answered
	}
	now = time.Now()
	answer, res, _ = p.cache.lookup(name, qname, qtype, now, nil)
	if res == cachePositive {
		p.count(server, resMDNS)
		return p.reply(w, r, zone, shuffle(answer))
	}
	p.count(server, resMiss)
	return p.noAnswer(ctx, w, r, zone, name, now)
}

// noAnswer is NODATA when the name has addresses of the other type, else
// NXDOMAIN (or the next plugin).
func (p *MDNSFallback) noAnswer(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone *soa.Names, name string, now time.Time) (int, error) {
	if p.cache.has(name, now) {
		return p.reply(w, r, zone, nil)
	}
	return p.nxdomain(ctx, w, r, zone, r.Question[0].Name)
}

// holds reports whether rrs hold an address record equal to rr.
func holds(rrs []dns.RR, rr dns.RR) bool {
	for _, x := range rrs {
		if equalAddr(x, rr) {
			return true
		}
	}
	return false
}

// shuffle puts the records in random order, as Weave's nameserver did,
// so clients that take the first address spread over the hosts of a
// shared name.
func shuffle(rrs []dns.RR) []dns.RR {
	if len(rrs) > 1 {
		rand.Shuffle(len(rrs), func(i, j int) { rrs[i], rrs[j] = rrs[j], rrs[i] })
	}
	return rrs
}

// setCacheGauge sets cache_entries: the names answered and the negative
// ones.
func (p *MDNSFallback) setCacheGauge() { p.cacheGauge.Set(float64(p.cache.Len() + p.neg.Len())) }

// Outcomes of resolve.
const (
	resolveAsked  = iota // the network was asked (or a query in flight joined)
	resolveBusy          // not asked: too many queries in flight, or the query budget spent
	resolveRecent        // not asked: the name was asked less than a second ago
)

// resolve asks the network for name, sharing one mDNS query between
// concurrent requests, and waits at most the timeout (or until ctx ends).
// A new query must pass the limiter; one it holds back ends the call at
// once, without a negative entry (nobody was asked).
func (p *MDNSFallback) resolve(ctx context.Context, resp *responder, name string) int {
	c, why := p.ask(resp, name, false)
	switch {
	case c == nil && why == limitedName:
		return resolveRecent
	case c == nil:
		return resolveBusy
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	return resolveAsked
}

// ask sends a query for name unless one is in flight (then it joins it),
// and returns the call; nil and why when the query was held back.
// When the call ends, each address family nobody answered is remembered
// as such for negative_ttl.
func (p *MDNSFallback) ask(resp *responder, name string, background bool) (*call, string) {
	qm := resp.shared.Load()
	c, leader := p.inflight.join(name, p.cfg.timeout, qm, func() {
		now := time.Now()
		if p.cfg.negativeTTL <= 0 {
			return
		}
		for _, v6 := range [2]bool{false, true} {
			if v6 && isReverse(name) {
				break // a reverse name's PTR records are cached under v6 false
			}
			if !p.cache.live(name, v6, now) {
				p.neg.setNegative(name, v6, now.Add(p.cfg.negativeTTL), now)
			}
		}
		p.setCacheGauge()
	})
	if c == nil {
		return nil, limitedRate
	}
	if leader {
		allow := p.limiter.allow
		if background {
			allow = p.limiter.allowBackground
		}
		if ok, why := allow(name, time.Now()); !ok {
			mdnsLimited.WithLabelValues(why).Inc()
			p.inflight.abandon(name, c)
			return nil, why
		}
		resp.query(name, qm)
	}
	return c, ""
}

// askInBackground asks the network for name without waiting (a local
// name's other hosts, a refresh), within half the query budget.
func (p *MDNSFallback) askInBackground(resp *responder, name string) { p.ask(resp, name, true) }

// Request results, the values of the result label.
const (
	resLocal = iota
	resCache
	resMDNS
	resNegative
	resMiss
	numResults
)

var resultNames = [numResults]string{"local", "cache", "mdns", "negative", "miss"}

// count increments the request counters of result.
func (p *MDNSFallback) count(server string, result int) {
	requests.WithLabelValues(server, resultNames[result]).Inc()
	p.stats.results[result].Add(1)
}

// reply writes an authoritative answer; an empty one is NODATA with the SOA.
func (p *MDNSFallback) reply(w dns.ResponseWriter, r *dns.Msg, zone *soa.Names, answer []dns.RR) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = answer
	if len(answer) == 0 {
		m.Ns = []dns.RR{p.soa(zone)}
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// nxdomain answers NXDOMAIN with the SOA, or hands over to the next plugin
// when fallthrough covers qname.
func (p *MDNSFallback) nxdomain(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone *soa.Names, qname string) (int, error) {
	if p.cfg.fall.Through(qname) {
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeNameError)
	m.Authoritative = true
	m.Ns = []dns.RR{p.soa(zone)}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// servePTR answers PTR queries for addresses inside the reverse networks
// from local records; any other reverse name goes to the next plugin at once.
func (p *MDNSFallback) servePTR(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, qname string) (int, error) {
	addr, ok := parseReverse(qname)
	if !ok || !p.inReverse(addr) {
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	var zone *soa.Names
	if z := plugin.Zones(p.reverseZones).Matches(lowerName(qname)); z != "" {
		for i := range p.reverseZones {
			if p.reverseZones[i] == z {
				zone = &p.reverseSOAs[i]
				break
			}
		}
	}
	if zone == nil { // cannot happen: inReverse matched one of the networks
		n := soa.For(lowerName(qname))
		zone = &n
	}
	server := metrics.WithServer(ctx)
	names := p.db.ix.lookupPTR(addr)
	if len(names) == 0 {
		if p.mdns.Load() != nil { // another host's address: ask over mDNS
			return p.serveRemote(ctx, w, r, zone, server, lowerName(qname))
		}
		p.count(server, resMiss)
		return p.nxdomain(ctx, w, r, zone, qname)
	}
	p.count(server, resLocal)
	answer := p.ptrRRs(names, qname)
	if p.mdns.Load() != nil {
		remote, _, _ := p.cache.lookup(lowerName(qname), qname, dns.TypePTR, time.Now(), nil)
		for _, rr := range remote {
			if !holds(answer, rr) {
				answer = append(answer, rr)
			}
		}
	}
	return p.reply(w, r, zone, answer)
}

// ptrRRs builds the PTR records of names under qname.
func (p *MDNSFallback) ptrRRs(names []string, qname string) []dns.RR {
	if len(names) == 0 {
		return nil
	}
	answer := make([]dns.RR, 0, len(names))
	for _, n := range names {
		answer = append(answer, &dns.PTR{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: p.cfg.ttl}, Ptr: n})
	}
	return answer
}

func (p *MDNSFallback) inReverse(a netip.Addr) bool {
	for _, pr := range p.cfg.reverse {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// entryRRs builds the A/AAAA records of a local entry under qname. They
// never carry the cache-flush bit, in DNS or in mDNS: every name is shared
// by design (containers of one service on several hosts share a name), so
// a host's records must not evict another host's from peer caches.
func (p *MDNSFallback) entryRRs(e *nameEntry, qname string, qtype uint16) []dns.RR {
	const class = dns.ClassINET
	wantA := qtype == dns.TypeA || qtype == dns.TypeANY
	wantAAAA := qtype == dns.TypeAAAA || qtype == dns.TypeANY
	n := 0
	if wantA {
		n += len(e.a)
	}
	if wantAAAA {
		n += len(e.aaaa)
	}
	if n == 0 {
		return nil
	}
	out := make([]dns.RR, 0, n)
	if wantA && len(e.a) > 0 {
		rrs := make([]dns.A, len(e.a)) // one allocation for all of them
		for i, ip := range e.a {
			rrs[i] = dns.A{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeA, Class: class, Ttl: p.ttl(e.ttlA[i])}, A: ip}
			out = append(out, &rrs[i])
		}
	}
	if wantAAAA && len(e.aaaa) > 0 {
		rrs := make([]dns.AAAA, len(e.aaaa))
		for i, ip := range e.aaaa {
			rrs[i] = dns.AAAA{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeAAAA, Class: class, Ttl: p.ttl(e.ttlAAAA[i])}, AAAA: ip}
			out = append(out, &rrs[i])
		}
	}
	return out
}

func (p *MDNSFallback) ttl(t uint32) uint32 {
	if t == 0 {
		return p.cfg.ttl
	}
	return t
}

// soa is the synthesised SOA of zone; its TTL and minimum are the negative
// TTL. The names were built at setup, so this only copies strings.
func (p *MDNSFallback) soa(zone *soa.Names) dns.RR {
	return zone.New(p.negTTL, 1)
}

// zoneSOA returns the SOA names of the longest zone that holds name (a
// lowercased FQDN), or nil.
func (p *MDNSFallback) zoneSOA(name string) *soa.Names {
	best := -1
	for i, z := range p.cfg.zones {
		if (best < 0 || len(z) > len(p.cfg.zones[best])) && inZone(name, z) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	return &p.soas[best]
}

// zoneOf returns the longest zone that holds name (a lowercased FQDN), or "".
func (p *MDNSFallback) zoneOf(name string) string {
	if z := p.zoneSOA(name); z != nil {
		return z.Zone
	}
	return ""
}

// inZone reports whether the lowercased FQDN name is zone or below it.
func inZone(name, zone string) bool {
	if zone == "." {
		return true
	}
	if !strings.HasSuffix(name, zone) {
		return false
	}
	return len(name) == len(zone) || name[len(name)-len(zone)-1] == '.'
}

// announce is the database's put hook: peers learn the name at once (RFC
// 6762 §8.3). The other hosts' addresses heard for the name stay: the name
// answers the union of its local records and theirs.
func (p *MDNSFallback) announce(rec Record) {
	if r := p.mdns.Load(); r != nil {
		r.scheduleAnnounce(rec.Domain, time.Now())
	}
}

// sendGoodbyes is the database's deletion hook.
func (p *MDNSFallback) sendGoodbyes(gone []Record) {
	if r := p.mdns.Load(); r != nil {
		r.goodbye(gone)
	}
}

// lowerName lowercases an ASCII name without allocating when it is already
// lower case, and makes it fully qualified.
func lowerName(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(dns.Fqdn(s))
		}
	}
	return dns.Fqdn(s)
}

// isReverse reports whether the lowercased FQDN is under in-addr.arpa. or
// ip6.arpa.
func isReverse(name string) bool {
	return strings.HasSuffix(name, ".in-addr.arpa.") || strings.HasSuffix(name, ".ip6.arpa.")
}

// parseReverse returns the address of an in-addr.arpa / ip6.arpa name.
func parseReverse(qname string) (netip.Addr, bool) {
	s := dnsutil.ExtractAddressFromReverse(lowerName(qname))
	if s == "" {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// reverseZone is the in-addr.arpa / ip6.arpa zone that covers pr, rounded
// out to a label boundary.
func reverseZone(pr netip.Prefix) string {
	a := pr.Masked().Addr()
	if a.Is4() {
		b := a.As4()
		labels := pr.Bits() / 8
		var sb strings.Builder
		for i := labels - 1; i >= 0; i-- {
			sb.WriteString(strconv.Itoa(int(b[i])) + ".")
		}
		return sb.String() + "in-addr.arpa."
	}
	b := a.As16()
	nibbles := pr.Bits() / 4
	var sb strings.Builder
	for i := nibbles - 1; i >= 0; i-- {
		v := b[i/2]
		if i%2 == 0 {
			v >>= 4
		}
		sb.WriteByte("0123456789abcdef"[v&0xf])
		sb.WriteByte('.')
	}
	return sb.String() + "ip6.arpa."
}
