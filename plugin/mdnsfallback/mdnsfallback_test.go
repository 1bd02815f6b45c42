package mdnsfallback

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"

	"github.com/miekg/dns"
)

// newTestPlugin returns a plugin with the default config (no API listener,
// no interfaces) changed by mod, and a next handler that answers REFUSED.
func newTestPlugin(mod func(*config)) *MDNSFallback {
	cfg := config{
		zones:       []string{"weave.local."},
		timeout:     defaultTimeout,
		ttl:         30,
		cacheSize:   100,
		negativeTTL: defaultNegativeTTL,
		maxRecords:  1000,
		reverse:     []netip.Prefix{netip.MustParsePrefix("10.32.0.0/12")},
	}
	if mod != nil {
		mod(&cfg)
	}
	p := newMDNSFallback(cfg)
	p.Next = test.NextHandler(dns.RcodeRefused, nil)
	return p
}

func put(t testing.TB, p *MDNSFallback, id, addr, domain string, ttl uint32) {
	t.Helper()
	if _, _, err := p.db.Put(records.Record{ID: id, IP: netip.MustParseAddr(addr), Domain: domain, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
}

const soaLine = "weave.local. 5 IN SOA ns.dns.weave.local. hostmaster.ns.dns.weave.local. 1 7200 1800 86400 5"

func TestServeDNS(t *testing.T) {
	p := newTestPlugin(nil)
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	put(t, p, "c2", "10.32.0.2", "web.weave.local", 10)
	put(t, p, "c3", "fd00::3", "v6.weave.local", 0)
	now := time.Now()
	p.lan.Answers().Add("far.weave.local.", netip.MustParseAddr("10.40.0.1"), 120, true, now)
	p.lan.Answers().SetNegative("gone.weave.local.", false, now.Add(time.Minute), now)

	cases := []test.Case{
		{Qname: "web.weave.local.", Qtype: dns.TypeA, Answer: []dns.RR{
			test.A("web.weave.local. 10 IN A 10.32.0.2"), test.A("web.weave.local. 30 IN A 10.32.0.1")}},
		{Qname: "WeB.Weave.LOCAL.", Qtype: dns.TypeA, Answer: []dns.RR{
			test.A("WeB.Weave.LOCAL. 10 IN A 10.32.0.2"), test.A("WeB.Weave.LOCAL. 30 IN A 10.32.0.1")}},
		{Qname: "web.weave.local.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "web.weave.local.", Qtype: dns.TypeMX, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "v6.weave.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("v6.weave.local. 30 IN AAAA fd00::3")}},
		{Qname: "v6.weave.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "far.weave.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("far.weave.local. 119 IN A 10.40.0.1")}},
		{Qname: "far.weave.local.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "gone.weave.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "nope.weave.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "weave.local.", Qtype: dns.TypeSOA, Answer: []dns.RR{test.SOA(soaLine)}},
		{Qname: "weave.local.", Qtype: dns.TypeNS, Ns: []dns.RR{test.SOA(soaLine)}},
		{Qname: "1.0.32.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR("1.0.32.10.in-addr.arpa. 30 IN PTR web.weave.local.")}},
		{Qname: "9.0.32.10.in-addr.arpa.", Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: []dns.RR{
			test.SOA("10.in-addr.arpa. 5 IN SOA ns.dns.10.in-addr.arpa. hostmaster.ns.dns.10.in-addr.arpa. 1 7200 1800 86400 5")}},
		// not ours: next plugin (REFUSED from the test handler)
		{Qname: "1.0.168.192.in-addr.arpa.", Qtype: dns.TypePTR, Rcode: dns.RcodeRefused},
		{Qname: "example.org.", Qtype: dns.TypeA, Rcode: dns.RcodeRefused},
	}
	for _, tc := range cases {
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		code, err := p.ServeDNS(context.Background(), rec, tc.Msg())
		if err != nil {
			t.Errorf("%s %d: %v", tc.Qname, tc.Qtype, err)
			continue
		}
		if tc.Rcode == dns.RcodeRefused {
			if code != dns.RcodeRefused {
				t.Errorf("%s: want the next plugin, got rcode %d", tc.Qname, code)
			}
			continue
		}
		if tc.Qname == "far.weave.local." && tc.Qtype == dns.TypeA && rec.Msg != nil && len(rec.Msg.Answer) == 1 {
			rec.Msg.Answer[0].Header().Ttl = 119 // the clock moved on
		}
		if err := test.SortAndCheck(rec.Msg, tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
		if !rec.Msg.Authoritative {
			t.Errorf("%s: not authoritative", tc.Qname)
		}
	}
}

// TestServeDNSRootZone: in zone "." the SOA names are "ns.dns." and
// "hostmaster.ns.dns.", and NXDOMAIN and NODATA answers pack.
func TestServeDNSRootZone(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.zones = []string{"."} })
	put(t, p, "c1", "10.32.0.1", "web.", 0)
	const root = ". 5 IN SOA ns.dns. hostmaster.ns.dns. 1 7200 1800 86400 5"
	for _, tc := range []test.Case{
		{Qname: "nope.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(root)}},
		{Qname: "web.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(root)}},
		{Qname: ".", Qtype: dns.TypeSOA, Answer: []dns.RR{test.SOA(root)}},
	} {
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := p.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
			t.Fatalf("%s: %v", tc.Qname, err)
		}
		if err := test.SortAndCheck(rec.Msg, tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
		if _, err := rec.Msg.Pack(); err != nil {
			t.Errorf("%s: reply does not pack: %v", tc.Qname, err)
		}
		for _, rr := range append(rec.Msg.Answer, rec.Msg.Ns...) {
			if s, ok := rr.(*dns.SOA); ok && (s.Ns != "ns.dns." || s.Mbox != "hostmaster.ns.dns.") {
				t.Errorf("%s: SOA names %s %s", tc.Qname, s.Ns, s.Mbox)
			}
		}
	}
}

func TestServeDNSFallthrough(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.fall = fall.Root })
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	for _, q := range []string{"nope.weave.local.", "9.0.32.10.in-addr.arpa."} {
		qt := dns.TypeA
		if q[0] == '9' {
			qt = dns.TypePTR
		}
		m := new(dns.Msg)
		m.SetQuestion(q, qt)
		code, _ := p.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
		if code != dns.RcodeRefused {
			t.Errorf("%s: fallthrough did not reach the next plugin (rcode %d)", q, code)
		}
	}
}

// TestServeDNSMDNSQuery drives the fallback path with a responder that has
// no socket: the first request starts the query, concurrent ones share it,
// an answer heard wakes them all; with no answer the name is negative-cached.
func TestServeDNSMDNSQuery(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.timeout = 2 * time.Second })
	r := testResponder(p, nil)

	results := make(chan *dns.Msg, 5)
	for i := 0; i < 5; i++ {
		go func() {
			m := new(dns.Msg)
			m.SetQuestion("peer.weave.local.", dns.TypeA)
			rec := dnstest.NewRecorder(&test.ResponseWriter{})
			p.ServeDNS(context.Background(), rec, m)
			results <- rec.Msg
		}()
	}
	deadline := time.Now().Add(time.Second)
	for queriesSent(p) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the others join
	ans := new(dns.Msg)
	ans.Response = true
	ans.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "peer.weave.local.", Rrtype: dns.TypeA, Class: dns.ClassINET | cacheFlushBit, Ttl: 120}, A: netip.MustParseAddr("10.250.0.2").AsSlice()}}
	hear(t, r, ans, netip.MustParseAddrPort("10.250.0.2:5353"))
	for i := 0; i < 5; i++ {
		m := <-results
		if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.250.0.2" {
			t.Fatalf("answer %d: %v", i, m)
		}
	}
	if n := queriesSent(p); n != 1 {
		t.Fatalf("%d mDNS queries sent for 5 concurrent requests, want 1", n)
	}
	if p.stats.results[resMDNS].Load() != 5 {
		t.Fatalf("mdns results: %d", p.stats.results[resMDNS].Load())
	}

	// No answer: NXDOMAIN after the timeout, then negative-cached.
	p.lan.SetTimeout(30 * time.Millisecond)
	m := new(dns.Msg)
	m.SetQuestion("silent.weave.local.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	start := time.Now()
	p.ServeDNS(context.Background(), rec, m)
	if rec.Msg.Rcode != dns.RcodeNameError || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("silent name: %v after %v", rec.Msg, time.Since(start))
	}
	rec = dnstest.NewRecorder(&test.ResponseWriter{})
	p.ServeDNS(context.Background(), rec, m)
	if rec.Msg.Rcode != dns.RcodeNameError || p.stats.results[resNegative].Load() != 1 || queriesSent(p) != 2 {
		t.Fatalf("negative cache: %v negative=%d queries=%d", rec.Msg, p.stats.results[resNegative].Load(), queriesSent(p))
	}

	// Reverse names outside the reverse networks never wait on mDNS, even
	// when a zone holds them.
	p.cfg.zones = append(p.cfg.zones, "in-addr.arpa.")
	m = new(dns.Msg)
	m.SetQuestion("4.3.2.1.in-addr.arpa.", dns.TypePTR)
	start = time.Now()
	code, _ := p.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	if code != dns.RcodeRefused || time.Since(start) > 10*time.Millisecond || queriesSent(p) != 2 {
		t.Fatalf("reverse query waited or queried: rcode %d after %v", code, time.Since(start))
	}
}

