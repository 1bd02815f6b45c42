package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestVirtualConsulCatalogACLFiltered: on a real agent with ACLs on, a
// token whose policy loses sight of part of the catalog makes every round
// fail (acl_filtered) instead of serving the smaller table: the last good
// table keeps answering the hidden service; a policy that sees everything
// again recovers it. The agent is in dc2 and the Corefile names no
// datacenter: short names expand with the agent's.
func TestVirtualConsulCatalogACLFiltered(t *testing.T) {
	hcl := strings.Replace(aclHCL, "log_level = \"trace\"\n", "", 1) + "datacenter = \"dc2\"\n"
	consul := startConsulWith(t, false, hcl, "root-secret")
	consul.Register("web", 8080)
	consul.Register("api", 8081)
	var p struct{ ID string }
	consul.putJSON("/v1/acl/policy", fmt.Sprintf(`{"Name": "meshdns", "Rules": %q}`, catalogPolicy), &p)
	var tok struct{ SecretID string }
	consul.putJSON("/v1/acl/token", fmt.Sprintf(`{"Description": "meshdns", "Policies": [{"ID": %q}]}`, p.ID), &tok)
	corefile := fmt.Sprintf(vcConsulCorefile, " {\n            token_file token\n        }")
	s := Start(t, corefile, Options{Files: map[string]string{"token": tok.SecretID + "\n"},
		Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	api := consul.vip("api")
	expectAnswers(t, s.DNS(), "api.virtual.consul.", dns.TypeA, api)
	expectAnswers(t, s.DNS(), "api.virtual.dc2.dc.consul.", dns.TypeA, api)

	// The policy loses api: the catalog the token sees is filtered.
	consul.putJSON("/v1/acl/policy/"+p.ID, fmt.Sprintf(`{"Name": "meshdns", "Rules": %q}`,
		`service "web-sidecar-proxy" { policy = "read" }
service "web" { policy = "read" }
node_prefix "" { policy = "read" }`), &p)
	consul.put("/v1/agent/service/register", `{"Name": "nudge", "Port": 9}`) // the catalog moves: a round runs
	Eventually(t, 15*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_source_failing_reason", `source="consul"`, `reason="acl_filtered"`); n != 1 {
			return fmt.Sprintf("source_failing_reason{acl_filtered} = %v, want 1", n)
		}
		return ""
	})
	if n := s.Metric("coredns_virtualconsul_entries"); n != 2 {
		t.Fatalf("entries = %v while the token sees part of the catalog, want the last good 2", n)
	}
	expectAnswers(t, s.DNS(), "api.virtual.consul.", dns.TypeA, api)

	// The policy sees everything again: recovered.
	consul.putJSON("/v1/acl/policy/"+p.ID, fmt.Sprintf(`{"Name": "meshdns", "Rules": %q}`, catalogPolicy), &p)
	Eventually(t, 15*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_source_failing", `source="consul"`); n != 0 {
			return "source_failing still 1"
		}
		if n := s.Metric("coredns_virtualconsul_source_failing_reason", `source="consul"`, `reason="acl_filtered"`); n != 0 {
			return fmt.Sprintf("source_failing_reason{acl_filtered} = %v after the recovery", n)
		}
		return ""
	})
	expectAnswers(t, s.DNS(), "api.virtual.consul.", dns.TypeA, api)
	if !strings.Contains(s.Log(), "X-Consul-Results-Filtered-By-ACLs") {
		t.Fatalf("the log does not say why the source failed:\n%s", s.Log())
	}
}
