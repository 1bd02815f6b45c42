package test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// pluginsCorefile serves meshdns's three plugins from the demo data, and
// none of the stock plugins that start goroutines of their own (health,
// hosts, forward: CoreDNS leaves those of a discarded instance running, in
// stock CoreDNS as here), so that the goroutine count shows ours alone.
const pluginsCorefile = `.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:18181
    prometheus 127.0.0.1:19153
    whoami
}

consul.:1053 {
    bind 127.0.0.1
    virtualconsul {
        source file data/virtualconsul.json
    }
}

svc.orch.:1053 {
    bind 127.0.0.1
    endpointsvc {
        source file data/endpointsvc-state.json
    }
}

weave.local.:1053 {
    bind 127.0.0.1
    mdnsfallback {
        api 127.0.0.1:6785
        snapshot data/weave.records.json
    }
}
`

// demoServer runs corefile on a copy of the demo data (corefile/data).
func demoServer(t *testing.T, corefile string) *Server {
	t.Helper()
	files := map[string]string{}
	dir := filepath.Join(repoRoot, "corefile", "data")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files["data/"+e.Name()] = string(b)
	}
	return Start(t, corefile, Options{Files: files})
}

// demoAnswers asks one name of each plugin and fails unless all answer.
func demoAnswers(t *testing.T, s *Server) {
	t.Helper()
	for _, q := range []struct{ name, want string }{
		{"web.virtual.consul.", "240.0.0.1"},
		{"atlas.svc.orch.", "192.0.2.10"},
		{"web.weave.local.", "10.32.0.2"},
	} {
		if got := Rdata(Query(t, s.DNS(), q.name, dns.TypeA, "udp")); strings.Join(got, ",") != q.want {
			t.Fatalf("%s = %v, want %s", q.name, got, q.want)
		}
	}
}

// TestReloadOntoBusyPortLeaksNothing: five reloads that fail because the
// new Corefile asks for a port another process holds leave the old
// instance answering - every plugin, mdnsfallback's record API too - and
// the goroutine count where it was (before plugin/pkg/pending, each failed
// reload left the new instances' sources, watchers and sockets running).
func TestReloadOntoBusyPortLeaksNothing(t *testing.T) {
	s := demoServer(t, pluginsCorefile)
	demoAnswers(t, s)
	time.Sleep(time.Second) // let start-up goroutines settle
	base := s.Metric("go_goroutines")

	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.LocalAddr().(*net.UDPAddr).Port
	good := s.Corefile
	bad := good + fmt.Sprintf("\n.:%d {\n    bind 127.0.0.1\n    whoami\n}\n", port)
	conf := filepath.Join(s.Dir, "Corefile.e2e")
	if err := os.WriteFile(conf, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	const reloads = 5
	for i := 1; i <= reloads; i++ {
		s.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if n := strings.Count(s.Log(), "Restart failed"); n < i {
				return fmt.Sprintf("%d failed reloads logged, want %d", n, i)
			}
			return ""
		})
		demoAnswers(t, s)
	}
	// the old mdnsfallback took its record API back
	req, _ := http.NewRequest(http.MethodPut, "http://"+s.Addr(6785)+"/name/demo/10.32.0.9", strings.NewReader("domain=late.weave.local"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("record API after the failed reloads: %v", err)
	}
	resp.Body.Close()
	if got := Rdata(Query(t, s.DNS(), "late.weave.local.", dns.TypeA, "udp")); strings.Join(got, ",") != "10.32.0.9" {
		t.Fatalf("a record put after the failed reloads: %v (API status %s)", got, resp.Status)
	}
	var after float64
	Eventually(t, 5*time.Second, func() string {
		if after = s.Metric("go_goroutines"); after > base+2 {
			return fmt.Sprintf("goroutines %v after %d failed reloads, %v before", after, reloads, base)
		}
		return ""
	})
	t.Logf("goroutines: %v before, %v after %d failed reloads", base, after, reloads)

	// and a good reload afterwards still works
	if err := os.WriteFile(conf, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGUSR1)
	Eventually(t, 10*time.Second, func() string {
		if !strings.Contains(s.Log(), "Reloading complete") {
			return "no successful reload yet"
		}
		return ""
	})
	demoAnswers(t, s)
}