// TestServeDNSSharedName: a name held by several hosts answers every
// host's addresses. A query collects the answers of the collection window
// (the second host answers 60 ms after the first); a name with a local
// record answers the local addresses and the ones heard from other hosts;
// an AAAA question for a name heard with A only asks the network, and
// answers NODATA when nobody holds an AAAA.
func TestServeDNSSharedName(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.timeout = time.Second })
	r := testResponder(p, nil)
	heard := func(name, addr, from string) {
		ans := answerMsg(aRR(name, addr, 120, false))
		hear(t, r, ans, netip.MustParseAddrPort(from+":5353"))
	}
	serve := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		p.ServeDNS(context.Background(), rec, m)
		return rec.Msg
	}
	go func() {
		for queriesSent(p) == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
		heard("shared.weave.local.", "10.250.0.2", "10.250.0.2")
		time.Sleep(10 * time.Millisecond)
		heard("shared.weave.local.", "10.250.0.3", "10.250.0.3")
	}()
	// QM (Avahi shares the port): the second host answers 10 ms after the
	// first, inside the collection window (20 ms after the first answer:
	// the one-shot query beside the QM one is answered at once).
	r.SetShared(true)
	start := time.Now()
	m := serve("shared.weave.local.", dns.TypeA)
	if took := time.Since(start); len(m.Answer) != 2 || took > 900*time.Millisecond {
		t.Fatalf("shared name after %v: %v", took, m)
	}
	r.SetShared(false)

	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	heard("web.weave.local.", "10.250.0.4", "10.250.0.4")
	seen := map[string]bool{}
	for range 50 {
		m = serve("web.weave.local.", dns.TypeA)
		if len(m.Answer) != 2 {
			t.Fatalf("local name held on another host too: %v", m)
		}
		seen[m.Answer[0].(*dns.A).A.String()] = true
	}
	if len(seen) != 2 {
		t.Fatalf("answers not shuffled: first address always %v", seen)
	}
	// Another local record for the name keeps the other host's address.
	put(t, p, "c2", "10.32.0.9", "web.weave.local", 0)
	if m = serve("web.weave.local.", dns.TypeA); len(m.Answer) != 3 {
		t.Fatalf("after a second local record: %v", m)
	}

	// Heard from an announcement (A only): AAAA asks the network.
	heard("ann.weave.local.", "10.250.0.5", "10.250.0.5")
	sent := queriesSent(p)
	p.lan.SetTimeout(30 * time.Millisecond)
	if m = serve("ann.weave.local.", dns.TypeAAAA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Fatalf("AAAA of an A-only name: %v", m)
	}
	if queriesSent(p) == sent {
		t.Fatal("AAAA of a name heard with A only answered NODATA without asking")
	}
}

