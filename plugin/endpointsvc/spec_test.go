package endpointsvc

import (
	"context"
	"fmt"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// newSpecPlugin serves testdata/spec-state.json with schema kubernetes in
// cluster.local, in-addr.arpa and ip6.arpa, TTL 5, pods insecure.
func newSpecPlugin(t testing.TB) *Endpointsvc {
	t.Helper()
	e := &Endpointsvc{Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}, spec: true, podsInsecure: true,
		ttl: 5, syncer: &syncer{}, Next: test.NextHandler(dns.RcodeRefused, nil)}
	e.finish(fakeLookup)
	e.upstream = nil // no server to chase outside names through
	e.apply(context.Background(), "test", loadState(t, "testdata/spec-state.json"), false)
	return e
}

const specSOA = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"

// The cases are the kubernetes plugin's answers (CoreDNS v1.15.0) for the
// same objects; the end-to-end test compares the two on a real API server.
var specCases = []test.Case{
	// ClusterIP: the cluster IP, not the endpoints; AAAA NODATA
	{Qname: "web.shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("web.shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	{Qname: "WEB.Shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("WEB.Shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	{Qname: "web.shop.svc.cluster.local.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "web.shop.svc.cluster.local.", Qtype: dns.TypeTXT, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "web.shop.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("web.shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	{Qname: "_http._tcp.web.shop.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_http._tcp.web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("web.shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	{Qname: "http.tcp.web.shop.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("http.tcp.web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("web.shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	{Qname: "_http._udp.web.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "_http.web.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// an endpoint name of a ClusterIP Service is the endpoint (ready only)
	{Qname: "10-244-1-5.web.shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("10-244-1-5.web.shop.svc.cluster.local. 5 IN A 10.244.1.5")}},
	{Qname: "10-244-1-6.web.shop.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// dual-stack: one SRV, weight 50 (two entries), both addresses as glue
	{Qname: "dual.shop.svc.cluster.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("dual.shop.svc.cluster.local. 5 IN AAAA fd00:96::21")}},
	{Qname: "_http._tcp.dual.shop.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_http._tcp.dual.shop.svc.cluster.local. 5 IN SRV 0 50 80 dual.shop.svc.cluster.local.")},
		Extra: []dns.RR{test.A("dual.shop.svc.cluster.local. 5 IN A 10.96.0.21"),
			test.AAAA("dual.shop.svc.cluster.local. 5 IN AAAA fd00:96::21")}},
	// 53/udp and 53/tcp are one SRV record (same target and port), weight 33
	{Qname: "multi.shop.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("multi.shop.svc.cluster.local. 5 IN SRV 0 33 53 multi.shop.svc.cluster.local."),
			test.SRV("multi.shop.svc.cluster.local. 5 IN SRV 0 33 80 multi.shop.svc.cluster.local.")},
		Extra: []dns.RR{test.A("multi.shop.svc.cluster.local. 5 IN A 10.96.0.22")}},
	// no ports: A works, SRV NODATA, port names NXDOMAIN
	{Qname: "noports.shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("noports.shop.svc.cluster.local. 5 IN A 10.96.0.23")}},
	{Qname: "noports.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "_x._tcp.noports.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// headless: ready endpoints, hostnames, SRV per endpoint with its port
	{Qname: "db.shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{
		test.A("db.shop.svc.cluster.local. 5 IN A 10.244.2.1"), test.A("db.shop.svc.cluster.local. 5 IN A 10.244.2.2")}},
	{Qname: "db-1.db.shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("db-1.db.shop.svc.cluster.local. 5 IN A 10.244.2.2")}},
	{Qname: "db-2.db.shop.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "10-244-2-1.db.shop.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "_pg._tcp.db.shop.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 50 5432 db-0.db.shop.svc.cluster.local."),
			test.SRV("_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 50 5432 db-1.db.shop.svc.cluster.local.")},
		Extra: []dns.RR{test.A("db-0.db.shop.svc.cluster.local. 5 IN A 10.244.2.1"), test.A("db-1.db.shop.svc.cluster.local. 5 IN A 10.244.2.2")}},
	// headless without ports nor hostnames; an IPv6 label ending in a dash gets a 0
	{Qname: "hl.shop.svc.cluster.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("hl.shop.svc.cluster.local. 5 IN AAAA fd00:10::")}},
	{Qname: "fd00-10--0.hl.shop.svc.cluster.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("fd00-10--0.hl.shop.svc.cluster.local. 5 IN AAAA fd00:10::")}},
	{Qname: "hl.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Ns: []dns.RR{test.SOA(specSOA)}},
	// headless without a ready endpoint: NXDOMAIN
	{Qname: "nobody.shop.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// ExternalName inside the zone: CNAME and the target's records; a
	// target without records: NODATA, but CNAME still answers; a loop: NODATA
	{Qname: "alias.shop.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{
		test.CNAME("alias.shop.svc.cluster.local. 5 IN CNAME web.shop.svc.cluster.local."), test.A("web.shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	{Qname: "alias.shop.svc.cluster.local.", Qtype: dns.TypeCNAME, Answer: []dns.RR{test.CNAME("alias.shop.svc.cluster.local. 5 IN CNAME web.shop.svc.cluster.local.")}},
	{Qname: "alias.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "dangling.shop.svc.cluster.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "loop.shop.svc.cluster.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "_x._tcp.alias.shop.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// a headless Service with an FQDN endpoint (a Knative Route): CNAME, chased
	{Qname: "hello.default.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{
		test.CNAME("hello.default.svc.cluster.local. 5 IN CNAME web.shop.svc.cluster.local."), test.A("web.shop.svc.cluster.local. 5 IN A 10.96.0.20")}},
	// namespaces, the zone, unknown names
	{Qname: "shop.svc.cluster.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "shop.svc.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "nons.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "web.nons.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "gone.shop.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "gone.shop.svc.cluster.local.", Qtype: dns.TypeSOA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "web.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}}, // no short names: "web" is no namespace
	{Qname: "svc.cluster.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "cluster.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "cluster.local.", Qtype: dns.TypeSOA, Answer: []dns.RR{test.SOA(specSOA)}},
	{Qname: "a.b.c.web.shop.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "nothing.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "dns-version.cluster.local.", Qtype: dns.TypeTXT, Answer: []dns.RR{test.TXT(`dns-version.cluster.local. 28800 IN TXT "1.1.0"`)}},
	{Qname: "dns-version.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// pods insecure: the address in the label, in an existing namespace
	{Qname: "1-2-3-4.shop.pod.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("1-2-3-4.shop.pod.cluster.local. 5 IN A 1.2.3.4")}},
	{Qname: "fd00--1.shop.pod.cluster.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("fd00--1.shop.pod.cluster.local. 5 IN AAAA fd00::1")}},
	{Qname: "1-2-3-4.nons.pod.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "1-2-3.shop.pod.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	// PTR: cluster IP, then endpoints (ready ones); unknown: NXDOMAIN with the reverse zone's SOA
	{Qname: "20.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR("20.0.96.10.in-addr.arpa. 5 IN PTR web.shop.svc.cluster.local.")}},
	{Qname: "1.2.244.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR("1.2.244.10.in-addr.arpa. 5 IN PTR db-0.db.shop.svc.cluster.local.")}},
	{Qname: "5.1.244.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR("5.1.244.10.in-addr.arpa. 5 IN PTR 10-244-1-5.web.shop.svc.cluster.local.")}},
	{Qname: "3.2.244.10.in-addr.arpa.", Qtype: dns.TypePTR, Rcode: dns.RcodeNameError,
		Ns: []dns.RR{test.SOA("in-addr.arpa. 5 IN SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 0 7200 1800 86400 5")}},
	{Qname: rev6, Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR(rev6 + " 5 IN PTR dual.shop.svc.cluster.local.")}},
	{Qname: "dns-version.in-addr.arpa.", Qtype: dns.TypeTXT, Answer: []dns.RR{test.TXT(`dns-version.in-addr.arpa. 28800 IN TXT "1.1.0"`)}},
}

// rev6 is the reverse name of fd00:96::21.
const rev6 = "1.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa."

func TestServeSpec(t *testing.T) {
	if r, _ := dns.ReverseAddr("fd00:96::21"); r != rev6 {
		t.Fatalf("rev6 = %s, want %s", rev6, r)
	}
	e := newSpecPlugin(t)
	for _, tc := range specCases {
		t.Run(tc.Qname+"/"+dns.TypeToString[tc.Qtype], func(t *testing.T) {
			rec := dnstest.NewRecorder(&test.ResponseWriter{})
			if _, err := e.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
				t.Fatal(err)
			}
			zeroSerial(rec.Msg)
			if err := test.SortAndCheck(rec.Msg, tc); err != nil {
				t.Error(err)
			}
		})
	}
}

// zeroSerial sets every SOA's serial to 0 (it is the time of the build).
func zeroSerial(m *dns.Msg) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
		}
	}
}

func TestServeSpecTransfer(t *testing.T) {
	e := newSpecPlugin(t)
	m := new(dns.Msg)
	m.SetQuestion("cluster.local.", dns.TypeAXFR)
	rc, _ := e.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
	if rc != dns.RcodeRefused {
		t.Errorf("AXFR: rcode %d, want REFUSED", rc)
	}
}

func BenchmarkServeDNSSpec(b *testing.B) {
	e := newSpecPlugin(b)
	qs := []*dns.Msg{
		new(dns.Msg).SetQuestion("web.shop.svc.cluster.local.", dns.TypeA),
		new(dns.Msg).SetQuestion("_pg._tcp.db.shop.svc.cluster.local.", dns.TypeSRV),
		new(dns.Msg).SetQuestion("20.0.96.10.in-addr.arpa.", dns.TypePTR),
	}
	w := &test.ResponseWriter{}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.ServeDNS(context.Background(), w, qs[i%len(qs)])
	}
}

// TestServeSpecLargeHeadless: a headless Service with more endpoints than
// the linear dedupe handles: 53/udp and 53/tcp of one endpoint are one SRV
// record, each endpoint's address is once in the additional section.
func TestServeSpecLargeHeadless(t *testing.T) {
	st := &State{Namespaces: []string{"ns"}, Services: []Service{{ID: "ns/big", Name: "big", Namespace: "ns", Status: "active", Headless: true}}}
	for i := range 40 {
		st.Tasks = append(st.Tasks, Task{ID: fmt.Sprint(i), ServiceID: "ns/big", DesiredStatus: StatusRunning, ActualStatus: StatusHealthy,
			Address: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1),
			Ports:   []TaskPort{{Name: "dns", Protocol: "udp", ContainerPort: 53}, {Name: "dns-tcp", Protocol: "tcp", ContainerPort: 53}}})
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	e := &Endpointsvc{Zones: []string{"cluster.local."}, spec: true, ttl: 5, syncer: &syncer{}, Next: test.NextHandler(dns.RcodeRefused, nil)}
	e.finish(fakeLookup)
	e.apply(context.Background(), "test", st, false)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := e.ServeDNS(context.Background(), rec, new(dns.Msg).SetQuestion("big.ns.svc.cluster.local.", dns.TypeSRV)); err != nil {
		t.Fatal(err)
	}
	if len(rec.Msg.Answer) != 40 || len(rec.Msg.Extra) != 40 {
		t.Fatalf("%d SRV, %d additional; want 40 and 40", len(rec.Msg.Answer), len(rec.Msg.Extra))
	}
	if w := rec.Msg.Answer[0].(*dns.SRV).Weight; w != 1 { // 100/80 entries, at least 1
		t.Errorf("weight %d, want 1", w)
	}
}
