package virtualconsul

import (
	"context"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/hosts" // for BenchmarkServeDNSHosts
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// handler returns a plugin over a small table, with test.NextHandler
// (answering REFUSED) standing for the next plugin.
func handler(t testing.TB, authoritative bool) *VirtualConsul {
	t.Helper()
	tbl, err := table.Build([]table.Entry{
		{Name: webKey, Addresses: []string{"240.0.0.1"}},
		{Name: "api.virtual.team.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.2"}},
		{Name: "db.virtual.default.ns.part.ap.dc2.dc.consul", Addresses: []string{"240.0.0.3"}},
		{Name: "v6.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"fd00::6"}},
		{Name: "amb.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.4"}},
		{Name: "amb.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.5"}},
		{Name: "http.pay.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.8"}},
		{Name: "pay.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.7"}},
		{Name: "dual.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"fd00::9", "240.0.0.9"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &VirtualConsul{
		Next:  test.NextHandler(dns.RcodeRefused, nil),
		zones: []soa.Names{soa.For("corp.example."), soa.For("consul.")}, ns: "default", ap: "default", dc: "dc1",
		ttl: 5, authoritative: authoritative, metricZone: "consul.",
	}
	v.table.Store(tbl)
	return v
}

const passed = dns.RcodeRefused // what the next plugin answers in these tests

func wantSOA(zone string) dns.RR {
	return test.SOA(zone + " 5 IN SOA ns.dns." + zone + " hostmaster.ns.dns." + zone + " 1 7200 1800 86400 5")
}

