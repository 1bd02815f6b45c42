package endpointsvc

import (
	"context"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// newTestPlugin serves testdata/state.json in svc.orch. with TTL 30.
func newTestPlugin(t testing.TB, includeUnhealthy bool, fallZones ...string) *Endpointsvc {
	t.Helper()
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	orchOf(e).includeUnhealthy = includeUnhealthy
	if fallZones != nil {
		e.Fall = fall.F{}
		e.Fall.SetZonesFromArgs(fallZones)
	}
	e.apply(context.Background(), "test", loadState(t, stateFile), false)
	e.resolveHosts(context.Background()) // apply leaves hostnames to the refresher
	return e
}

const soaRR = "svc.orch. 30 IN SOA ns.dns.svc.orch. hostmaster.ns.dns.svc.orch. 0 7200 1800 86400 30"

var serveCases = []test.Case{
	// two healthy tasks on one node: one A, SRV with both host ports
	{Qname: "atlas.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("atlas.svc.orch. 30 IN A 192.0.2.10")}},
	{Qname: "atlas.default.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("atlas.default.svc.orch. 30 IN A 192.0.2.10")}},
	{Qname: "AtLaS.Svc.Orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("AtLaS.Svc.Orch. 30 IN A 192.0.2.10")}},
	{Qname: "atlas.svc.orch.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "atlas.svc.orch.", Qtype: dns.TypeMX, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "_http._tcp.atlas.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{
			test.SRV("_http._tcp.atlas.svc.orch. 30 IN SRV 0 10 31081 node-1.node.svc.orch."),
			test.SRV("_http._tcp.atlas.svc.orch. 30 IN SRV 0 10 31082 node-1.node.svc.orch."),
		},
		Extra: []dns.RR{test.A("node-1.node.svc.orch. 30 IN A 192.0.2.10")}},
	{Qname: "_http._tcp.atlas.default.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{
			test.SRV("_http._tcp.atlas.default.svc.orch. 30 IN SRV 0 10 31081 node-1.node.svc.orch."),
			test.SRV("_http._tcp.atlas.default.svc.orch. 30 IN SRV 0 10 31082 node-1.node.svc.orch."),
		},
		Extra: []dns.RR{test.A("node-1.node.svc.orch. 30 IN A 192.0.2.10")}},
	// a task without its own host port uses the service's published port
	{Qname: "_admin._tcp.atlas.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_admin._tcp.atlas.svc.orch. 30 IN SRV 0 10 30900 node-1.node.svc.orch.")},
		Extra:  []dns.RR{test.A("node-1.node.svc.orch. 30 IN A 192.0.2.10")}},
	// plain name: every port
	{Qname: "atlas.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{
			test.SRV("atlas.svc.orch. 30 IN SRV 0 10 30900 node-1.node.svc.orch."),
			test.SRV("atlas.svc.orch. 30 IN SRV 0 10 31081 node-1.node.svc.orch."),
			test.SRV("atlas.svc.orch. 30 IN SRV 0 10 31082 node-1.node.svc.orch."),
		},
		Extra: []dns.RR{test.A("node-1.node.svc.orch. 30 IN A 192.0.2.10")}},
	{Qname: "_http._tcp.atlas.svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "_http._udp.atlas.svc.orch.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "_nope._tcp.atlas.svc.orch.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
	// namespaces
	{Qname: "beacon.prod.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("beacon.prod.svc.orch. 30 IN A 192.0.2.11")}},
	{Qname: "beacon.svc.orch.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "_grpc._tcp.beacon.prod.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_grpc._tcp.beacon.prod.svc.orch. 30 IN SRV 0 10 32000 node-2.node.svc.orch.")},
		Extra:  []dns.RR{test.A("node-2.node.svc.orch. 30 IN A 192.0.2.11")}},
	// known service without endpoints: NODATA for every type
	{Qname: "idle.svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "_http._tcp.idle.svc.orch.", Qtype: dns.TypeSRV, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "paused.svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaRR)}},
	// IPv6 advertise address → AAAA only
	{Qname: "v6only.svc.orch.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("v6only.svc.orch. 30 IN AAAA 2001:db8::3")}},
	{Qname: "v6only.svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "v6only.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("v6only.svc.orch. 30 IN SRV 0 10 31500 node-3.node.svc.orch.")},
		Extra:  []dns.RR{test.AAAA("node-3.node.svc.orch. 30 IN AAAA 2001:db8::3")}},
	// hostname advertise address → its resolved addresses
	{Qname: "hosty.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("hosty.svc.orch. 30 IN A 198.51.100.4")}},
	{Qname: "hosty.svc.orch.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("hosty.svc.orch. 30 IN AAAA 2001:db8::4")}},
	{Qname: "_http._tcp.hosty.svc.orch.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_http._tcp.hosty.svc.orch. 30 IN SRV 0 10 31600 node-4.node.svc.orch.")},
		Extra: []dns.RR{test.A("node-4.node.svc.orch. 30 IN A 198.51.100.4"),
			test.AAAA("node-4.node.svc.orch. 30 IN AAAA 2001:db8::4")}},
	// nodes
	{Qname: "node-1.node.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("node-1.node.svc.orch. 30 IN A 192.0.2.10")}},
	{Qname: "NODE-3.node.svc.orch.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("NODE-3.node.svc.orch. 30 IN AAAA 2001:db8::3")}},
	{Qname: "node-3.node.svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "node-9.node.svc.orch.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
	// apex and other shapes
	{Qname: "svc.orch.", Qtype: dns.TypeSOA, Answer: []dns.RR{test.SOA(soaRR)}},
	{Qname: "svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "nope.svc.orch.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "a.b.c.svc.orch.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
	{Qname: "_http.atlas.svc.orch.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soaRR)}},
}

func TestServeDNS(t *testing.T) {
	e := newTestPlugin(t, false)
	for _, tc := range serveCases {
		t.Run(tc.Qname+"/"+dns.TypeToString[tc.Qtype], func(t *testing.T) {
			checkCase(t, e, tc)
		})
	}
}

func TestServeDNSIncludeUnhealthy(t *testing.T) {
	e := newTestPlugin(t, true)
	for _, tc := range []test.Case{
		{Qname: "atlas.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{
			test.A("atlas.svc.orch. 30 IN A 192.0.2.10"), test.A("atlas.svc.orch. 30 IN A 192.0.2.11")}},
		{Qname: "_http._tcp.atlas.svc.orch.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{
				test.SRV("_http._tcp.atlas.svc.orch. 30 IN SRV 0 10 31081 node-1.node.svc.orch."),
				test.SRV("_http._tcp.atlas.svc.orch. 30 IN SRV 0 10 31082 node-1.node.svc.orch."),
				test.SRV("_http._tcp.atlas.svc.orch. 30 IN SRV 0 10 31084 node-2.node.svc.orch."),
			},
			Extra: []dns.RR{test.A("node-1.node.svc.orch. 30 IN A 192.0.2.10"), test.A("node-2.node.svc.orch. 30 IN A 192.0.2.11")}},
	} {
		checkCase(t, e, tc)
	}
}

func TestServeDNSFallthrough(t *testing.T) {
	e := newTestPlugin(t, false, "svc.orch.")
	for _, q := range []struct {
		name string
		next bool
	}{
		{"nope.svc.orch.", true},           // unknown: next plugin
		{"atlas.svc.orch.", false},         // known: ours
		{"idle.svc.orch.", false},          // known, no endpoints: NODATA, not fallthrough
		{"example.org.", true},             // not our zone
		{"_x._tcp.atlas.svc.orch.", true},  // unknown port
		{"a.b.c.d.e.svc.orch.", true},      // other shape
		{"node-1.node.svc.orch.", false},   // node
		{"node-9.node.svc.orch.", true},    // unknown node
		{"svc.orch.", false},               // apex
		{"atlas.default.svc.orch.", false}, // long form
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, dns.TypeA)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		code, _ := e.ServeDNS(context.Background(), rec, m)
		if got := code == dns.RcodeRefused; got != q.next {
			t.Errorf("%s: went to next plugin = %v, want %v (rcode %d)", q.name, got, q.next, code)
		}
	}
}

func TestServeDNSNotLoaded(t *testing.T) {
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	m := new(dns.Msg)
	m.SetQuestion("atlas.svc.orch.", dns.TypeA)
	code, _ := e.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	if code != dns.RcodeServerFailure {
		t.Fatalf("rcode %d before any state, want SERVFAIL", code)
	}
	if e.Ready() {
		t.Fatal("ready before any state")
	}
}

// TestServeDNSNotLoadedFallthrough: before the first state, a name the
// block's fallthrough covers goes to the next plugin (as the kubernetes
// plugin does before its first sync), so that a stanza in front of another
// plugin does not SERVFAIL its zone until it syncs; other names SERVFAIL.
func TestServeDNSNotLoadedFallthrough(t *testing.T) {
	e := dnsPlugin(30, &syncer{}, "cluster.local.", "in-addr.arpa.")
	e.Fall.SetZonesFromArgs([]string{"in-addr.arpa."})
	for _, q := range []struct {
		name string
		want int
	}{
		{"1.0.0.10.in-addr.arpa.", dns.RcodeRefused}, // the next plugin's
		{"web.shop.svc.cluster.local.", dns.RcodeServerFailure},
	} {
		code, _ := e.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), new(dns.Msg).SetQuestion(q.name, dns.TypePTR))
		if code != q.want {
			t.Errorf("%s before any state: rcode %d, want %d", q.name, code, q.want)
		}
	}
}

