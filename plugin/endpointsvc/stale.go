package endpointsvc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Staleness: how far the served table is behind its source. It is 0
// while the source's last word was a success (a whole state, or a check
// that found nothing new), and from a failure on the time since the last
// success; a source whose own data is behind (the replica source: its
// leader's staleness, feed.Aged) makes it that much. A patch says nothing
// of the source's health and leaves it as it is. A table loaded from the
// snapshot is as old as the file until the source reports.
type freshness struct {
	staleSince atomic.Int64 // Unix nanoseconds the table is known current up to; 0: current
}

// age is the staleness at now.
func (f *freshness) age(now time.Time) time.Duration {
	s := f.staleSince.Load()
	if s == 0 {
		return 0
	}
	return max(now.Sub(time.Unix(0, s)), time.Nanosecond) // stale, even on a clock that stepped back
}

// current records a success whose data is age behind (0: current); it
// reports whether the table went from stale to current or back.
func (f *freshness) current(now time.Time, age time.Duration) bool {
	var since int64
	if age > 0 {
		since = now.Add(-age).UnixNano()
	}
	return (f.staleSince.Swap(since) == 0) != (since == 0)
}

// failed records a failure at now; it reports whether the table was
// current until then.
func (f *freshness) failed(now time.Time) bool {
	return f.staleSince.CompareAndSwap(0, now.UnixNano())
}

// staleSet marks the table stale since t (a snapshot's time).
func (f *freshness) staleSet(t time.Time) { f.staleSince.Store(t.UnixNano()) }

// staleChanged tells the replication leader, if any, that the staleness
// changed, so that its followers hear it now.
func (e *Endpointsvc) staleChanged() {
	if e.replicating != nil {
		e.replicating.leader.Stale()
	}
}

// tableAge is the served table's staleness now.
func (e *Endpointsvc) tableAge() time.Duration { return e.fresh.age(time.Now()) }

// staleEDE is the stale_ede option: with on, answers from a table
// further behind its source than after carry Extended DNS Error 3, Stale
// Answer (RFC 8914).
type staleEDE struct {
	on    bool
	after time.Duration
}

// staleOption reads `stale_ede [AGE]`.
func (o *options) staleOption(c *caddy.Controller, e *Endpointsvc) error {
	if e.stale.on {
		return c.Err("stale_ede can only be given once")
	}
	a := c.RemainingArgs()
	e.stale.on = true
	switch len(a) {
	case 0:
	case 1:
		d, err := time.ParseDuration(a[0])
		if err != nil || d < 0 {
			return c.Errf("bad stale_ede age %q: want a duration such as 0s or 30s", a[0])
		}
		e.stale.after = d
	default:
		return c.ArgErr()
	}
	return nil
}

// markStale adds the Stale Answer EDE to m, the reply to r, when the
// option is on, the table is stale enough and the client speaks EDNS
// (RFC 8914: the option travels in the OPT record).
func (e *Endpointsvc) markStale(m, r *dns.Msg) {
	if !e.stale.on || e.fresh.staleSince.Load() == 0 || r.IsEdns0() == nil {
		return
	}
	age := e.tableAge()
	if age <= e.stale.after {
		return
	}
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeStaleAnswer,
		ExtraText: fmt.Sprintf("%s: source failing, table %ds old", pluginName, int64(age.Seconds()))})
	m.Extra = append(m.Extra, opt)
}

// tableAges collects coredns_endpointsvc_table_age_seconds of the running
// instances at each scrape (a gauge set by a timer would be as old as its
// last tick). An instance is listed from OnStartup to OnShutdown; during a
// reload the newer instance of a server and zone takes the label set.
type tableAges struct {
	mu   sync.Mutex
	live map[[2]string]*Endpointsvc // (server, zone) → the instance
}

var (
	ageDesc = prometheus.NewDesc(prometheus.BuildFQName(plugin.Namespace, pluginName, "table_age_seconds"),
		"How far the served table is behind its source, in seconds: 0 while the source is current, else the time since it last was (for source replica: plus its leader's).",
		[]string{"server", "zone"}, nil)
	ages = &tableAges{live: map[[2]string]*Endpointsvc{}}
)

func init() { prometheus.MustRegister(ages) }

// Describe implements prometheus.Collector.
func (a *tableAges) Describe(ch chan<- *prometheus.Desc) { ch <- ageDesc }

// Collect implements prometheus.Collector.
func (a *tableAges) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for k, e := range a.live {
		if e.tbl.Load() == nil {
			continue // no table, no age
		}
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, e.fresh.age(now).Seconds(), k[0], k[1])
	}
}

// list adds e's label sets (OnStartup).
func (a *tableAges) list(e *Endpointsvc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range e.servers {
		a.live[[2]string{s, e.Zones[0]}] = e
	}
}

// drop removes e's label sets, those a newer instance did not take
// (OnShutdown).
func (a *tableAges) drop(e *Endpointsvc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, x := range a.live {
		if x == e {
			delete(a.live, k)
		}
	}
}
