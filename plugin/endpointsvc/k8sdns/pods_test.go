package k8sdns

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// podsCluster has Pods in two namespaces: one of its own in each, one
// IPv6, and a node address that hostNetwork Pods of both namespaces share
// (two of them in kube-system).
func podsCluster() *Cluster {
	return &Cluster{Namespaces: []string{"kube-system", "shop"}, Pods: []PodAddr{
		{Addr: netip.MustParseAddr("10.244.1.5"), Namespaces: []string{"shop"}},
		{Addr: netip.MustParseAddr("fd00:10:244::5"), Namespaces: []string{"shop"}},
		{Addr: netip.MustParseAddr("10.250.0.1"), Namespaces: []string{"shop", "kube-system", "kube-system"}},
	}}
}

// TestVerifiedPods: a pod name answers only for a Pod of that namespace
// with that address, the address written as the API writes it.
func TestVerifiedPods(t *testing.T) {
	s := testServer()
	s.PodsInsecure, s.PodsVerified = false, true
	tbl := Build(podsCluster())
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string // rcode and answer
	}{
		{"10-244-1-5.shop.pod.cluster.local.", dns.TypeA, "NOERROR [10-244-1-5.shop.pod.cluster.local.\t5\tIN\tA\t10.244.1.5]"},
		{"10-244-1-5.shop.pod.cluster.local.", dns.TypeAAAA, "NOERROR []"},
		{"10-244-1-5.kube-system.pod.cluster.local.", dns.TypeA, "NXDOMAIN []"},
		{"10-244-1-6.shop.pod.cluster.local.", dns.TypeA, "NXDOMAIN []"},
		{"10-244-1-5.nowhere.pod.cluster.local.", dns.TypeA, "NXDOMAIN []"},
		{"fd00-10-244--5.shop.pod.cluster.local.", dns.TypeAAAA, "NOERROR [fd00-10-244--5.shop.pod.cluster.local.\t5\tIN\tAAAA\tfd00:10:244::5]"},
		{"fd00-10-244-0-0-0-0-5.shop.pod.cluster.local.", dns.TypeAAAA, "NXDOMAIN []"}, // another spelling
		{"010-244-001-005.shop.pod.cluster.local.", dns.TypeA, "NXDOMAIN []"},
		{"10-250-0-1.kube-system.pod.cluster.local.", dns.TypeA, "NOERROR [10-250-0-1.kube-system.pod.cluster.local.\t5\tIN\tA\t10.250.0.1]"},
		{"shop.pod.cluster.local.", dns.TypeA, "NOERROR []"},
	} {
		m := ask(s, tbl, new(dns.Msg).SetQuestion(tc.name, tc.qtype))
		if got := dns.RcodeToString[m.Rcode] + " " + strings.ReplaceAll(strings.Join(rrStrings(m.Answer), ","), "\n", ""); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.name, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
}

func rrStrings(rrs []dns.RR) []string {
	out := []string{}
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	return []string{"[" + strings.Join(out, " ") + "]"}
}

// TestAutoPath: the search path of a client Pod is its namespace's; the
// first namespace of a shared address; none for an address of no Pod, a
// name outside the zones, or without pods verified.
func TestAutoPath(t *testing.T) {
	s := testServer()
	s.PodsInsecure, s.PodsVerified, s.Search = false, true, []string{"corp.example."}
	tbl := Build(podsCluster())
	path := func(client, qname string) []string {
		return s.AutoPath(tbl, request.Request{W: &test.ResponseWriter{RemoteIP: client}, Req: new(dns.Msg).SetQuestion(qname, dns.TypeA)})
	}
	want := []string{"shop.svc.cluster.local.", "svc.cluster.local.", "cluster.local.", "corp.example.", ""}
	if got := path("10.244.1.5", "web.shop.svc.cluster.local."); !slices.Equal(got, want) {
		t.Errorf("pod client: %q, want %q", got, want)
	}
	if got := path("fd00:10:244::5", "web.shop.svc.cluster.local."); !slices.Equal(got, want) {
		t.Errorf("IPv6 pod client: %q, want %q", got, want)
	}
	if got := path("10.250.0.1", "x.cluster.local."); len(got) == 0 || got[0] != "kube-system.svc.cluster.local." {
		t.Errorf("shared node address: %q, want kube-system first", got)
	}
	if got := path("10.250.0.1", "1.0.250.10.in-addr.arpa."); len(got) == 0 || got[2] != "in-addr.arpa." {
		t.Errorf("a question in a reverse zone: %q, want that zone's path (the stock plugin's)", got)
	}
	for _, c := range [][2]string{{"10.244.9.9", "web.shop.svc.cluster.local."}, {"10.244.1.5", "example.com."}} {
		if got := path(c[0], c[1]); got != nil {
			t.Errorf("client %s, %s: %q, want none", c[0], c[1], got)
		}
	}
	s.PodsVerified = false
	if got := path("10.244.1.5", "web.shop.svc.cluster.local."); got != nil {
		t.Errorf("without pods verified: %q", got)
	}
}

// TestSnapshotPods: the pod index goes through the snapshot; a snapshot
// without one (written before it existed) loads with none.
func TestSnapshotPods(t *testing.T) {
	var buf bytes.Buffer
	if err := Build(podsCluster()).Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"pods":{"kube-system":["10.250.0.1","10.250.0.1"],"shop":["10.244.1.5","10.250.0.1","fd00:10:244::5"]}`) {
		t.Errorf("snapshot:\n%s", buf.String())
	}
	c, err := DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Build(c).Describe(), Build(podsCluster()).Describe(); got != want {
		t.Errorf("decoded:\n%s\nwant:\n%s", got, want)
	}
	old := `{"format":"meshdns-k8sdns/1","namespaces":["shop"],"services":[],"slices":[]}`
	if c, err := DecodeSnapshot([]byte(old)); err != nil || c.Pods != nil {
		t.Errorf("a snapshot without pods: %v, pods %v", err, c.Pods)
	}
	bad := `{"format":"meshdns-k8sdns/1","namespaces":["shop"],"services":[],"slices":[],"pods":{"shop":["10.1.1"]}}`
	if _, err := DecodeSnapshot([]byte(bad)); err == nil || !strings.Contains(err.Error(), `bad address "10.1.1"`) {
		t.Errorf("a bad pod address: %v", err)
	}
}