func TestServeDNSTwoZones(t *testing.T) {
	e := newTestPlugin(t, false)
	e.Zones = []string{"svc.orch.", "mesh.example."}
	e.finish(fakeLookup)
	e.apply(context.Background(), "test", loadState(t, stateFile), false)
	e.resolveHosts(context.Background()) // apply leaves hostnames to the refresher
	checkCase(t, e, test.Case{Qname: "_http._tcp.atlas.mesh.example.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{
			test.SRV("_http._tcp.atlas.mesh.example. 30 IN SRV 0 10 31081 node-1.node.mesh.example."),
			test.SRV("_http._tcp.atlas.mesh.example. 30 IN SRV 0 10 31082 node-1.node.mesh.example."),
		},
		Extra: []dns.RR{test.A("node-1.node.mesh.example. 30 IN A 192.0.2.10")}})
}

// TestCountTwoServers checks that queries alternating between two servers
// count under each server and allocate nothing once each server was seen.
func TestCountTwoServers(t *testing.T) {
	e := newTestPlugin(t, false)
	ctxA := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://127.0.0.1:7001"})
	ctxB := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://127.0.0.1:7002"})
	e.count(ctxA, 0, resultAnswer)
	e.count(ctxB, 0, resultAnswer)
	if n := testing.AllocsPerRun(100, func() {
		e.count(ctxA, 0, resultAnswer)
		e.count(ctxB, 0, resultAnswer)
	}); n != 0 {
		t.Errorf("count allocates %v times per pair of queries, want 0", n)
	}
	for _, srv := range []string{"dns://127.0.0.1:7001", "dns://127.0.0.1:7002"} {
		v, ok := e.counters.Load(srv)
		if !ok {
			t.Fatalf("no counters for server %q", srv)
		}
		if rc := v.(*serverCounters).zones[0].Load(); rc == nil || rc.server != srv || rc.zone != "svc.orch." {
			t.Errorf("counters of server %q: %+v", srv, rc)
		}
	}
}

// TestSOARootZone checks that zone "." gets an SOA that packs (it used to
// be "ns.dns..").
func TestSOARootZone(t *testing.T) {
	e := orchPlugin(30, &syncer{}, ".")
	e.apply(context.Background(), "test", loadState(t, stateFile), false)
	for _, qname := range []string{".", "no-such-name."} {
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := e.ServeDNS(context.Background(), rec, new(dns.Msg).SetQuestion(qname, dns.TypeSOA)); err != nil {
			t.Fatal(err)
		}
		if rec.Msg == nil {
			t.Fatalf("%s: no reply", qname)
		}
		if _, err := rec.Msg.Pack(); err != nil {
			t.Fatalf("%s: reply does not pack: %v\n%s", qname, err, rec.Msg)
		}
		rrs := append(rec.Msg.Answer, rec.Msg.Ns...)
		if len(rrs) != 1 || rrs[0].(*dns.SOA).Ns != "ns.dns." || rrs[0].Header().Name != "." {
			t.Errorf("%s: SOA %v, want ns.dns. for zone .", qname, rrs)
		}
	}
}
