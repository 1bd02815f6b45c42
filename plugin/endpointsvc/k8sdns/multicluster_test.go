package k8sdns

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// The multicluster zone (the kubernetes plugin's `multicluster`): the
// names are the ServiceImports', their endpoints those of the slices
// labelled multicluster.kubernetes.io/service-name, named with their
// slice's source-cluster. The objects and expected answers are the
// kubernetes plugin's own multicluster tests' (CoreDNS v1.15.0,
// handler_test.go: svcImportIndex, mcEpsIndex, commonDnsTestCases and
// multiclusterDnsTestCases), in the zone clusterset.local beside
// cluster.local, whose names stay the Services'.

// mcServer serves cluster.local and the multicluster zone
// clusterset.local, TTL 5, pods insecure.
func mcServer() *Server {
	return &Server{Zones: []string{"cluster.local.", "clusterset.local."}, Multicluster: []bool{false, true}, TTL: 5, PodsInsecure: true}
}

// mcSlice is a slice of import imp from cluster1 with ports ps and one
// endpoint per address (hostname hosts[i] when given).
func mcSlice(t testing.TB, name, imp string, typ AddressType, ps []Port, addrs []string, hosts ...string) *Slice {
	t.Helper()
	sl := &Slice{Namespace: "testns", Name: name, Import: imp, Cluster: "cluster1", Type: typ, Ports: ps}
	for i, a := range addrs {
		e := EndpointSpec{Addresses: []string{a}, Ready: True}
		if i < len(hosts) {
			e.Hostname = hosts[i]
		}
		if err := sl.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	sl.Compact()
	return sl
}

// mcCluster is the stock tests' ServiceImports and multicluster slices
// (their kube-system ones are in a namespace the stock test does not
// expose: left out), beside a Service svc1 of the cluster's own with
// another address, and an import with no ports.
func mcCluster(t testing.TB) *Cluster {
	http := []Port{{Name: "http", Protocol: "tcp", Port: 80}}
	imp := func(name string, kind Kind, ips ...string) *Service {
		s := &Service{Namespace: "testns", Name: name, Kind: kind}
		if kind == ClusterIP {
			s.Ports = http
		}
		for _, ip := range ips {
			s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr(ip))
		}
		return s
	}
	noports := imp("noports", ClusterIP, "10.0.0.9")
	noports.Ports = nil
	return &Cluster{
		Namespaces: []string{"testns"},
		Services: []*Service{{Namespace: "testns", Name: "svc1", Kind: ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}, Ports: http},
			{Namespace: "testns", Name: "local", Kind: ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.2")}, Ports: http}},
		Imports: []*Service{
			imp("svc1", ClusterIP, "10.0.0.1"), imp("svcempty", ClusterIP, "10.0.0.1"), imp("svc6", ClusterIP, "1234:abcd::1"),
			imp("hdls1", Headless), imp("hdlsprtls", Headless), imp("svc-dual-stack", ClusterIP, "10.0.0.3", "10::3"), noports,
		},
		Slices: []*Slice{
			mcSlice(t, "svc1-slice1", "svc1", IPv4, http, []string{"172.0.0.1"}, "ep1a"),
			mcSlice(t, "svcempty-slice1", "svcempty", IPv4, http, nil),
			mcSlice(t, "hdls1-slice1", "hdls1", IPv4, http, []string{"172.0.0.2", "172.0.0.3", "172.0.0.4", "172.0.0.5"}, "", "", "dup-name", "dup-name"),
			mcSlice(t, "hdls1-slice2", "hdls1", IPv6, http, []string{"5678:abcd::1", "5678:abcd::2"}),
			mcSlice(t, "hdlsprtls-slice1", "hdlsprtls", IPv4, nil, []string{"172.0.0.20"}),
		},
	}
}

const mcSOA = "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 0 7200 1800 86400 5"

// mcCases are the stock tests' cases (cluster.local there is the
// multicluster zone, clusterset.local here), then ours.
var mcCases = []test.Case{
	// commonDnsTestCases
	{Qname: "svc1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("svc1.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
	{Qname: "svcempty.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("svcempty.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
	{Qname: "svc1.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("svc1.testns.svc.clusterset.local. 5 IN SRV 0 100 80 svc1.testns.svc.clusterset.local.")},
		Extra:  []dns.RR{test.A("svc1.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
	{Qname: "svc6.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("svc6.testns.svc.clusterset.local. 5 IN SRV 0 100 80 svc6.testns.svc.clusterset.local.")},
		Extra:  []dns.RR{test.AAAA("svc6.testns.svc.clusterset.local. 5 IN AAAA 1234:abcd::1")}},
	{Qname: "_http._tcp.svc1.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_http._tcp.svc1.testns.svc.clusterset.local. 5 IN SRV 0 100 80 svc1.testns.svc.clusterset.local.")},
		Extra:  []dns.RR{test.A("svc1.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
	{Qname: "hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{
		test.A("hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.2"), test.A("hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.3"),
		test.A("hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.4"), test.A("hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.5")}},
	{Qname: "hdlsprtls.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("hdlsprtls.testns.svc.clusterset.local. 5 IN A 172.0.0.20")}},
	{Qname: "svc1.testns.svc.clusterset.local.", Qtype: dns.TypeAAAA, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svc0.testns.svc.clusterset.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svc0.svc-nons.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "dns-version.clusterset.local.", Qtype: dns.TypeTXT, Answer: []dns.RR{test.TXT("dns-version.clusterset.local. 28800 IN TXT 1.1.0")}},
	{Qname: "svc1.testns.svc.clusterset.local.", Qtype: dns.TypeTXT, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svc0.svc-nons.svc.clusterset.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "bogusendpoint.hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "bogusendpoint.svc0.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svc6.testns.svc.clusterset.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("svc6.testns.svc.clusterset.local. 5 IN AAAA 1234:abcd::1")}},
	{Qname: "hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{
		test.AAAA("hdls1.testns.svc.clusterset.local. 5 IN AAAA 5678:abcd::1"), test.AAAA("hdls1.testns.svc.clusterset.local. 5 IN AAAA 5678:abcd::2")}},
	{Qname: "svc.clusterset.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "pod.clusterset.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "testns.svc.clusterset.local.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "foo.svc.clusterset.local.", Qtype: dns.TypeNS, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svc-dual-stack.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("svc-dual-stack.testns.svc.clusterset.local. 5 IN A 10.0.0.3")}},
	{Qname: "svc-dual-stack.testns.svc.clusterset.local.", Qtype: dns.TypeAAAA, Answer: []dns.RR{test.AAAA("svc-dual-stack.testns.svc.clusterset.local. 5 IN AAAA 10::3")}},
	{Qname: "svc-dual-stack.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("svc-dual-stack.testns.svc.clusterset.local. 5 IN SRV 0 50 80 svc-dual-stack.testns.svc.clusterset.local.")},
		Extra: []dns.RR{test.A("svc-dual-stack.testns.svc.clusterset.local. 5 IN A 10.0.0.3"),
			test.AAAA("svc-dual-stack.testns.svc.clusterset.local. 5 IN AAAA 10::3")}},
	// multiclusterDnsTestCases: endpoints named <endpoint>.<cluster>
	{Qname: "_http._tcp.hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{
			test.SRV("_http._tcp.hdls1.testns.svc.clusterset.local. 5 IN SRV 0 16 80 172-0-0-2.cluster1.hdls1.testns.svc.clusterset.local."),
			test.SRV("_http._tcp.hdls1.testns.svc.clusterset.local. 5 IN SRV 0 16 80 172-0-0-3.cluster1.hdls1.testns.svc.clusterset.local."),
			test.SRV("_http._tcp.hdls1.testns.svc.clusterset.local. 5 IN SRV 0 16 80 5678-abcd--1.cluster1.hdls1.testns.svc.clusterset.local."),
			test.SRV("_http._tcp.hdls1.testns.svc.clusterset.local. 5 IN SRV 0 16 80 5678-abcd--2.cluster1.hdls1.testns.svc.clusterset.local."),
			test.SRV("_http._tcp.hdls1.testns.svc.clusterset.local. 5 IN SRV 0 16 80 dup-name.cluster1.hdls1.testns.svc.clusterset.local."),
		},
		Extra: []dns.RR{
			test.A("172-0-0-2.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.2"),
			test.A("172-0-0-3.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.3"),
			test.AAAA("5678-abcd--1.cluster1.hdls1.testns.svc.clusterset.local. 5 IN AAAA 5678:abcd::1"),
			test.AAAA("5678-abcd--2.cluster1.hdls1.testns.svc.clusterset.local. 5 IN AAAA 5678:abcd::2"),
			test.A("dup-name.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.4"),
			test.A("dup-name.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.5"),
		}},
	{Qname: "5678-abcd--2.cluster1.hdls1.testns.svc.clusterset.local", Qtype: dns.TypeAAAA,
		Answer: []dns.RR{test.AAAA("5678-abcd--2.cluster1.hdls1.testns.svc.clusterset.local. 5 IN AAAA 5678:abcd::2")}},
	{Qname: "172-0-0-20.cluster1.hdlsprtls.testns.svc.clusterset.local.", Qtype: dns.TypeA,
		Answer: []dns.RR{test.A("172-0-0-20.cluster1.hdlsprtls.testns.svc.clusterset.local. 5 IN A 172.0.0.20")}},
	// an endpoint name without its cluster does not exist
	{Qname: "5678-abcd--1.hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "172-0-0-2.cluster1.hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeA,
		Answer: []dns.RR{test.A("172-0-0-2.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.2")}},
	{Qname: "dup-name.cluster1.hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{
		test.A("dup-name.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.4"),
		test.A("dup-name.cluster1.hdls1.testns.svc.clusterset.local. 5 IN A 172.0.0.5")}},

	// ours: another cluster's name, an endpoint of a ClusterSetIP import,
	// an import without ports, a Service that is not imported, labels
	// without underscores (an endpoint and its cluster here, a port and a
	// protocol in cluster.local), and cluster.local unchanged beside.
	{Qname: "172-0-0-2.cluster2.hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "ep1a.cluster1.svc1.testns.svc.clusterset.local.", Qtype: dns.TypeA,
		Answer: []dns.RR{test.A("ep1a.cluster1.svc1.testns.svc.clusterset.local. 5 IN A 172.0.0.1")}},
	{Qname: "ep1a.CLUSTER1.svc1.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("ep1a.CLUSTER1.svc1.testns.svc.clusterset.local. 5 IN SRV 0 100 80 ep1a.cluster1.svc1.testns.svc.clusterset.local.")},
		Extra:  []dns.RR{test.A("ep1a.cluster1.svc1.testns.svc.clusterset.local. 5 IN A 172.0.0.1")}},
	{Qname: "http.tcp.svc1.testns.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "_http.tcp.svc1.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_http.tcp.svc1.testns.svc.clusterset.local. 5 IN SRV 0 100 80 svc1.testns.svc.clusterset.local.")},
		Extra:  []dns.RR{test.A("svc1.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
	{Qname: "noports.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "local.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svcempty.testns.svc.clusterset.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("svcempty.testns.svc.clusterset.local. 5 IN SRV 0 100 80 svcempty.testns.svc.clusterset.local.")},
		Extra:  []dns.RR{test.A("svcempty.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
	{Qname: "hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeCNAME, Ns: []dns.RR{test.SOA(mcSOA)}},
	{Qname: "svc1.testns.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("svc1.testns.svc.cluster.local. 5 IN A 10.96.0.1")}},
	{Qname: "hdls1.testns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
	{Qname: "http.tcp.svc1.testns.svc.cluster.local.", Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("http.tcp.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("svc1.testns.svc.cluster.local. 5 IN A 10.96.0.1")}},
	{Qname: "ep1a.cluster1.svc1.testns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(specSOA)}},
}

// TestServeMulticluster answers mcCases from the table, from the table of
// its snapshot, and from a table patched to it from an empty one name by
// name (as the kubernetes source and the replication stream patch it).
func TestServeMulticluster(t *testing.T) {
	c := mcCluster(t)
	built := Build(c)
	var buf bytes.Buffer
	if err := built.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"imports":[`) || !strings.Contains(buf.String(), `"import":"hdls1","cluster":"cluster1"`) {
		t.Fatalf("the snapshot lacks the imports or the slices' labels:\n%s", buf.String())
	}
	back, err := DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	p := &Patch{Namespaces: c.Namespaces, SetNamespaces: true}
	for ch := range built.All() {
		rec := AppendChange(nil, ch)
		dec, err := DecodeChange(rec)
		if err != nil || dec.Key != ch.Key {
			t.Fatalf("record %s: %+v, %v", rec, dec.Key, err)
		}
		p.Changes = append(p.Changes, dec)
	}
	patched := Build(&Cluster{}).Patched(p)
	for name, tbl := range map[string]*Table{"built": built, "snapshot": Build(back), "patched": patched} {
		if got, want := tbl.Describe(), built.Describe(); got != want {
			t.Errorf("%s: the table differs:\n%s\nwant:\n%s", name, got, want)
		}
		if tbl.Imports() != 7 || tbl.Services() != 2 {
			t.Errorf("%s: %d imports, %d Services; want 7 and 2", name, tbl.Imports(), tbl.Services())
		}
		for _, tc := range mcCases {
			if err := test.SortAndCheck(ask(mcServer(), tbl, tc.Msg()), tc); err != nil {
				t.Errorf("%s: %s %s: %v", name, tc.Qname, dns.TypeToString[tc.Qtype], err)
			}
		}
	}
}

// TestServeMulticlusterIgnoreEmpty: with ignore empty_service a
// ClusterSetIP import without a ready endpoint does not exist; a headless
// one is unaffected.
func TestServeMulticlusterIgnoreEmpty(t *testing.T) {
	s, tbl := mcServer(), Build(mcCluster(t))
	s.IgnoreEmptyService = true
	for _, tc := range []test.Case{
		{Qname: "svcempty.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
		{Qname: "svc6.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
		{Qname: "svc1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("svc1.testns.svc.clusterset.local. 5 IN A 10.0.0.1")}},
		{Qname: "hdlsprtls.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("hdlsprtls.testns.svc.clusterset.local. 5 IN A 172.0.0.20")}},
	} {
		if err := test.SortAndCheck(ask(s, tbl, tc.Msg()), tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
}

// TestMulticlusterPatch: an import's name is patched apart from the
// Service of the same name, and a slice labelled with both a Service and
// an import is each one's.
func TestMulticlusterPatch(t *testing.T) {
	c := mcCluster(t)
	both := mcSlice(t, "both", "svc1", IPv4, []Port{{Name: "http", Protocol: "tcp", Port: 80}}, []string{"172.0.0.99"}, "both")
	both.Service = "svc1"
	tbl := Build(c).Patched(&Patch{Changes: []Change{
		{Key: Key{Namespace: "testns", Name: "svc1", Import: true}, Service: c.Imports[0], Slices: []*Slice{c.Slices[0], both}},
		{Key: Key{Namespace: "testns", Name: "svc1"}, Service: c.Services[0], Slices: []*Slice{both}},
		{Key: Key{Namespace: "testns", Name: "hdls1", Import: true}}, // gone
	}})
	whole := *c
	whole.Imports = slices.DeleteFunc(slices.Clone(c.Imports), func(s *Service) bool { return s.Name == "hdls1" })
	whole.Slices = append([]*Slice{both}, slices.DeleteFunc(slices.Clone(c.Slices), func(sl *Slice) bool { return sl.Import == "hdls1" })...)
	if got, want := tbl.Describe(), Build(&whole).Describe(); got != want {
		t.Fatalf("patched:\n%s\nwant:\n%s", got, want)
	}
	if w := tbl.Whole(); len(w.Slices) != len(whole.Slices) || len(w.Imports) != 6 {
		t.Errorf("Whole: %d slices, %d imports; want %d and 6 (each slice once)", len(w.Slices), len(w.Imports), len(whole.Slices))
	}
	s := mcServer()
	for _, tc := range []test.Case{
		{Qname: "both.cluster1.svc1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("both.cluster1.svc1.testns.svc.clusterset.local. 5 IN A 172.0.0.99")}},
		{Qname: "both.svc1.testns.svc.cluster.local.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("both.svc1.testns.svc.cluster.local. 5 IN A 172.0.0.99")}},
		{Qname: "hdls1.testns.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(mcSOA)}},
	} {
		if err := test.SortAndCheck(ask(s, tbl, tc.Msg()), tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
}
