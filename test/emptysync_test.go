package test

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miekg/dns"
)

// The empty-sync rule (the plugin READMEs, `snapshot` under Syntax), tested per source with its real
// peer: a source that turns empty is served at once, but the snapshot keeps
// the last non-empty state until the empty result has held for empty_grace
// (4 s here), with one log line and the snapshot_empty_held gauge; then the
// snapshot follows.

const testGrace = 4 * time.Second

// emptyHeld checks the rule on s, whose source just turned empty: gone
// says "" once the name is no longer served; snap is the snapshot file,
// which must keep holding name until the grace is over.
func emptyHeld(t *testing.T, s *Server, plugin, snap, name string, gone func() string) {
	t.Helper()
	start := time.Now()
	held := "coredns_" + plugin + "_snapshot_empty_held"
	Eventually(t, 10*time.Second, func() string {
		if msg := gone(); msg != "" {
			return "the empty state is not served: " + msg
		}
		if v := s.Metric(held); v != 1 {
			return fmt.Sprintf("%s = %v, want 1", held, v)
		}
		return ""
	})
	if b, err := os.ReadFile(snap); err != nil || !strings.Contains(string(b), name) {
		t.Fatalf("during the hold the snapshot lost %s (%v): %.300s", name, err, b)
	}
	if n := strings.Count(s.Log(), "returned no entries"); n != 1 {
		t.Fatalf("%d 'returned no entries' log lines, want 1:\n%s", n, s.Log())
	}
	Eventually(t, testGrace+10*time.Second, func() string {
		if b, _ := os.ReadFile(snap); strings.Contains(string(b), name) {
			return "the snapshot still holds " + name
		}
		if v := s.Metric(held); v != 0 {
			return fmt.Sprintf("%s = %v after the grace, want 0", held, v)
		}
		return ""
	})
	if took := time.Since(start); took < testGrace-time.Second {
		t.Fatalf("the empty state reached the snapshot after %v, before the %v grace", took, testGrace)
	}
	if !strings.Contains(s.Log(), "now written empty") {
		t.Fatalf("no log line for the end of the hold:\n%s", s.Log())
	}
}

// snapshotHolds waits until the snapshot file holds want.
func snapshotHolds(t *testing.T, snap, want string, limit time.Duration) {
	t.Helper()
	Eventually(t, limit, func() string {
		if b, _ := os.ReadFile(snap); !strings.Contains(string(b), want) {
			return "no snapshot with " + want + " yet"
		}
		return ""
	})
}

// gone returns a check that name/qtype answers rcode.
func gone(t *testing.T, s *Server, name string, qtype uint16, want string) func() string {
	return func() string {
		if got := answers(t, s.DNS(), name, qtype); strings.Join(got, ",") != want {
			return fmt.Sprintf("%s = %v, want %s", name, got, want)
		}
		return ""
	}
}

// TestEmptySyncVirtualConsulFile: the file source turns empty; a restart
// during the hold with the file gone answers from the snapshot (the
// reported failure: an emptied table, then a restart with the source down,
// answered SERVFAIL); after the grace the snapshot follows the source.
func TestEmptySyncVirtualConsulFile(t *testing.T) {
	consul := startConsulStandIn(t)
	web := map[string][]string{vcFull("web"): {"240.0.0.9"}}
	s := Start(t, strings.Replace(vcCorefile, "ttl 7s", "ttl 7s\n        empty_grace 4s", 1), Options{
		Files: map[string]string{"table.json": vcTable(web)},
		Ports: map[int]int{5399: consul.Port(1053)},
	})
	snap, table := filepath.Join(s.Dir, "vc-snapshot.json"), filepath.Join(s.Dir, "table.json")
	expectAnswers(t, s.DNS(), "web.virtual.consul.", dns.TypeA, "240.0.0.9")
	snapshotHolds(t, snap, "web.virtual", 5*time.Second)

	writeAtomic(t, table, "[]\n")
	// the stand-in Consul servers answer the miss from their own zone
	webGone := gone(t, s, "web.virtual.consul.", dns.TypeA, "10.9.9.9")
	Eventually(t, 10*time.Second, webGone)
	Eventually(t, 5*time.Second, func() string {
		if v := s.Metric("coredns_virtualconsul_snapshot_empty_held"); v != 1 {
			return fmt.Sprintf("held = %v", v)
		}
		return ""
	})
	if b, _ := os.ReadFile(snap); !strings.Contains(string(b), "web.virtual") {
		t.Fatalf("the empty table replaced the snapshot: %s", b)
	}

	// restart with the source gone: the snapshot's table answers
	s.Stop()
	if err := os.Remove(table); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	expectAnswers(t, s.DNS(), "web.virtual.consul.", dns.TypeA, "240.0.0.9")

	// the source comes back, still empty: served, and the snapshot follows
	// after the grace
	writeAtomic(t, table, "[]\n")
	emptyHeld(t, s, "virtualconsul", snap, "web.virtual", webGone)
}

