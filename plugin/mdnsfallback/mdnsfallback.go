// Package mdnsfallback is a CoreDNS plugin after the Weave DNS design: a
// local record database fed over HTTP answers names in its zones at once,
// answers other hosts' multicast DNS questions for them, and asks the
// network over mDNS (RFC 6762) for names, caching what it hears in a
// bounded LRU. Every name is shared: it answers the union of the local
// records and the records every other host answered.
//
// The plugin is three parts under a thin top: the record database and its
// snapshot (records/), the mDNS responder and cache (mdns/, which reads the
// records through its Local interface), and the container updater
// (updater/, which writes them through its Store interface). This package
// holds ServeDNS, the Corefile stanza and its lifecycle, and the record
// API.
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
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/fall"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/mdns"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/soa"

	"github.com/miekg/dns"
)

// MDNSFallback is the plugin handler.
type MDNSFallback struct {
	Next plugin.Handler
	cfg  config

	db  *records.DB
	lan *mdns.Node // the mDNS side: responder (when interfaces are open), caches, queries

	recordsGauge gauges.Set // this block's records
	ready        atomic.Bool
	restarting   atomic.Bool // a reload is stopping this instance: no goodbyes
	stats        stats

	soas         []soa.Names // SOA names of cfg.zones, in the same order
	reverseZones []string    // reverse zones covering cfg.reverse, for the SOA
	reverseSOAs  []soa.Names // SOA names of reverseZones, in the same order
	negTTL       uint32      // cfg.negativeTTL in seconds: the SOA's TTL and minimum
	api          *apiServer
	snap         atomic.Pointer[records.Writer]  // nil without snapshot or when stopped
	upd          atomic.Pointer[updater.Updater] // nil without updater or when stopped

	// newEngine makes the updater's engine client; nil means Docker (tests
	// put a fake here).
	newEngine func(endpoint string) (updater.Engine, error)
}

// stats are the counters /status reports (Prometheus has them too).
type stats struct {
	results [numResults]atomic.Int64
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
	upd         *updater.Config // nil without an updater sub-block
}

func newMDNSFallback(cfg config) *MDNSFallback {
	p := &MDNSFallback{cfg: cfg}
	p.recordsGauge = gauges.Of(recordCount, cfg.servers)
	p.db = records.NewDB(cfg.zones, cfg.maxRecords, cfg.ttl)
	p.lan = mdns.New(mdns.Config{
		Servers: cfg.servers, Zones: cfg.zones, Reverse: cfg.reverse, TTL: cfg.ttl,
		CacheSize: cfg.cacheSize, NegativeTTL: cfg.negativeTTL, QueryRate: cfg.queryRate, Timeout: cfg.timeout,
	}, p.db)
	p.negTTL = uint32(cfg.negativeTTL / time.Second)
	for _, z := range cfg.zones {
		p.soas = append(p.soas, soa.For(z))
	}
	for _, pr := range cfg.reverse {
		z := dnsname.ReverseZone(pr)
		p.reverseZones = append(p.reverseZones, z)
		p.reverseSOAs = append(p.reverseSOAs, soa.For(z))
	}
	p.db.SetHooks(p.lan.Announce, p.lan.Goodbye, func() {
		p.recordsGauge.Set(float64(p.db.Len()))
		if s := p.snap.Load(); s != nil {
			s.Notify()
		}
	})
	return p
}

// Name implements plugin.Handler.
func (p *MDNSFallback) Name() string { return pluginName }

