package mdnsfallback

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

func TestQueryLimiter(t *testing.T) {
	l := newQueryLimiter(5)
	now := time.Unix(1000, 0)
	for i := range 5 {
		if ok, why := l.allow(fmt.Sprintf("n%d.", i), now); !ok {
			t.Fatalf("query %d of the burst refused (%s)", i, why)
		}
	}
	if ok, why := l.allow("n5.", now); ok || why != limitedRate {
		t.Fatalf("query past the burst: %v %q, want refused for rate", ok, why)
	}
	now = now.Add(200 * time.Millisecond) // one token back at 5/s
	if ok, _ := l.allow("n6.", now); !ok {
		t.Fatal("a query after the refill refused")
	}
	if ok, why := l.allow("n6.", now.Add(500*time.Millisecond)); ok || why != limitedName {
		t.Fatalf("the same name again within a second: %v %q, want refused for name", ok, why)
	}
	if ok, _ := l.allow("n6.", now.Add(1100*time.Millisecond)); !ok {
		t.Fatal("the same name a second later refused")
	}
}

// TestRandomNameFlood: DNS requests for 500 random names in the zone, as
// fast as they come, send at most query_rate queries a second (plus the
// burst); the others are answered SERVFAIL at once. The names' negative
// entries do not evict the names peers answered (their own budget).
func TestRandomNameFlood(t *testing.T) {
	p := newTestPlugin(func(c *config) {
		c.timeout = 20 * time.Millisecond
		c.cacheSize = 16
		c.queryRate = 10
	})
	r := testResponder(p)
	defer r.stopAnnouncements()
	p.mdns.Store(r)
	now := time.Now()
	for i := range 16 {
		r.handle(pack(t, answerMsg(aRR(fmt.Sprintf("peer%d.weave.local.", i), "10.250.0.9", 120, true))), peer, testIfIndex, now)
	}
	start := time.Now()
	servfail := 0
	for i := range 500 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("rnd%d.weave.local.", i), dns.TypeA)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		rc, _ := p.ServeDNS(context.Background(), rec, m)
		if rc == dns.RcodeServerFailure && rec.Msg == nil { // the server writes the SERVFAIL
			servfail++
		}
	}
	elapsed := time.Since(start)
	sent := p.stats.queries.Load()
	if max := int64(10 + 10*elapsed.Seconds() + 1); sent > max {
		t.Fatalf("%d queries sent in %v for 500 random names, want at most %d", sent, elapsed, max)
	}
	if servfail == 0 || int64(servfail)+sent != 500 {
		t.Fatalf("%d SERVFAIL and %d queries for 500 names", servfail, sent)
	}
	t.Logf("500 random names in %v: %d queries sent, %d SERVFAIL", elapsed.Round(time.Millisecond), sent, servfail)
	for i := range 16 {
		if !p.cache.has(fmt.Sprintf("peer%d.weave.local.", i), time.Now()) {
			t.Fatalf("peer%d evicted by negative entries", i)
		}
	}
}

// TestQueryLimiterBackground: background queries stop at half the budget;
// the other half stays for the queries clients wait on.
func TestQueryLimiterBackground(t *testing.T) {
	l := newQueryLimiter(10)
	now := time.Unix(1000, 0)
	bg := 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.allowBackground(fmt.Sprintf("bg%d.", i), now); ok {
			bg++
		}
	}
	fg := 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.allow(fmt.Sprintf("fg%d.", i), now); ok {
			fg++
		}
	}
	if bg != 5 || fg != 5 {
		t.Fatalf("background %d, foreground %d of a burst of 10: want 5 and 5", bg, fg)
	}
}