// TestReloadAwayAndBackServesNewest: a reload to a block with other zones
// (another carry key) and back, the source gone before the way back,
// answers the newest state - the one the other block synced and wrote to
// the snapshot - and not the table the first instance handed over before
// the first reload (which nothing took, and which the old carry store kept
// for the life of the process and preferred to the snapshot).
func TestReloadAwayAndBackServesNewest(t *testing.T) {
	for _, c := range []struct {
		plugin, stanzaA, stanzaB, source, name, old, newer string
	}{
		{"endpointsvc",
			"svc.orch.:1053 {\n    bind 127.0.0.1\n    endpointsvc {\n        source file data/state.json 200ms\n        snapshot data/snap.json\n    }\n}\n",
			"svc.orch.:1053 other.orch.:1053 {\n    bind 127.0.0.1\n    endpointsvc svc.orch other.orch {\n        source file data/state.json 200ms\n        snapshot data/snap.json\n    }\n}\n",
			"endpointsvc-state.json", "atlas.svc.orch.", "192.0.2.10", "192.0.2.77"},
		{"virtualconsul",
			"consul.:1053 {\n    bind 127.0.0.1\n    virtualconsul {\n        source file data/state.json 200ms\n        snapshot data/snap.json\n    }\n}\n",
			"consul.:1053 other.consul.:1053 {\n    bind 127.0.0.1\n    virtualconsul {\n        source file data/state.json 200ms\n        snapshot data/snap.json\n    }\n}\n",
			"virtualconsul.json", "web.virtual.consul.", "240.0.0.1", "240.0.0.77"},
	} {
		t.Run(c.plugin, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(repoRoot, "corefile", "data", c.source))
			if err != nil {
				t.Fatal(err)
			}
			head := ".:1053 {\n    bind 127.0.0.1\n    ready 127.0.0.1:18181\n    whoami\n}\n"
			s := Start(t, head+c.stanzaA, Options{Files: map[string]string{"data/state.json": string(src)}})
			state := filepath.Join(s.Dir, "data", "state.json")
			answers := func(want string) func() string {
				return func() string {
					if got := Rdata(Query(t, s.DNS(), c.name, dns.TypeA, "udp")); strings.Join(got, ",") != want {
						return fmt.Sprintf("%s = %v, want %s", c.name, got, want)
					}
					return ""
				}
			}
			Eventually(t, 5*time.Second, answers(c.old))
			reloadTo(t, s, head+c.stanzaB, 1) // A hands its table over under A's key; B does not take it
			Eventually(t, 5*time.Second, answers(c.old))
			newer := strings.Replace(string(src), c.old, c.newer, 1)
			if err := os.WriteFile(state, []byte(newer), 0o644); err != nil {
				t.Fatal(err)
			}
			Eventually(t, 5*time.Second, answers(c.newer))
			time.Sleep(1500 * time.Millisecond) // the snapshot follows within a second
			if err := os.Remove(state); err != nil {
				t.Fatal(err)
			}
			reloadTo(t, s, head+c.stanzaA, 2) // back to A's key, the source gone
			Eventually(t, 5*time.Second, answers(c.newer))
		})
	}
}

// TestReloadAwayAndBackServesNewestRecords: the same for mdnsfallback's
// record database: a record put through the API while the other block
// serves is there after the reload back.
func TestReloadAwayAndBackServesNewestRecords(t *testing.T) {
	head := ".:1053 {\n    bind 127.0.0.1\n    ready 127.0.0.1:18181\n    whoami\n}\n"
	stanza := "    bind 127.0.0.1\n    mdnsfallback {\n        api 127.0.0.1:6785\n        snapshot data/records.json\n    }\n}\n"
	a := "weave.local.:1053 {\n" + stanza
	b := "weave.local.:1053 other.local.:1053 {\n" + strings.Replace(stanza, "mdnsfallback {", "mdnsfallback weave.local other.local {", 1)
	s := Start(t, head+a, Options{Files: map[string]string{"data/.keep": ""}})
	put := func(name, ip string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.Addr(6785)+"/name/demo/"+ip, strings.NewReader("domain="+name))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	has := func(name, want string) func() string {
		return func() string {
			if got := Rdata(Query(t, s.DNS(), name, dns.TypeA, "udp")); strings.Join(got, ",") != want {
				return fmt.Sprintf("%s = %v, want %q", name, got, want)
			}
			return ""
		}
	}
	put("one.weave.local", "10.32.0.1")
	Eventually(t, 5*time.Second, has("one.weave.local.", "10.32.0.1"))
	reloadTo(t, s, head+b, 1)
	Eventually(t, 5*time.Second, has("one.weave.local.", "10.32.0.1"))
	put("two.weave.local", "10.32.0.2")
	Eventually(t, 5*time.Second, has("two.weave.local.", "10.32.0.2"))
	time.Sleep(1500 * time.Millisecond) // the snapshot follows
	reloadTo(t, s, head+a, 2)
	Eventually(t, 5*time.Second, has("two.weave.local.", "10.32.0.2"))
}