// ServeDNS implements plugin.Handler.
func (p *MDNSFallback) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) == 0 {
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	q := r.Question[0]
	qname, qtype := q.Name, q.Qtype
	name := dnsname.Lower(qname)
	if dnsname.IsReverse(name) {
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

	if e := p.db.Lookup(name); e != nil {
		p.count(server, resLocal)
		if !asksAddress(qtype) {
			return p.reply(w, r, zone, nil) // the name exists: NODATA, and nothing to ask the LAN
		}
		return p.reply(w, r, zone, p.withRemote(e, name, qname, qtype))
	}
	if name == zone.Zone { // the apex: its SOA, NODATA for anything else, never mDNS
		if qtype == dns.TypeSOA {
			return p.reply(w, r, zone, []dns.RR{p.soa(zone)})
		}
		return p.reply(w, r, zone, nil)
	}
	if !asksAddress(qtype) {
		return p.serveKnown(ctx, w, r, zone, server, name)
	}
	return p.serveRemote(ctx, w, r, zone, server, name)
}

// asksAddress reports whether a question of qtype is one mDNS is asked
// for: A, AAAA, or both (ANY).
func asksAddress(qtype uint16) bool {
	return qtype == dns.TypeA || qtype == dns.TypeAAAA || qtype == dns.TypeANY
}

// serveKnown answers a question of another type (HTTPS, SRV, MX, TXT…)
// for a name nobody here holds from what is known of the name, without an
// mDNS query: the LAN holds nothing but addresses. NODATA when other hosts
// answered addresses for it, NXDOMAIN (or the next plugin) otherwise. A
// query for the name's addresses already in flight (a browser asks A, AAAA
// and HTTPS at once) is waited for, never started.
func (p *MDNSFallback) serveKnown(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone *soa.Names, server, name string) (int, error) {
	p.lan.Await(ctx, name)
	if p.lan.Has(name, time.Now()) {
		p.count(server, resCache)
		return p.reply(w, r, zone, nil)
	}
	p.count(server, resMiss)
	return p.nxdomain(ctx, w, r, zone, r.Question[0].Name)
}

// withRemote returns the local records of e as qtype asks, with the
// addresses other hosts answered for the name (a name shared by several
// hosts answers the union), shuffled. When nothing is known of the other
// hosts, or a cached address passed a refresh point, the network is asked
// in the background: the local answer never waits.
func (p *MDNSFallback) withRemote(e *records.Entry, name, qname string, qtype uint16) []dns.RR {
	answer := e.RRs(qname, qtype, p.cfg.ttl)
	if !p.lan.Active() {
		return answer
	}
	remote, res, refresh := p.lan.Lookup(name, qname, qtype, time.Now())
	if res == mdns.Unknown || refresh {
		p.lan.AskOthers(name) // a budget of its own, backing off: never the refreshes'
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
	answer, res, refresh := p.lan.Lookup(name, qname, qtype, now)
	switch res {
	case mdns.Positive:
		if refresh {
			p.lan.Refresh(name)
		}
		p.count(server, resCache)
		return p.reply(w, r, zone, shuffle(answer))
	case mdns.Negative:
		p.count(server, resNegative)
		return p.noAnswer(ctx, w, r, zone, name, now)
	}
	if !p.lan.Active() {
		p.count(server, resMiss)
		return p.noAnswer(ctx, w, r, zone, name, now)
	}
	switch p.lan.Resolve(ctx, name) {
	case mdns.Busy:
		p.count(server, resMiss)
		if p.cfg.fall.Through(qname) {
			return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
		}
		return dns.RcodeServerFailure, nil // too many mDNS queries in flight, or the query budget spent
	case mdns.Recent:
		p.count(server, resMiss)
		return p.noAnswer(ctx, w, r, zone, name, time.Now()) // asked less than a second ago, and nobody answered
	}
	now = time.Now()
	answer, res, _ = p.lan.Lookup(name, qname, qtype, now)
	if res == mdns.Positive {
		p.count(server, resMDNS)
		return p.reply(w, r, zone, shuffle(answer))
	}
	p.count(server, resMiss)
	return p.noAnswer(ctx, w, r, zone, name, now)
}

// noAnswer is NODATA when the name has addresses of the other type, else
// NXDOMAIN (or the next plugin).
func (p *MDNSFallback) noAnswer(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, zone *soa.Names, name string, now time.Time) (int, error) {
	if p.lan.Has(name, now) {
		return p.reply(w, r, zone, nil)
	}
	return p.nxdomain(ctx, w, r, zone, r.Question[0].Name)
}

// holds reports whether rrs hold an address record equal to rr.
func holds(rrs []dns.RR, rr dns.RR) bool {
	for _, x := range rrs {
		if dnsname.SameData(x, rr) {
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
	addr, ok := dnsname.ParseReverse(qname)
	if !ok || !dnsname.InPrefixes(p.cfg.reverse, addr) {
		return plugin.NextOrFailure(p.Name(), p.Next, ctx, w, r)
	}
	var zone *soa.Names
	if z := plugin.Zones(p.reverseZones).Matches(dnsname.Lower(qname)); z != "" {
		for i := range p.reverseZones {
			if p.reverseZones[i] == z {
				zone = &p.reverseSOAs[i]
				break
			}
		}
	}
	if zone == nil { // cannot happen: inReverse matched one of the networks
		n := soa.For(dnsname.Lower(qname))
		zone = &n
	}
	server := metrics.WithServer(ctx)
	names := p.db.LookupPTR(addr)
	if len(names) == 0 {
		if p.lan.Active() { // another host's address: ask over mDNS
			return p.serveRemote(ctx, w, r, zone, server, dnsname.Lower(qname))
		}
		p.count(server, resMiss)
		return p.nxdomain(ctx, w, r, zone, qname)
	}
	p.count(server, resLocal)
	answer := records.PTRs(names, qname, p.cfg.ttl)
	if p.lan.Active() {
		remote, _, _ := p.lan.Lookup(dnsname.Lower(qname), qname, dns.TypePTR, time.Now())
		for _, rr := range remote {
			if !holds(answer, rr) {
				answer = append(answer, rr)
			}
		}
	}
	return p.reply(w, r, zone, answer)
}

// soa is the synthesised SOA of zone; its TTL and minimum are the negative
// TTL. The names were built at setup, so this only copies strings.
func (p *MDNSFallback) soa(zone *soa.Names) dns.RR {
	return zone.New(p.negTTL, 1)
}

// zoneSOA returns the SOA names of the longest zone that holds name (a
// lowercased FQDN), or nil.
func (p *MDNSFallback) zoneSOA(name string) *soa.Names {
	if i := dnsname.Longest(p.cfg.zones, name); i >= 0 {
		return &p.soas[i]
	}
	return nil
}
