package test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestEndpointsvcExternal: a stock Corefile's k8s_external, metadata,
// log and `autopath @kubernetes` lines, kept beside an endpointsvc block
// (schema kubernetes) instead of a kubernetes block: the binary starts,
// k8s_external answers the Services' external IPs and LoadBalancer
// ingresses (and with headless the endpoints) from endpointsvc's table,
// and the log line reads the kubernetes plugin's metadata keys.
func TestEndpointsvcExternal(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "cluster.json")
	if err := os.WriteFile(snap, []byte(`{"format":"meshdns-k8sdns/1","namespaces":["shop"],
 "services":[
  {"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["10.96.0.20"],"ports":[{"name":"http","protocol":"TCP","port":80}],
   "external_ips":["203.0.113.10","2001:db8::10"]},
  {"namespace":"shop","name":"db","kind":"Headless","ports":[{"name":"pg","protocol":"TCP","port":5432}]}],
 "slices":[
  {"namespace":"shop","name":"db-x","service":"db","type":"IPv4","ports":[{"name":"pg","protocol":"TCP","port":5432}],
   "addresses":[["10.244.1.6"]],"hostnames":["db-0"],"conditions":["yy-"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := Start(t, `cluster.local:1053 example.org:1053 {
    bind 127.0.0.1
    metadata
    log . "{/kubernetes/kind}/{/kubernetes/namespace}/{/kubernetes/service} {name}"
    autopath @kubernetes
    endpointsvc cluster.local in-addr.arpa ip6.arpa {
        source file `+snap+`
        schema kubernetes
        ttl 30
    }
    k8s_external example.org {
        headless
    }
}
`)
	for _, c := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"web.shop.example.org.", dns.TypeA, []string{"203.0.113.10"}},
		{"web.shop.example.org.", dns.TypeAAAA, []string{"2001:db8::10"}},
		{"_http._tcp.web.shop.example.org.", dns.TypeSRV, []string{"0 50 80 web.shop.example.org."}}, // one per external IP, one target: k8s_external keeps the first
		{"db-0.db.shop.example.org.", dns.TypeA, []string{"10.244.1.6"}},
		{"db.shop.example.org.", dns.TypeA, []string{"10.244.1.6"}},
		{"web.shop.svc.cluster.local.", dns.TypeA, []string{"10.96.0.20"}},
	} {
		m := Query(t, s.DNS(), c.name, c.qtype, "udp")
		if got := Rdata(m); m.Rcode != dns.RcodeSuccess || !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %s %q, want %q", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[m.Rcode], got, c.want)
		}
	}
	if m := Query(t, s.DNS(), "gone.shop.example.org.", dns.TypeA, "udp"); m.Rcode != dns.RcodeNameError {
		t.Errorf("gone.shop.example.org.: %s", dns.RcodeToString[m.Rcode])
	}
	Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(s.Log(), "svc/shop/web web.shop.svc.cluster.local.") {
			return "the log line lacks the metadata values:\n" + s.Log()
		}
		return ""
	})
}
