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

// proxyPolicy is the least a sidecar proxy's token needs on Consul's xDS
// server (docs/consul.md, "The xDS stream"): write on its own service, read on the
// catalog its configuration is made from.
const proxyPolicy = `service "web" { policy = "write" }
service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`

const aclHCL = `acl {
  enabled = true
  default_policy = "deny"
  tokens {
    initial_management = "root-secret"
    agent = "root-secret"
  }
}
log_level = "trace"
`

// TestVirtualConsulXDSRealConsul: source xds against a real Consul v1.16.3
// agent's gRPC port with ACLs on (default deny), as the proxy of a
// registered service (node = the sidecar's service ID) with a token of the
// proxy policy. The stream is accepted over delta ADS (which Consul
// speaks; its state-of-the-world answer is "not implemented"), Consul
// receives our ACKs (its own trace log says so) and it stays up. Consul
// 1.16 pushes no virtual_dns listener: the source says once that no
// listener carries a table, and the table from the snapshot keeps serving,
// the snapshot untouched. A token Consul does not know is refused with a
// log line that names the token's origin.
func TestVirtualConsulXDSRealConsul(t *testing.T) {
	consul := startConsulWith(t, false, aclHCL, "root-secret")
	consul.Register("web", 8080)
	tok := consul.CreateToken("web-proxy", proxyPolicy)
	grpcPort := portOf(consul.GRPC())
	snapTable := vcTable(map[string][]string{vcFull("web"): {"240.0.0.9"}})
	corefile := fmt.Sprintf(`consul.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    virtualconsul {
        source xds %s {
            node web-sidecar-proxy
            token_file token
        }
        snapshot vc-snapshot.json
    }
}
`, consul.GRPC())
	s := Start(t, corefile, Options{
		Files: map[string]string{"token": tok + "\n", "vc-snapshot.json": snapTable},
		Ports: map[int]int{grpcPort: grpcPort},
	})
	Eventually(t, 15*time.Second, func() string {
		if !strings.Contains(s.Log(), "over delta ADS") {
			return "no stream in use yet"
		}
		if s.Metric("coredns_virtualconsul_syncs_total", `source="xds"`, `result="no_table"`) < 1 {
			return "no listener response reported yet"
		}
		if !strings.Contains(consul.Log(), "got ok response from envoy proxy") {
			return "Consul has not seen an ACK"
		}
		return ""
	})
	time.Sleep(3 * time.Second) // the stream stays up
	if f := s.Metric("coredns_virtualconsul_source_failing", `source="xds"`); f != 0 || strings.Contains(s.Log(), "Source xds failing") {
		t.Fatalf("the stream failed (source_failing %v):\n%s", f, s.Log())
	}
	if e := s.Metric("coredns_virtualconsul_syncs_total", `source="xds"`, `result="error"`); e != 0 {
		t.Fatalf("%v failed syncs", e)
	}
	if strings.Contains(consul.Log(), "got error response from envoy proxy") {
		t.Fatalf("Consul saw a NACK:\n%s", consul.Log())
	}
	if n := strings.Count(s.Log(), "carries no table"); n != 1 {
		t.Fatalf("%d 'carries no table' log lines, want 1:\n%s", n, s.Log())
	}
	expectAnswers(t, s.DNS(), "web.virtual.consul.", dns.TypeA, "240.0.0.9")
	if b, _ := os.ReadFile(filepath.Join(s.Dir, "vc-snapshot.json")); string(b) != snapTable {
		t.Fatalf("the snapshot changed: %s", b)
	}
	if e := s.Metric("coredns_virtualconsul_entries"); e != 1 {
		t.Fatalf("entries = %v, want the snapshot's 1", e)
	}

	// A token Consul does not know: refused, said so, no protocol fall-back.
	bad := Start(t, corefile, Options{
		Files: map[string]string{"token": "6f3bb1b4-35a3-4a6c-9b1e-2f6a8c1d5e7f\n"},
		Ports: map[int]int{grpcPort: grpcPort}, WaitDNS: true,
	})
	Eventually(t, 10*time.Second, func() string {
		if !strings.Contains(bad.Log(), "Source xds failing") {
			return "no failing line"
		}
		return ""
	})
	for _, l := range strings.Split(bad.Log(), "\n") {
		if strings.Contains(l, "Source xds failing") {
			t.Log(l)
			if !strings.Contains(l, "the server refused the token from token_file") || !strings.Contains(l, "ACL not found") {
				t.Fatalf("the log line does not say the token was refused: %s", l)
			}
		}
	}
	if strings.Contains(bad.Log(), "refuses delta") {
		t.Fatalf("a refused token was taken for a refused protocol:\n%s", bad.Log())
	}
}

// TestVirtualConsulXDSLargeListener: a listener of 200,000 names (~14 MB,
// over gRPC's 4 MiB default) syncs under the default max_message_size, over
// delta and state-of-the-world; with max_message_size 4m it fails with a
// line that says the message is too large, and serves nothing it could not
// read.
func TestVirtualConsulXDSLargeListener(t *testing.T) {
	x := startXDS(t, "sidecar-1")
	domains := make(map[string][]string, 200000)
	for i := range 200000 {
		domains[vcFull(fmt.Sprintf("s%d", i))] = []string{fmt.Sprintf("240.%d.%d.%d", i>>16, (i>>8)&255, i&255)}
	}
	x.Set("v1", domains)
	for _, proto := range []string{"delta", "sotw"} {
		t.Run(proto, func(t *testing.T) {
			corefile := strings.Replace(vcXDSCorefile, "cluster web", "cluster web\n            protocol "+proto, 1)
			s := Start(t, corefile, Options{Ports: map[int]int{18000: x.port}, WaitDNS: true})
			Eventually(t, 30*time.Second, func() string {
				if n := s.Metric("coredns_virtualconsul_entries"); n != 200000 {
					return fmt.Sprintf("entries = %v", n)
				}
				return ""
			})
			expectAnswers(t, s.DNS(), "s199999.virtual.consul.", dns.TypeA, "240.3.13.63")
		})
	}
	small := strings.Replace(vcXDSCorefile, "cluster web", "cluster web\n            max_message_size 4m", 1)
	s := Start(t, small, Options{Ports: map[int]int{18000: x.port}, WaitDNS: true})
	Eventually(t, 10*time.Second, func() string {
		if !strings.Contains(s.Log(), "Source xds failing") {
			return "no failing line"
		}
		return ""
	})
	if !strings.Contains(s.Log(), "larger than max") {
		t.Fatalf("the failure does not say the message is too large:\n%s", s.Log())
	}
	if n := s.Metric("coredns_virtualconsul_entries"); n != 0 {
		t.Fatalf("entries = %v with a limit below the listener", n)
	}
}