func TestServeDNS(t *testing.T) {
	cases := []test.Case{
		// hits, with the name echoed as asked
		{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.consul. 5 IN A 240.0.0.1")}},
		{Qname: "WeB.ViRtUaL.CoNsUl.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("WeB.ViRtUaL.CoNsUl. 5 IN A 240.0.0.1")}},
		{Qname: "web.virtual.default.ns.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.default.ns.consul. 5 IN A 240.0.0.1")}},
		{Qname: "web.virtual.default.ap.dc1.dc.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.default.ap.dc1.dc.consul. 5 IN A 240.0.0.1")}},
		{Qname: webKey + ".", Qtype: dns.TypeA, Answer: []dns.RR{test.A(webKey + ". 5 IN A 240.0.0.1")}},
		{Qname: "api.virtual.team.ns.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("api.virtual.team.ns.consul. 5 IN A 240.0.0.2")}},
		{Qname: "db.virtual.part.ap.dc2.dc.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("db.virtual.part.ap.dc2.dc.consul. 5 IN A 240.0.0.3")}},
		{Qname: "web.virtual.corp.example.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.corp.example. 5 IN A 240.0.0.1")}},
		{Qname: "v6.virtual.consul.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("v6.virtual.consul. 5 IN AAAA fd00::6")}},
		// one IPv4 and one IPv6 VIP: one service, A and AAAA
		{Qname: "dual.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("dual.virtual.consul. 5 IN A 240.0.0.9")}},
		{Qname: "dual.virtual.consul.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("dual.virtual.consul. 5 IN AAAA fd00::9")}},
		{Qname: "web.virtual.consul.", Qtype: dns.TypeANY, Answer: []dns.RR{test.A("web.virtual.consul. 5 IN A 240.0.0.1")}},
		// NODATA: the name exists, not for this type
		{Qname: "web.virtual.consul.", Qtype: dns.TypeAAAA, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "web.virtual.consul.", Qtype: dns.TypeTXT, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "v6.virtual.consul.", Qtype: dns.TypeA, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "web.virtual.corp.example.", Qtype: dns.TypeAAAA, Ns: []dns.RR{wantSOA("corp.example.")}},
		// passed on
		{Qname: "amb.virtual.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "nope.virtual.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.virtual.other.ns.consul.", Qtype: dns.TypeA, Rcode: passed},
		// another datacenter the table holds nothing of: the servers'
		{Qname: "web.virtual.dc9.dc.consul.", Qtype: dns.TypeA, Rcode: passed},
		// a named port answers its service's VIP (as Consul's DNS does),
		// or its own entry when the table has one
		{Qname: "grpc.pay.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("grpc.pay.virtual.consul. 5 IN A 240.0.0.7")}},
		{Qname: "http.pay.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("http.pay.virtual.consul. 5 IN A 240.0.0.8")}},
		{Qname: "HTTP.web.virtual.dc1.dc.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("HTTP.web.virtual.dc1.dc.consul. 5 IN A 240.0.0.1")}},
		{Qname: "http.web.virtual.consul.", Qtype: dns.TypeAAAA, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "http.nope.virtual.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.service.virtual.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.service.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.virtual.p1.peer.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.virtual.dc1.dc.default.ns.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "a.b.web.virtual.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "consul.", Qtype: dns.TypeSOA, Rcode: passed},
		{Qname: "web.virtual.example.org.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: `we\.b.virtual.consul.`, Qtype: dns.TypeA, Rcode: passed},
	}
	runCases(t, handler(t, false), cases)
}

func TestServeDNSAuthoritative(t *testing.T) {
	runCases(t, handler(t, true), []test.Case{
		// NODATA, as Consul's DNS answers a virtual name without a VIP
		{Qname: "nope.virtual.consul.", Qtype: dns.TypeA, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "nope.virtual.corp.example.", Qtype: dns.TypeAAAA, Ns: []dns.RR{wantSOA("corp.example.")}},
		{Qname: "http.nope.virtual.consul.", Qtype: dns.TypeA, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "nope.virtual.dc2.dc.consul.", Qtype: dns.TypeA, Ns: []dns.RR{wantSOA("consul.")}},
		// still passed on: another datacenter, ambiguous, other forms
		{Qname: "nope.virtual.dc9.dc.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "amb.virtual.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.service.consul.", Qtype: dns.TypeA, Rcode: passed},
		{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.consul. 5 IN A 240.0.0.1")}},
	})
}

// TestServeDNSTableDatacenter: short names expand with the datacenter of
// the source's agent that the table carries, unless the Corefile names one.
func TestServeDNSTableDatacenter(t *testing.T) {
	b := table.NewBuilder(1)
	b.SetDatacenter("dc2")
	if err := b.Add(table.Entry{Name: "web.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"240.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	v := handler(t, true)
	v.table.Store(b.Table())
	runCases(t, v, []test.Case{
		{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.consul. 5 IN A 240.0.0.1")}},
		{Qname: "web.virtual.dc2.dc.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.dc2.dc.consul. 5 IN A 240.0.0.1")}},
	})
	v.dcSet = true // datacenter dc1 in the Corefile
	runCases(t, v, []test.Case{
		{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Ns: []dns.RR{wantSOA("consul.")}},
	})
}

// TestServeDNSEntriesDatacenter: a table that names no datacenter (a
// file, an xDS listener) expands short names with the one its entries are
// all in; entries in two datacenters leave the Corefile's (default dc1).
func TestServeDNSEntriesDatacenter(t *testing.T) {
	one, err := table.Build([]table.Entry{
		{Name: "web.virtual.default.ns.default.ap.us-east-1.dc.consul", Addresses: []string{"240.0.0.1"}},
		{Name: "api.virtual.default.ns.default.ap.us-east-1.dc.consul", Addresses: []string{"240.0.0.2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if one.Datacenter() != "us-east-1" {
		t.Fatalf("table datacenter %q, want us-east-1", one.Datacenter())
	}
	v := handler(t, true)
	v.table.Store(one)
	runCases(t, v, []test.Case{
		{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.consul. 5 IN A 240.0.0.1")}},
	})
	two, err := table.Build([]table.Entry{
		{Name: "web.virtual.default.ns.default.ap.us-east-1.dc.consul", Addresses: []string{"240.0.0.1"}},
		{Name: "api.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	v.table.Store(two)
	runCases(t, v, []test.Case{
		{Qname: "api.virtual.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("api.virtual.consul. 5 IN A 240.0.0.2")}},
		{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Ns: []dns.RR{wantSOA("consul.")}},
		{Qname: "web.virtual.us-east-1.dc.consul.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.virtual.us-east-1.dc.consul. 5 IN A 240.0.0.1")}},
	})
}

func TestServeDNSNotReady(t *testing.T) {
	v := handler(t, true)
	v.table.Store(nil)
	runCases(t, v, []test.Case{{Qname: "web.virtual.consul.", Qtype: dns.TypeA, Rcode: passed}})
}

func TestServeDNSClass(t *testing.T) {
	v := handler(t, false)
	m := new(dns.Msg)
	m.SetQuestion("web.virtual.consul.", dns.TypeA)
	m.Question[0].Qclass = dns.ClassCHAOS
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if code, _ := v.ServeDNS(context.Background(), rec, m); code != passed {
		t.Fatalf("CHAOS query: rcode %d, want it passed on", code)
	}
}

func runCases(t *testing.T, v *VirtualConsul, cases []test.Case) {
	t.Helper()
	for _, tc := range cases {
		m := tc.Msg()
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		code, err := v.ServeDNS(context.Background(), rec, m)
		if err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
			continue
		}
		if tc.Rcode == passed {
			if code != passed || rec.Msg != nil {
				t.Errorf("%s %s: rcode %d, want it passed to the next plugin", tc.Qname, dns.TypeToString[tc.Qtype], code)
			}
			continue
		}
		if rec.Msg == nil {
			t.Errorf("%s %s: no reply (rcode %d)", tc.Qname, dns.TypeToString[tc.Qtype], code)
			continue
		}
		resp := rec.Msg
		if !resp.Authoritative {
			t.Errorf("%s %s: reply not authoritative", tc.Qname, dns.TypeToString[tc.Qtype])
		}
		// the SOA serial is the build time: compare the rest
		for _, rr := range resp.Ns {
			if s, ok := rr.(*dns.SOA); ok {
				s.Serial = 1
			}
		}
		if err := test.SortAndCheck(resp, tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
}

// TestServeDNSAllocs holds the query path to the reply's own allocations.
func TestServeDNSAllocs(t *testing.T) {
	v := handler(t, false)
	w := &test.ResponseWriter{}
	for name, tc := range map[string]struct {
		q     string
		qtype uint16
		max   float64
	}{
		"hit":         {"Web.Virtual.consul.", dns.TypeA, 1},    // the reply, in one piece
		"miss":        {"nope.virtual.consul.", dns.TypeA, 1},   // plugin.NextOrFailure's own pluginWriter
		"passthrough": {"web.service.consul.", dns.TypeA, 1},    // the same
		"nodata":      {"web.virtual.consul.", dns.TypeAAAA, 1}, // the same
	} {
		m := new(dns.Msg)
		m.SetQuestion(tc.q, tc.qtype)
		ctx := context.Background()
		got := testing.AllocsPerRun(200, func() { _, _ = v.ServeDNS(ctx, w, m) })
		if got > tc.max {
			t.Errorf("%s: %.0f allocations per query, want at most %.0f", name, got, tc.max)
		}
	}
}

func BenchmarkServeDNS(b *testing.B) {
	v := handler(b, false)
	w := &test.ResponseWriter{}
	ctx := context.Background()
	for _, bc := range []struct {
		name  string
		q     string
		qtype uint16
	}{
		{"hit", "web.virtual.consul.", dns.TypeA},
		{"hit-full-form", webKey + ".", dns.TypeA},
		{"miss", "nope.virtual.consul.", dns.TypeA},
		{"nodata", "web.virtual.consul.", dns.TypeAAAA},
	} {
		m := new(dns.Msg)
		m.SetQuestion(bc.q, bc.qtype)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = v.ServeDNS(ctx, w, m)
			}
		})
	}
}

// BenchmarkServeDNSHosts is the stock hosts plugin answering the same hit
// (an inline entry), for comparison with BenchmarkServeDNS/hit-full-form.
func BenchmarkServeDNSHosts(b *testing.B) {
	c := caddy.NewTestController("dns", "hosts /dev/null consul. {\n240.0.0.1 "+webKey+"\n}")
	setupHosts, err := caddy.DirectiveAction("dns", "hosts")
	if err != nil {
		b.Fatal(err)
	}
	if err := setupHosts(c); err != nil {
		b.Fatal(err)
	}
	cfg := dnsserver.GetConfig(c)
	h := cfg.Plugin[len(cfg.Plugin)-1](test.NextHandler(dns.RcodeRefused, nil))
	w := &test.ResponseWriter{}
	m := new(dns.Msg)
	m.SetQuestion(webKey+".", dns.TypeA)
	ctx := context.Background()
	if code, _ := h.ServeDNS(ctx, dnstest.NewRecorder(w), m); code != dns.RcodeSuccess {
		b.Fatalf("hosts answered rcode %d", code)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = h.ServeDNS(ctx, w, m)
	}
}

// FuzzServeDNS sends arbitrary questions through the handler: it must never
// panic, and whatever it answers itself is authoritative and echoes the
// question.
func FuzzServeDNS(f *testing.F) {
	for _, s := range []string{"web.virtual.consul.", "WeB.virtual.team.ns.consul.", "http.pay.virtual.consul.", "consul.", ".", `a\.b.virtual.consul.`, "x.service.virtual.corp.example."} {
		f.Add(s, uint16(dns.TypeA))
	}
	v := handler(f, true)
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		m := new(dns.Msg)
		m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		_, _ = v.ServeDNS(context.Background(), rec, m)
		if rec.Msg == nil {
			return
		}
		if !rec.Msg.Authoritative || len(rec.Msg.Question) != 1 || rec.Msg.Question[0] != m.Question[0] {
			t.Fatalf("reply to %q/%d: %v", name, qtype, rec.Msg)
		}
		for _, rr := range rec.Msg.Answer {
			if rr.Header().Name != name {
				t.Fatalf("answer %v not under the asked name %q", rr, name)
			}
		}
	})
}

// TestServeDNSAllocsServers alternates the queries of two servers (a block
// with bind A B): each server's counters are resolved once, so a hit stays
// one allocation and each server counts its own queries.
func TestServeDNSAllocsServers(t *testing.T) {
	v := handler(t, false)
	w := &test.ResponseWriter{}
	m := new(dns.Msg)
	m.SetQuestion("web.virtual.consul.", dns.TypeA)
	a := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://127.0.0.1:1053"})
	b := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://127.0.0.2:1053"})
	hits := func(server string) float64 {
		return metricValue(t, "coredns_virtualconsul_requests_total", map[string]string{"server": server, "result": resultHit})
	}
	a0, b0 := hits("dns://127.0.0.1:1053"), hits("dns://127.0.0.2:1053")
	got := testing.AllocsPerRun(200, func() {
		_, _ = v.ServeDNS(a, w, m)
		_, _ = v.ServeDNS(b, w, m)
	})
	if got > 2 {
		t.Errorf("%.0f allocations per pair of hits from two servers, want at most 2", got)
	}
	if da, db := hits("dns://127.0.0.1:1053")-a0, hits("dns://127.0.0.2:1053")-b0; da != db || da < 200 {
		t.Errorf("hits counted %v and %v, want the same (at least 200) per server", da, db)
	}
}

// metricValue reads a counter or gauge of the default registry by its labels
// (0 when absent).
func metricValue(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
