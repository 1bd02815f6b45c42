package mdnsfallback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater/updatertest"

	"github.com/miekg/dns"
)

// mdnsListing is GET /mdnsfallback's instance object as a client reads it.
type mdnsListing struct {
	Generation uint64
	Count      int `json:"records_count"`
	Records    []struct {
		Domain, ID, IP, Owner string
		TTL                   uint32
		Check                 string
		CheckState            string `json:"check_state"`
	}
	Withheld []struct {
		ID, Container, Domain, Check string
		CheckState                   string `json:"check_state"`
	}
	Cache []struct {
		Name, Type string
		Answers    []struct {
			Data         string
			TTLRemaining uint32 `json:"ttl_remaining"`
		}
	}
	Negative []struct {
		Name, Type        string
		NegativeRemaining float64 `json:"negative_remaining"`
	}
}

func listOf(t *testing.T, p *MDNSFallback, q url.Values) mdnsListing {
	t.Helper()
	var b bytes.Buffer
	if err := p.List(&b, q); err != nil {
		t.Fatal(err)
	}
	var l mdnsListing
	if err := json.Unmarshal(b.Bytes(), &l); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	return l
}

// TestList lists local records of the API and of the updater (with the
// state of their container's check), a container withheld by its failing
// check, the cache and the negative cache, and checks the records against
// ServeDNS; a change lists with a higher generation; ?name= keeps one
// name; any other query is refused.
func TestList(t *testing.T) {
	p := newMDNSFallback(config{zones: []string{"weave.local."}, ttl: 30, cacheSize: 100, negativeTTL: defaultNegativeTTL, maxRecords: 100})
	p.Next = test.NextHandler(dns.RcodeRefused, nil)
	for _, r := range []records.Record{
		{ID: "c1", IP: netip.MustParseAddr("10.32.0.1"), Domain: "web.weave.local"},
		{ID: "c2", IP: netip.MustParseAddr("10.32.0.2"), Domain: "WEB.weave.local.", TTL: 5},
		{ID: "c3", IP: netip.MustParseAddr("fd00::3"), Domain: "v6.weave.local"},
	} {
		if _, _, err := p.db.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	// The updater's containers: ctr1's check passes (a listener is up),
	// ctr2's fails (nothing listens on its port).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := strconv.Itoa(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	eng := updatertest.New()
	c1 := updatertest.Ctr("ctr1", "db", "weave.local", "127.0.0.1")
	c1.Check = "tcp:" + port
	c2 := updatertest.Ctr("ctr2", "api", "weave.local", "127.0.0.2")
	c2.Check = "http:" + closedPort + "/healthz"
	eng.Run(c1)
	eng.Run(c2)
	u := updater.New(updater.Config{CheckInterval: time.Hour, CheckTimeout: time.Second}, p.db, p.cfg.zones, eng, nil)
	u.Start()
	defer u.Stop()
	p.upd.Store(u)
	waitFor(t, "both checks done", func() bool {
		st := u.CheckStates()
		return st["ctr1"].State == "pass" && st["ctr2"].State == "fail" && hasName(p.db, "db.weave.local.", "127.0.0.1")
	})
	now := time.Now()
	p.lan.Answers().Add("far.weave.local.", netip.MustParseAddr("10.40.0.1"), 120, false, now)
	p.lan.Answers().Add("far.weave.local.", netip.MustParseAddr("fd00::40"), 60, false, now)
	p.lan.Negatives().SetNegative("nobody.weave.local.", false, now.Add(5*time.Second), now)

	l := listOf(t, p, nil)
	var got []string
	for _, r := range l.Records {
		got = append(got, r.Domain+" "+r.ID+" "+r.IP+" "+r.Owner+" "+r.Check+" "+r.CheckState)
		if answered := serveA(t, p, r.Domain, r.IP); !answered {
			t.Errorf("%s does not answer its listed address %s", r.Domain, r.IP)
		}
	}
	want := []string{"db.weave.local. ctr1 127.0.0.1 docker tcp:" + port + " pass", "v6.weave.local. c3 fd00::3   ",
		"web.weave.local. c1 10.32.0.1   ", "web.weave.local. c2 10.32.0.2   "}
	if !slices.Equal(got, want) || l.Count != 4 || l.Generation == 0 {
		t.Fatalf("records (generation %d, count %d):\n%q\nwant\n%q", l.Generation, l.Count, got, want)
	}
	if len(l.Withheld) != 1 || l.Withheld[0].ID != "ctr2" || l.Withheld[0].CheckState != "fail" || l.Withheld[0].Domain != "api.weave.local." ||
		l.Withheld[0].Check != "http:"+closedPort+"/healthz" {
		t.Fatalf("withheld %+v", l.Withheld)
	}
	if len(l.Cache) != 2 || l.Cache[0].Name != "far.weave.local." || len(l.Cache[0].Answers) != 1 {
		t.Fatalf("cache %+v", l.Cache)
	}
	for _, c := range l.Cache {
		ttl := map[string]uint32{"A": 120, "AAAA": 60}[c.Type]
		if a := c.Answers[0]; a.TTLRemaining > ttl || a.TTLRemaining < ttl-5 {
			t.Fatalf("cache %s %s: remaining TTL %d of %d", c.Name, c.Type, a.TTLRemaining, ttl)
		}
	}
	if len(l.Negative) != 1 || l.Negative[0].Name != "nobody.weave.local." || l.Negative[0].NegativeRemaining > 5 || l.Negative[0].NegativeRemaining < 3 {
		t.Fatalf("negative %+v", l.Negative)
	}

	put := func(r records.Record) {
		if _, _, err := p.db.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	put(records.Record{ID: "c4", IP: netip.MustParseAddr("10.32.0.5"), Domain: "web.weave.local"})
	l2 := listOf(t, p, url.Values{"name": {"Web.Weave.Local"}})
	if l2.Generation <= l.Generation || len(l2.Records) != 3 || len(l2.Cache) != 0 || len(l2.Withheld) != 0 {
		t.Fatalf("after a put, ?name=: generation %d (was %d), %+v", l2.Generation, l.Generation, l2)
	}
	var bad *inspect.BadRequest
	if err := p.List(&bytes.Buffer{}, url.Values{"id": {"c1"}}); !errors.As(err, &bad) {
		t.Fatalf("?id=: %v", err)
	}
}

// serveA reports whether name's A or AAAA answer from ServeDNS holds ip.
func serveA(t *testing.T, p *MDNSFallback, name, ip string) bool {
	t.Helper()
	qtype := dns.TypeA
	if netip.MustParseAddr(ip).Is6() {
		qtype = dns.TypeAAAA
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := p.ServeDNS(context.Background(), rec, m); err != nil || rec.Msg == nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, rr := range rec.Msg.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			if rr.A.String() == ip {
				return true
			}
		case *dns.AAAA:
			if rr.AAAA.String() == ip {
				return true
			}
		}
	}
	return false
}

// BenchmarkList lists 100,000 local records (max_records' default) and a
// full cache of 4,096 entries: the records are copied (not their strings)
// under the database's lock, sorted, and streamed; db-heap-B is the live
// heap the database holds.
func BenchmarkList(b *testing.B) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	p := newMDNSFallback(config{zones: []string{"weave.local."}, ttl: 30, cacheSize: defaultCache, negativeTTL: defaultNegativeTTL, maxRecords: defaultMaxRecords})
	recs := make([]records.Record, defaultMaxRecords)
	for i := range recs {
		recs[i] = records.Record{ID: fmt.Sprintf("ctr%d", i), IP: netip.AddrFrom4([4]byte{10, 32, byte(i >> 8), byte(i)}), Domain: fmt.Sprintf("svc-%d.weave.local.", i/2)}
	}
	if _, skipped := p.db.Replace(recs); skipped != 0 {
		b.Fatalf("%d skipped", skipped)
	}
	recs = nil
	runtime.GC()
	runtime.ReadMemStats(&m1)
	now := time.Now()
	for i := range defaultCache {
		p.lan.Answers().Add(fmt.Sprintf("far-%d.weave.local.", i), netip.AddrFrom4([4]byte{10, 40, byte(i >> 8), byte(i)}), 120, false, now)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.List(io.Discard, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc), "db-heap-B") // what the listing's copy compares with
}