// TestGaugesPerServer: two blocks serving the same zones on other ports
// keep their own gauges, labelled by server as CoreDNS's own metrics are
// (before, both wrote one series labelled by the zone alone).
func TestGaugesPerServer(t *testing.T) {
	files := map[string]string{
		"data/one.json":      `{"services":[{"id":"s1","name":"solo","status":"active"}],"tasks":[],"nodes":[]}`,
		"data/one-vc.json":   `[{"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.9"]}}}]`,
		"data/.keep":         "",
		"data/records1.json": "",
	}
	for _, f := range []string{"endpointsvc-state.json", "virtualconsul.json", "weave.records.json"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "corefile", "data", f))
		if err != nil {
			t.Fatal(err)
		}
		files["data/"+f] = string(b)
	}
	delete(files, "data/records1.json")
	var demoVC []json.RawMessage // the demo table's entries, one VIP each
	if err := json.Unmarshal([]byte(files["data/virtualconsul.json"]), &demoVC); err != nil {
		t.Fatal(err)
	}
	block := func(port int, stanza string) string {
		return fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n%s}\n", port, stanza)
	}
	cf := ".:1053 {\n    bind 127.0.0.1\n    ready 127.0.0.1:18181\n    prometheus 127.0.0.1:19153\n    whoami\n}\n" +
		block(2053, "    endpointsvc svc.orch {\n        source file data/endpointsvc-state.json\n    }\n    virtualconsul {\n        source file data/virtualconsul.json\n    }\n    mdnsfallback {\n        api 127.0.0.1:6785\n        snapshot data/weave.records.json\n    }\n") +
		block(3053, "    endpointsvc svc.orch {\n        source file data/one.json\n    }\n    virtualconsul {\n        source file data/one-vc.json\n    }\n    mdnsfallback {\n        api 127.0.0.1:6786\n    }\n")
	s := Start(t, cf, Options{Files: files})
	a, b := fmt.Sprintf(`server="dns://127.0.0.1:%d"`, s.Port(2053)), fmt.Sprintf(`server="dns://127.0.0.1:%d"`, s.Port(3053))
	for _, c := range []struct {
		metric string
		a, b   float64
	}{
		{"coredns_endpointsvc_services", 3, 1},
		{"coredns_virtualconsul_entries", float64(len(demoVC)), 1},
		{"coredns_mdnsfallback_records", 1, 0},
	} {
		Eventually(t, 5*time.Second, func() string {
			m := s.Metrics()
			if x, y := metricValue(m, c.metric, a), metricValue(m, c.metric, b); x != c.a || y != c.b {
				return fmt.Sprintf("%s: %v on the first block, %v on the second; want %v, %v\n%s", c.metric, x, y, c.a, c.b, grepLines(m, c.metric))
			}
			return ""
		})
	}
}

// grepLines are the lines of text that start with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// reloadTo writes corefile (its ports mapped as at the start) as s's
// Corefile, reloads with SIGUSR1, and waits until n reloads completed.
func reloadTo(t *testing.T, s *Server, corefile string, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir, "Corefile.e2e"), []byte(s.rewrite(corefile)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGUSR1)
	Eventually(t, 10*time.Second, func() string {
		if got := strings.Count(s.Log(), "Reloading complete"); got < n {
			return fmt.Sprintf("%d reloads complete, want %d", got, n)
		}
		return ""
	})
}