func BenchmarkServeDNS(b *testing.B) {
	p := newTestPlugin(func(c *config) { c.cacheSize = defaultCache })
	for i := 0; i < 1000; i++ {
		put(b, p, "c", netip.AddrFrom4([4]byte{10, 32, byte(i >> 8), byte(i)}).String(), "web"+itoa3(i)+".weave.local", 0)
	}
	p.lan.Answers().Add("far.weave.local.", netip.MustParseAddr("10.40.0.1"), 3600, true, time.Now())
	for _, bc := range []struct{ name, qname string }{
		{"local", "web500.weave.local."},
		{"cache", "far.weave.local."},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := new(dns.Msg)
			m.SetQuestion(bc.qname, dns.TypeA)
			w := &test.ResponseWriter{}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.ServeDNS(ctx, w, m)
			}
		})
	}
	// Cache hits from all cores over 64 names: the case a sharded cache
	// was for (the one mutex is contended here; at server level it does not
	// show, see docs/measurements/mdnsfallback.md).
	var msgs [64]*dns.Msg
	for i := range msgs {
		name := "far" + itoa3(i) + ".weave.local."
		p.lan.Answers().Add(name, netip.MustParseAddr("10.40.0.1"), 3600, true, time.Now())
		msgs[i] = new(dns.Msg)
		msgs[i].SetQuestion(name, dns.TypeA)
	}
	b.Run("cache-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := &test.ResponseWriter{}
			ctx := context.Background()
			for i := 0; pb.Next(); i++ {
				p.ServeDNS(ctx, w, msgs[i%len(msgs)])
			}
		})
	})
}

func itoa3(i int) string {
	return string([]byte{byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)})
}
