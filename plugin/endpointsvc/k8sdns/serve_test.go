package k8sdns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// testServer serves the zones of kubeadm's stanza with TTL 5 and pods
// insecure, no upstream.
func testServer() *Server {
	return &Server{Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}, TTL: 5, PodsInsecure: true}
}

// loadCluster decodes a snapshot or state document file.
func loadCluster(t testing.TB, path string) *Cluster {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ask answers m from t as the plugin does: the zone of the question, the
// schema's reply, and the SOA in the authority section of NXDOMAIN and
// NODATA (serial 0). A name outside the zones is REFUSED.
func ask(s *Server, t *Table, m *dns.Msg) *dns.Msg {
	state := request.Request{W: &test.ResponseWriter{}, Req: m}
	name := state.Name()
	zi := -1
	for i, z := range s.Zones {
		if dns.IsSubDomain(z, name) && (zi < 0 || len(z) > len(s.Zones[zi])) {
			zi = i
		}
	}
	r := new(dns.Msg)
	r.SetReply(m)
	if zi < 0 {
		r.Rcode = dns.RcodeRefused
		return r
	}
	rp := s.Serve(context.Background(), state, zi, t, 0)
	r.Authoritative = true
	switch {
	case rp.Refused:
		r.Rcode, r.Authoritative = dns.RcodeRefused, false
	case rp.NameError:
		r.Rcode = dns.RcodeNameError
		r.Ns = []dns.RR{s.SOA(state.QName()[len(name)-len(s.Zones[zi]):], 0)}
	case len(rp.Answer) == 0:
		r.Ns = []dns.RR{s.SOA(state.QName()[len(name)-len(s.Zones[zi]):], 0)}
	default:
		r.Answer, r.Extra = rp.Answer, rp.Extra
	}
	return r
}

const specSOA = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"

// The cases are the kubernetes plugin's answers (CoreDNS v1.15.0) for the
// same objects; TestAgainstStock (kubesource) compares the two on
// generated clusters, and the end-to-end tests on a real API server.
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

// TestServe answers testdata/spec-state.json (a state document of an
// older meshdns, as corefile/cluster.Corefile's snapshot is one).
func TestServe(t *testing.T) {
	if r, _ := dns.ReverseAddr("fd00:96::21"); r != rev6 {
		t.Fatalf("rev6 = %s, want %s", rev6, r)
	}
	s, tbl := testServer(), Build(loadCluster(t, "testdata/spec-state.json"))
	for _, tc := range specCases {
		t.Run(tc.Qname+"/"+dns.TypeToString[tc.Qtype], func(t *testing.T) {
			if err := test.SortAndCheck(ask(s, tbl, tc.Msg()), tc); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestServeTransfer(t *testing.T) {
	s, tbl := testServer(), Build(loadCluster(t, "testdata/spec-state.json"))
	if r := ask(s, tbl, new(dns.Msg).SetQuestion("cluster.local.", dns.TypeAXFR)); r.Rcode != dns.RcodeRefused {
		t.Errorf("AXFR: rcode %d, want REFUSED", r.Rcode)
	}
}

// TestServeLargeHeadless: a headless Service with more endpoints than a
// linear dedupe handles well: 53/udp and 53/tcp of one endpoint are one
// SRV record, each endpoint's address is once in the additional section,
// and A answers each address once.
func TestServeLargeHeadless(t *testing.T) {
	sl := &Slice{Namespace: "ns", Name: "big-1", Service: "big", Type: IPv4,
		Ports: []Port{{Name: "dns", Protocol: "UDP", Port: 53}, {Name: "dns-tcp", Protocol: "TCP", Port: 53}}}
	for i := range 40 {
		if err := sl.Add(EndpointSpec{Ready: True, Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/200, i%200+1)}}); err != nil {
			t.Fatal(err)
		}
	}
	dup := &Slice{Namespace: "ns", Name: "big-2", Service: "big", Type: IPv4} // the same addresses again, no ports
	for i := range 40 {
		_ = dup.Add(EndpointSpec{Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/200, i%200+1)}})
	}
	c := &Cluster{Namespaces: []string{"ns"}, Services: []*Service{{Namespace: "ns", Name: "big", Kind: Headless}}, Slices: []*Slice{sl, dup}}
	s, tbl := testServer(), Build(c)
	r := ask(s, tbl, new(dns.Msg).SetQuestion("big.ns.svc.cluster.local.", dns.TypeSRV))
	if len(r.Answer) != 40 || len(r.Extra) != 40 {
		t.Fatalf("%d SRV, %d additional; want 40 and 40", len(r.Answer), len(r.Extra))
	}
	if w := r.Answer[0].(*dns.SRV).Weight; w != 1 { // 100/120 entries, at least 1
		t.Errorf("weight %d, want 1", w)
	}
	if r := ask(s, tbl, new(dns.Msg).SetQuestion("big.ns.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 40 {
		t.Errorf("%d A records, want 40", len(r.Answer))
	}
	if r := ask(s, tbl, new(dns.Msg).SetQuestion("_dns._udp.big.ns.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 40 {
		t.Errorf("%d A records for a port name, want 40", len(r.Answer))
	}
}

func BenchmarkServe(b *testing.B) {
	s, tbl := testServer(), Build(loadCluster(b, "testdata/spec-state.json"))
	qs := []*dns.Msg{
		new(dns.Msg).SetQuestion("web.shop.svc.cluster.local.", dns.TypeA),
		new(dns.Msg).SetQuestion("_pg._tcp.db.shop.svc.cluster.local.", dns.TypeSRV),
		new(dns.Msg).SetQuestion("20.0.96.10.in-addr.arpa.", dns.TypePTR),
	}
	zones := []int{0, 0, 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Serve(context.Background(), request.Request{W: &test.ResponseWriter{}, Req: qs[i%len(qs)]}, zones[i%len(qs)], tbl, 1)
	}
}

// TestServeMultiAddressEndpoint: every address of an endpoint is served,
// as the kubernetes plugin serves them (it used to keep only the first):
// A and AAAA, the endpoint's name, SRV (one record per target and port,
// weight over every address, every address as glue) and PTR of each.
func TestServeMultiAddressEndpoint(t *testing.T) {
	sl := &Slice{Namespace: "ns", Name: "db-1", Service: "db", Type: IPv4, Ports: []Port{{Name: "pg", Protocol: "TCP", Port: 5432}}}
	if err := sl.Add(EndpointSpec{Hostname: "db-0", Addresses: []string{"10.0.0.1", "10.0.0.2"}}); err != nil {
		t.Fatal(err)
	}
	if err := sl.Add(EndpointSpec{Addresses: []string{"10.0.0.3", "10.0.0.4"}}); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Namespaces: []string{"ns"}, Services: []*Service{{Namespace: "ns", Name: "db", Kind: Headless}}, Slices: []*Slice{sl}}
	s, tbl := testServer(), Build(c)
	const soa = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"
	for _, tc := range []test.Case{
		{Qname: "db.ns.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{
			test.A("db.ns.svc.cluster.local. 5 IN A 10.0.0.1"), test.A("db.ns.svc.cluster.local. 5 IN A 10.0.0.2"),
			test.A("db.ns.svc.cluster.local. 5 IN A 10.0.0.3"), test.A("db.ns.svc.cluster.local. 5 IN A 10.0.0.4")}},
		{Qname: "db-0.db.ns.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{
			test.A("db-0.db.ns.svc.cluster.local. 5 IN A 10.0.0.1"), test.A("db-0.db.ns.svc.cluster.local. 5 IN A 10.0.0.2")}},
		{Qname: "10-0-0-4.db.ns.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("10-0-0-4.db.ns.svc.cluster.local. 5 IN A 10.0.0.4")}},
		{Qname: "10-0-0-2.db.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soa)}}, // its label is its hostname
		{Qname: "_pg._tcp.db.ns.svc.cluster.local.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{
				test.SRV("_pg._tcp.db.ns.svc.cluster.local. 5 IN SRV 0 25 5432 10-0-0-3.db.ns.svc.cluster.local."),
				test.SRV("_pg._tcp.db.ns.svc.cluster.local. 5 IN SRV 0 25 5432 10-0-0-4.db.ns.svc.cluster.local."),
				test.SRV("_pg._tcp.db.ns.svc.cluster.local. 5 IN SRV 0 25 5432 db-0.db.ns.svc.cluster.local.")},
			Extra: []dns.RR{
				test.A("10-0-0-3.db.ns.svc.cluster.local. 5 IN A 10.0.0.3"), test.A("10-0-0-4.db.ns.svc.cluster.local. 5 IN A 10.0.0.4"),
				test.A("db-0.db.ns.svc.cluster.local. 5 IN A 10.0.0.1"), test.A("db-0.db.ns.svc.cluster.local. 5 IN A 10.0.0.2")}},
		{Qname: "2.0.0.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR("2.0.0.10.in-addr.arpa. 5 IN PTR db-0.db.ns.svc.cluster.local.")}},
		{Qname: "4.0.0.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{test.PTR("4.0.0.10.in-addr.arpa. 5 IN PTR 10-0-0-4.db.ns.svc.cluster.local.")}},
	} {
		if err := test.SortAndCheck(ask(s, tbl, tc.Msg()), tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
}

// TestServePTROfSlicesWithoutService: the addresses of a slice whose
// Service does not exist (deleted, or not created yet) have PTR records,
// as in the kubernetes plugin's endpoint index; the name itself does not
// exist.
func TestServePTROfSlicesWithoutService(t *testing.T) {
	sl := &Slice{Namespace: "ns", Name: "ghost-1", Service: "ghost", Type: IPv6}
	if err := sl.Add(EndpointSpec{Addresses: []string{"fd00::7"}}); err != nil {
		t.Fatal(err)
	}
	s, tbl := testServer(), Build(&Cluster{Namespaces: []string{"ns"}, Slices: []*Slice{sl}})
	rev, _ := dns.ReverseAddr("fd00::7")
	if err := test.SortAndCheck(ask(s, tbl, new(dns.Msg).SetQuestion(rev, dns.TypePTR)), test.Case{Qname: rev, Qtype: dns.TypePTR,
		Answer: []dns.RR{test.PTR(rev + " 5 IN PTR fd00--7.ghost.ns.svc.cluster.local.")}}); err != nil {
		t.Error(err)
	}
	if r := ask(s, tbl, new(dns.Msg).SetQuestion("ghost.ns.svc.cluster.local.", dns.TypeA)); r.Rcode != dns.RcodeNameError {
		t.Errorf("the name of a Service that does not exist: rcode %d", r.Rcode)
	}
}

// failingUpstream answers SERVFAIL to every lookup, as the server does when
// its forward plugin reaches no resolver.
type failingUpstream struct{}

func (failingUpstream) Lookup(_ context.Context, _ request.Request, name string, typ uint16) (*dns.Msg, error) {
	m := new(dns.Msg).SetQuestion(name, typ)
	m.Rcode = dns.RcodeServerFailure
	return m, nil
}

// TestServeExternalNameUpstreamFails: an ExternalName Service whose target
// lies outside the cluster, when the lookup through the server fails,
// answers the CNAME alone for A, AAAA and CNAME and NODATA for TXT, as the
// kubernetes plugin does - never SERVFAIL.
func TestServeExternalNameUpstreamFails(t *testing.T) {
	s := testServer()
	s.Upstream = failingUpstream{}
	tbl := Build(&Cluster{Namespaces: []string{"ns"}, Services: []*Service{{Namespace: "ns", Name: "far", Kind: ExternalName, ExternalName: "Nowhere.Example.test"}}})
	const soa = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"
	cname := []dns.RR{test.CNAME("far.ns.svc.cluster.local. 5 IN CNAME Nowhere.Example.test.")}
	for _, tc := range []test.Case{
		{Qname: "far.ns.svc.cluster.local.", Qtype: dns.TypeA, Answer: cname},
		{Qname: "far.ns.svc.cluster.local.", Qtype: dns.TypeAAAA, Answer: cname},
		{Qname: "far.ns.svc.cluster.local.", Qtype: dns.TypeCNAME, Answer: cname},
		{Qname: "far.ns.svc.cluster.local.", Qtype: dns.TypeTXT, Ns: []dns.RR{test.SOA(soa)}},
		{Qname: "far.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Ns: []dns.RR{test.SOA(soa)}},
	} {
		if err := test.SortAndCheck(ask(s, tbl, tc.Msg()), tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
}

// TestHeadlessAnswerPrecomputed: A and AAAA of a headless Service's own
// name come from the addresses the table holds packed and distinct: the
// reply costs the same few allocations whatever the number of endpoints
// and ports (a dedupe at query time, scanning every earlier record, was
// quadratic: ~8 M comparisons at 2,000 endpoints x 2 ports).
func TestHeadlessAnswerPrecomputed(t *testing.T) {
	allocs := func(n int) float64 {
		sl := &Slice{Namespace: "ns", Name: "big-1", Service: "big", Type: IPv4,
			Ports: []Port{{Name: "a", Protocol: "TCP", Port: 1}, {Name: "b", Protocol: "TCP", Port: 2}}}
		for i := range n {
			_ = sl.Add(EndpointSpec{Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}})
		}
		sl.Compact()
		s := testServer()
		tbl := Build(&Cluster{Namespaces: []string{"ns"}, Services: []*Service{{Namespace: "ns", Name: "big", Kind: Headless}}, Slices: []*Slice{sl, sl}})
		m := new(dns.Msg).SetQuestion("big.ns.svc.cluster.local.", dns.TypeA)
		state := request.Request{W: &test.ResponseWriter{}, Req: m}
		if rp := s.Serve(context.Background(), state, 0, tbl, 1); len(rp.Answer) != n {
			t.Fatalf("%d A records, want %d", len(rp.Answer), n)
		}
		return testing.AllocsPerRun(20, func() { s.Serve(context.Background(), state, 0, tbl, 1) })
	}
	if small, large := allocs(10), allocs(2000); large > small {
		t.Errorf("A of a headless Service: %v allocations at 2,000 endpoints, %v at 10", large, small)
	}
}

// TestSliceText: hostnames and target names packed in their slice read
// back per endpoint, whether they were reserved for or not, and whether
// the first endpoints had none.
func TestSliceText(t *testing.T) {
	for _, reserve := range []bool{false, true} {
		sl := &Slice{Type: IPv4}
		_ = sl.Add(EndpointSpec{Addresses: []string{"10.0.0.1"}})
		if reserve {
			sl.Reserve(3, 3, 20)
		}
		_ = sl.Add(EndpointSpec{Addresses: []string{"10.0.0.2"}, Hostname: "h2"})
		_ = sl.Add(EndpointSpec{Addresses: []string{"10.0.0.3"}, TargetRef: "pod-3"})
		_ = sl.Add(EndpointSpec{Addresses: []string{"10.0.0.4"}, Hostname: "h4", TargetRef: "pod-4"})
		for _, compact := range []bool{false, true} {
			if compact {
				sl.Compact()
			}
			var got []string
			for i := range sl.Endpoints {
				got = append(got, sl.Hostname(i)+"/"+sl.TargetRef(i))
			}
			if fmt.Sprint(got) != "[/ h2/ /pod-3 h4/pod-4]" {
				t.Errorf("reserve=%v compact=%v: %v", reserve, compact, got)
			}
		}
	}
}

// TestServeNameServer: NS at the apex and ns.dns.<zone>, as the kubernetes
// plugin makes them of the server's own addresses: the Service whose
// endpoint holds one (its cluster IP), or the address itself.
func TestServeNameServer(t *testing.T) {
	sl := &Slice{Namespace: "kube-system", Name: "dns-1", Service: "dns", Type: IPv4}
	_ = sl.Add(EndpointSpec{Addresses: []string{"10.244.0.53"}})
	c := &Cluster{Namespaces: []string{"kube-system"}, Slices: []*Slice{sl},
		Services: []*Service{{Namespace: "kube-system", Name: "dns", ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")}}}}
	s, tbl := testServer(), Build(c)
	const soa = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"
	check := func(what string, tcs ...test.Case) {
		t.Helper()
		for _, tc := range tcs {
			if err := test.SortAndCheck(ask(s, tbl, tc.Msg()), tc); err != nil {
				t.Errorf("%s: %s %s: %v", what, tc.Qname, dns.TypeToString[tc.Qtype], err)
			}
		}
	}
	check("no own address", test.Case{Qname: "cluster.local.", Qtype: dns.TypeNS, Ns: []dns.RR{test.SOA(soa)}},
		test.Case{Qname: "ns.dns.cluster.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(soa)}})
	s.SetLocalIPs([]netip.Addr{netip.MustParseAddr("192.0.2.1")})
	check("an address of no endpoint",
		test.Case{Qname: "cluster.local.", Qtype: dns.TypeNS, Answer: []dns.RR{test.NS("cluster.local. 5 IN NS ns.dns.cluster.local.")},
			Extra: []dns.RR{test.A("ns.dns.cluster.local. 5 IN A 192.0.2.1")}},
		test.Case{Qname: "NS.dns.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("NS.dns.cluster.local. 5 IN A 192.0.2.1")}},
		test.Case{Qname: "ns.dns.cluster.local.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(soa)}},
		test.Case{Qname: "ns.dns.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soa)}},
		test.Case{Qname: "ns.dns.Cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{test.SOA("Cluster.local. 5 IN SOA ns.dns.Cluster.local. hostmaster.Cluster.local. 0 7200 1800 86400 5")}})
	s.SetLocalIPs([]netip.Addr{netip.MustParseAddr("10.244.0.53")})
	check("the address of the DNS Service's endpoint",
		test.Case{Qname: "cluster.local.", Qtype: dns.TypeNS, Answer: []dns.RR{test.NS("cluster.local. 5 IN NS dns.kube-system.svc.cluster.local.")},
			Extra: []dns.RR{test.A("dns.kube-system.svc.cluster.local. 5 IN A 10.96.0.10")}},
		test.Case{Qname: "ns.dns.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("ns.dns.cluster.local. 5 IN A 10.96.0.10")}})
}
