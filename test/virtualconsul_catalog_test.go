package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// catalogPolicy is the least the consul source's token needs (docs/consul.md,
// "ACL policy"): read on the services and on the nodes they run on. No
// agent:read (the datacenter comes from the catalog entries).
const catalogPolicy = `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`

// TestVirtualConsulCatalogMinimalToken: with ACLs on (default deny) a
// token of the documented minimal policy syncs the table; a second
// instance of a service, which leaves every VIP the same, does not
// rebuild, rewrite the snapshot or log a sync; on Consul CE the source
// says once that it follows the default namespace.
func TestVirtualConsulCatalogMinimalToken(t *testing.T) {
	consul := startConsulWith(t, false, strings.Replace(aclHCL, "log_level = \"trace\"\n", "", 1), "root-secret")
	consul.Register("web", 8080)
	consul.Register("api", 8081)
	tok := consul.CreateToken("meshdns-catalog", catalogPolicy)
	corefile := fmt.Sprintf(vcConsulCorefile, " {\n            token_file token\n        }")
	s := Start(t, corefile, Options{Files: map[string]string{"token": tok + "\n"},
		Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	Eventually(t, 10*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_entries"); n != 2 {
			return fmt.Sprintf("entries = %v, want 2", n)
		}
		return ""
	})
	web := consul.vip("web")
	expectAnswers(t, s.DNS(), "web.virtual.consul.", dns.TypeA, web)
	if n := strings.Count(s.Log(), "is Consul CE (no namespaces)"); n != 1 {
		t.Fatalf("%d lines about namespaces on CE, want 1:\n%s", n, s.Log())
	}

	snap := filepath.Join(s.Dir, "vc-snapshot.json")
	time.Sleep(1500 * time.Millisecond) // the snapshot writer's pace
	before, err := os.Stat(snap)
	if err != nil {
		t.Fatal(err)
	}
	oks := s.Metric("coredns_virtualconsul_syncs_total", `source="consul"`, `result="ok"`)
	synced := strings.Count(s.Log(), "Synced")
	// A second instance of web with its own sidecar: the same VIP.
	consul.put("/v1/agent/service/register", `{"ID": "web-2", "Name": "web", "Port": 8090, "Connect": {"SidecarService": {}}}`)
	Eventually(t, 10*time.Second, func() string {
		var proxies []struct{ ServiceID string }
		if err := consul.get("/v1/catalog/service/web-sidecar-proxy", &proxies); err != nil || len(proxies) != 2 {
			return fmt.Sprintf("web-sidecar-proxy instances %v (%v)", proxies, err)
		}
		return ""
	})
	time.Sleep(2 * time.Second) // a round and a snapshot interval
	if n := s.Metric("coredns_virtualconsul_syncs_total", `source="consul"`, `result="ok"`); n != oks {
		t.Fatalf("an instance more rebuilt the table: ok syncs %v → %v", oks, n)
	}
	if n := strings.Count(s.Log(), "Synced"); n != synced {
		t.Fatalf("an instance more logged a sync:\n%s", s.Log())
	}
	if after, err := os.Stat(snap); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("an instance more rewrote the snapshot (%v → %v, %v)", before.ModTime(), after.ModTime(), err)
	}
	expectAnswers(t, s.DNS(), "web.virtual.consul.", dns.TypeA, web)
	if strings.Contains(s.Log(), "failing") {
		t.Fatalf("the minimal token failed somewhere:\n%s", s.Log())
	}
}