// TestEmptySyncVirtualConsulConsul: the real Consul agent's catalog loses
// its only mesh service.
func TestEmptySyncVirtualConsulConsul(t *testing.T) {
	consul := startConsul(t, false)
	consul.Register("web", 8080)
	cf := strings.Replace(fmt.Sprintf(vcConsulCorefile, ""), "snapshot vc-snapshot.json", "snapshot vc-snapshot.json\n        empty_grace 4s", 1)
	s := Start(t, cf, Options{Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	snap := filepath.Join(s.Dir, "vc-snapshot.json")
	snapshotHolds(t, snap, "web.virtual", 10*time.Second)
	consul.Deregister("web")
	emptyHeld(t, s, "virtualconsul", snap, "web.virtual", func() string {
		if n := s.Metric("coredns_virtualconsul_entries"); n != 0 {
			return fmt.Sprintf("entries = %v, want 0", n)
		}
		return ""
	})
}

// TestEmptySyncVirtualConsulXDS: a go-control-plane server pushes a
// virtual_dns listener with no names.
func TestEmptySyncVirtualConsulXDS(t *testing.T) {
	x := startXDS(t, "web-sidecar-proxy")
	x.Set("1", map[string][]string{vcFull("web"): {"240.0.0.9"}})
	s := Start(t, fmt.Sprintf(`consul.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    virtualconsul {
        source xds %s {
            node web-sidecar-proxy
        }
        snapshot vc-snapshot.json
        empty_grace 4s
    }
}
`, x.Addr()), Options{Ports: map[int]int{x.port: x.port}})
	snap := filepath.Join(s.Dir, "vc-snapshot.json")
	expectAnswers(t, s.DNS(), "web.virtual.consul.", dns.TypeA, "240.0.0.9")
	snapshotHolds(t, snap, "web.virtual", 5*time.Second)
	x.Set("2", map[string][]string{})
	emptyHeld(t, s, "virtualconsul", snap, "web.virtual", gone(t, s, "web.virtual.consul.", dns.TypeA, "[SERVFAIL]"))
}

// TestEmptySyncEndpointsvcFile: the state file turns empty.
func TestEmptySyncEndpointsvcFile(t *testing.T) {
	full := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{{"t-1", "atlas", "node-1", "running", "healthy", 31081}})
	s := Start(t, esvcCorefile("source file state.json 100ms\nsnapshot snap.json\nempty_grace 4s"),
		Options{Files: map[string]string{"state.json": full}})
	snap := filepath.Join(s.Dir, "snap.json")
	expectAnswers(t, s.DNS(), "atlas.svc.orch.", dns.TypeA, "192.0.2.10")
	snapshotHolds(t, snap, "atlas", 5*time.Second)
	writeAtomic(t, filepath.Join(s.Dir, "state.json"), esvcState(nil, nil, nil))
	emptyHeld(t, s, "endpointsvc", snap, "atlas", gone(t, s, "atlas.svc.orch.", dns.TypeA, "[NXDOMAIN]"))
}

// TestEmptySyncEndpointsvcOrch: the orchestrator's API answers an empty
// state (as during its own restart).
func TestEmptySyncEndpointsvcOrch(t *testing.T) {
	full := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{{"t-1", "atlas", "node-1", "running", "healthy", 31081}})
	orch := &fakeOrch{state: full, version: 1, hits: map[string]int{}}
	ts := httptest.NewServer(orch)
	defer ts.Close()
	apiPort := ts.Listener.Addr().(*net.TCPAddr).Port
	s := Start(t, esvcCorefile("source orch "+ts.URL+"/v1/state 100ms\nsnapshot snap.json\nempty_grace 4s"),
		Options{Ports: map[int]int{apiPort: apiPort}})
	snap := filepath.Join(s.Dir, "snap.json")
	expectAnswers(t, s.DNS(), "atlas.svc.orch.", dns.TypeA, "192.0.2.10")
	snapshotHolds(t, snap, "atlas", 5*time.Second)
	orch.set("", esvcState(nil, nil, nil))
	emptyHeld(t, s, "endpointsvc", snap, "atlas", gone(t, s, "atlas.svc.orch.", dns.TypeA, "[NXDOMAIN]"))
}

// TestEmptySyncEndpointsvcKubernetes: the real API server's followed
// namespace loses its only Service.
func TestEmptySyncEndpointsvcKubernetes(t *testing.T) {
	k := startKubeAPI(t)
	createNS(t, k, "e2e")
	createNode(t, k, "n1", "192.0.2.1", corev1.ConditionTrue)
	createService(t, k, "e2e", "web", corev1.ServiceTypeNodePort, nil)
	createSlice(t, k, "e2e", "web-1", "web", discoveryv1.AddressTypeIPv4, endpoint("10.244.1.1", "n1", true, false))
	s := Start(t, `svc.cluster.local:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    endpointsvc svc.cluster.local {
        source kubernetes `+k.Kubeconfig+`
        namespaces e2e
        snapshot snapshot.json
        empty_grace 4s
    }
}
`)
	snap := filepath.Join(s.Dir, "snapshot.json")
	within(t, 5*time.Second, s.DNS(), "web.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1")
	snapshotHolds(t, snap, `"web"`, 5*time.Second)
	if err := k.Client.CoreV1().Services("e2e").Delete(ctxT(t), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	emptyHeld(t, s, "endpointsvc", snap, `"web"`, gone(t, s, "web.e2e.svc.cluster.local.", dns.TypeA, "[NXDOMAIN]"))
}
