package k8sdns

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// extCluster: web (ClusterIP, two external IPs, one an ingress hostname)
// with a slice holding 10.244.0.5; db (headless, no external IPs) with a
// slice holding 10.244.0.6 and 10.244.0.7; api sharing an external IP
// with web.
func extCluster(t testing.TB) *Cluster {
	http := []Port{{Name: "http", Protocol: "TCP", Port: 80}}
	slice := func(svc string, addrs ...string) *Slice {
		sl := &Slice{Namespace: "shop", Name: svc + "-x", Service: svc, Type: IPv4, Ports: http}
		for _, a := range addrs {
			if err := sl.Add(EndpointSpec{Addresses: []string{a}, Ready: True}); err != nil {
				t.Fatal(err)
			}
		}
		sl.Compact()
		return sl
	}
	return &Cluster{
		Namespaces: []string{"shop"},
		Services: []*Service{
			{Namespace: "shop", Name: "web", Kind: ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.20")}, Ports: http,
				ExternalIPs: []string{"203.0.113.1", "lb.example.test"}},
			{Namespace: "shop", Name: "db", Kind: Headless, Ports: http},
			{Namespace: "shop", Name: "api", Kind: ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.21")}, Ports: http,
				ExternalIPs: []string{"203.0.113.1"}},
		},
		Slices: []*Slice{slice("web", "10.244.0.5"), slice("db", "10.244.0.6", "10.244.0.7")},
	}
}

func addrsOf(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestExternalAddress: the name server's addresses for k8s_external are
// the external IPs of the Service whose endpoint holds the server's own
// address (an ingress hostname left out), with headless a headless
// Service's ready addresses, and the server's own addresses when no
// endpoint holds them.
func TestExternalAddress(t *testing.T) {
	tbl := Build(extCluster(t))
	s := &Server{Zones: []string{"cluster.local."}, TTL: 5}
	for _, c := range []struct {
		local    string
		headless bool
		want     []string
	}{
		{"10.244.0.5", false, []string{"203.0.113.1"}},
		{"10.244.0.6", true, []string{"10.244.0.6", "10.244.0.7"}},
		{"10.244.0.6", false, nil},
		{"192.0.2.53", false, []string{"192.0.2.53"}},
	} {
		s.SetLocalIPs([]netip.Addr{netip.MustParseAddr(c.local)})
		if got := addrsOf(s.ExternalAddress(tbl, "example.org.", c.headless)); !slices.Equal(got, c.want) {
			t.Errorf("local %s headless %v: %v, want %v", c.local, c.headless, got, c.want)
		}
	}
}

// TestExternalReversePatched: the external IP index finds every Service
// of an address, in a table built whole and in one patched.
func TestExternalReversePatched(t *testing.T) {
	c := extCluster(t)
	tbl := Build(c)
	s := &Server{Zones: []string{"cluster.local."}, TTL: 5}
	hosts := func(tbl *Table, ip string) string {
		var out []string
		for _, r := range s.ExternalReverse(tbl, ip) {
			out = append(out, r.Host)
		}
		return strings.Join(out, " ")
	}
	if got := hosts(tbl, "203.0.113.1"); got != "api.shop web.shop" {
		t.Errorf("203.0.113.1: %q", got)
	}
	web := *c.Services[0]
	web.ExternalIPs = []string{"203.0.113.2"}
	p := &Patch{Changes: []Change{
		{Key: Key{Namespace: "shop", Name: "web"}, Service: &web, Slices: c.Slices[:1]},
		{Key: Key{Namespace: "shop", Name: "api"}},
	}}
	n := tbl.Patched(p)
	for ip, want := range map[string]string{"203.0.113.1": "", "203.0.113.2": "web.shop", "lb.example.test": ""} {
		if got := hosts(n, ip); got != want {
			t.Errorf("patched, %s: %q, want %q", ip, got, want)
		}
	}
	if got := hosts(tbl, "203.0.113.1"); got != "api.shop web.shop" {
		t.Errorf("the old table changed: %q", got)
	}
}

// TestSnapshotExternalIPsCompatible: a snapshot and a replication record
// of a meshdns without external IPs still load (none), and ones with them
// keep them; a record's unknown fields are ignored by the tolerant
// decoder, as older followers ignore external_ips.
func TestSnapshotExternalIPsCompatible(t *testing.T) {
	old := `{"format":"meshdns-k8sdns/1","namespaces":["shop"],
	 "services":[{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["10.96.0.20"],"ports":[{"name":"http","protocol":"TCP","port":80}]}],
	 "slices":[]}`
	c, err := DecodeSnapshot([]byte(old))
	if err != nil || len(c.Services) != 1 || c.Services[0].ExternalIPs != nil {
		t.Fatalf("an older snapshot: %+v, %v", c, err)
	}
	var b strings.Builder
	if err := extCluster(t).Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"external_ips":["203.0.113.1","lb.example.test"]`) {
		t.Fatalf("snapshot without the external IPs:\n%s", b.String())
	}
	back, err := DecodeSnapshot([]byte(b.String()))
	if err != nil || !slices.Equal(back.Services[0].ExternalIPs, []string{"203.0.113.1", "lb.example.test"}) {
		t.Fatalf("snapshot decodes to %+v, %v", back, err)
	}
	rec := AppendChange(nil, Change{Key: Key{Namespace: "shop", Name: "web"}, Service: extCluster(t).Services[0]})
	ch, err := DecodeChange(rec)
	if err != nil || !ch.Service.Equal(extCluster(t).Services[0]) {
		t.Fatalf("record %s decodes to %+v, %v", rec, ch.Service, err)
	}
	oldRec := `{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["10.96.0.20"]}}`
	if ch, err := DecodeChange([]byte(oldRec)); err != nil || ch.Service.ExternalIPs != nil {
		t.Fatalf("an older record: %+v, %v", ch.Service, err)
	}
	newer := strings.Replace(string(rec), `"external_ips":`, `"zones":["a"],"external_ips":`, 1)
	if _, err := DecodeChangeTolerant([]byte(newer)); err != nil {
		t.Fatalf("a newer record: %v", err)
	}
	if _, err := DecodeChange([]byte(`{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","external_ips":"x"}}`)); err == nil {
		t.Error("external_ips not an array: accepted")
	}
}

// BenchmarkExternal: k8s_external's lookup of a Service's external name
// and of its SRV name.
func BenchmarkExternal(b *testing.B) {
	tbl := Build(extCluster(b))
	s := &Server{Zones: []string{"cluster.local."}, TTL: 5}
	b.ReportAllocs()
	for b.Loop() {
		if svcs, _ := s.External(tbl, "web.shop.example.org.", "example.org.", dns.TypeA, false); len(svcs) != 2 {
			b.Fatal(svcs)
		}
		if svcs, _ := s.External(tbl, "_http._tcp.web.shop.example.org.", "example.org.", dns.TypeSRV, false); len(svcs) != 2 {
			b.Fatal(svcs)
		}
	}
}
