package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// answerRE is the record dig and kdig print for the mixed-case question.
var (
	answerRE     = regexp.MustCompile(`(?m)^WeB\.ViRtUaL\.CoNsUl\.\s+7\s+IN\s+A\s+240\.0\.0\.1\s*$`)
	answerFoldRE = regexp.MustCompile(`(?mi)^WeB\.ViRtUaL\.CoNsUl\.\s+7\s+IN\s+A\s+240\.0\.0\.1\s*$`)
)

// demoVC is the table most virtualconsul tests start with.
var demoVC = map[string][]string{
	vcFull("web"): {"240.0.0.1"},
	"api.virtual.team.ns.default.ap.dc1.dc.consul": {"240.0.0.2"},
	"db.virtual.default.ns.part.ap.dc2.dc.consul":  {"240.0.0.3"},
	vcFull("amb"):           {"240.0.0.4", "240.0.0.5"}, // a local and a peered VIP
	vcFull("pay"):           {"240.0.0.6"},
	"grpc." + vcFull("pay"): {"240.0.0.7"},
	vcFull("v6"):            {"fd00::6"},
}

// TestVirtualConsulAnswers drives the real binary with dig and kdig over UDP
// and TCP: hits with short-name expansion, the rewrite back to the asked
// name, letter case, NODATA, and every name that must reach the servers.
func TestVirtualConsulAnswers(t *testing.T) {
	consul := startConsulStandIn(t)
	s := startVirtualConsul(t, consul, map[string]string{"table.json": vcTable(demoVC)}, false)
	addr := s.DNS()

	// Hits: every short form expands to the full key.
	for name, want := range map[string]string{
		"web.virtual.consul":                              "240.0.0.1",
		"web.virtual.default.ns.consul":                   "240.0.0.1",
		"web.virtual.default.ns.default.ap.consul":        "240.0.0.1",
		"web.virtual.dc1.dc.consul":                       "240.0.0.1",
		"web.virtual.default.ns.default.ap.dc1.dc.consul": "240.0.0.1",
		"web.virtual.consul-alt":                          "240.0.0.1", // alt domain, same key
		"api.virtual.team.ns.consul":                      "240.0.0.2",
		"db.virtual.part.ap.dc2.dc.consul":                "240.0.0.3",
		"pay.virtual.consul":                              "240.0.0.6",
	} {
		wantShort(t, addr, name, "A", want)
	}
	wantShort(t, addr, "v6.virtual.consul", "AAAA", "fd00::6")
	// A named port answers its own entry when the table has one, else its
	// service's VIP (what Consul's DNS answers for it).
	wantShort(t, addr, "grpc.pay.virtual.consul", "A", "240.0.0.7")
	wantShort(t, addr, "http.pay.virtual.consul", "A", "240.0.0.6")

	// The answer carries the name exactly as asked, letter case included.
	for _, c := range clients {
		args := []string{"+noall", "+answer", "WeB.ViRtUaL.CoNsUl", "A"}
		if c.tcp != "" {
			args = append(args, c.tcp)
		}
		var out string
		if strings.HasPrefix(c.name, "dig") {
			out = Dig(t, addr, args...)
		} else {
			out = Kdig(t, addr, args...)
		}
		re := answerRE
		if !strings.HasPrefix(c.name, "dig") {
			re = answerFoldRE // kdig lowercases the name it sends
		}
		if !re.MatchString(out) {
			t.Errorf("%s: answer not under the asked name with TTL 7:\n%s", c.name, out)
		}
	}

	for _, proto := range []string{"udp", "tcp"} {
		r := Query(t, addr, "wEB.VIRTUAL.consul.", dns.TypeA, proto)
		if len(r.Answer) != 1 || r.Answer[0].Header().Name != "wEB.VIRTUAL.consul." {
			t.Errorf("over %s: want the answer under wEB.VIRTUAL.consul., got\n%s", proto, r)
		}
	}

	// NODATA, not NXDOMAIN, for a type the name lacks: NOERROR, no answer, SOA.
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"web.virtual.consul.", dns.TypeAAAA}, {"v6.virtual.consul.", dns.TypeA}, {"web.virtual.consul.", dns.TypeTXT}} {
		for _, proto := range []string{"udp", "tcp"} {
			r := Query(t, addr, q.name, q.qtype, proto)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA || !r.Authoritative {
				t.Errorf("%s %s over %s: want NODATA with SOA, got\n%s", q.name, dns.TypeToString[q.qtype], proto, r)
			}
			if r.IsEdns0() == nil {
				t.Errorf("%s over %s: EDNS0 query, reply without OPT", q.name, proto)
			}
		}
	}
	for _, c := range clients {
		args := []string{"web.virtual.consul", "AAAA"}
		if c.tcp != "" {
			args = append(args, c.tcp)
		}
		var out string
		if strings.HasPrefix(c.name, "dig") {
			out = Dig(t, addr, args...)
		} else {
			out = Kdig(t, addr, args...)
		}
		if !strings.Contains(out, "NOERROR") || !strings.Contains(out, "ANSWER: 0") || !strings.Contains(out, "SOA") {
			t.Errorf("%s AAAA: want NOERROR, no answer, SOA:\n%s", c.name, out)
		}
	}

	// Passed on to the servers: ambiguous, another datacenter, Consul's
	// own forms, unknown/misordered qualifiers, misses.
	for name, want := range map[string]string{
		"amb.virtual.consul":         "10.0.0.12",
		"web.virtual.dc9.dc.consul":  "10.0.0.13",
		"web.service.virtual.consul": "10.0.0.11",
		"web.service.consul":         "10.0.0.10",
		"nope.virtual.consul":        "10.0.0.14",
		"web.virtual.p1.peer.consul": "10.0.0.15",
	} {
		wantShort(t, addr, name, "A", want)
	}

	if got := s.Metric("coredns_virtualconsul_requests_total", `result="hit"`); got < 1 {
		t.Errorf("hit counter = %v", got)
	}
	for _, result := range []string{"nodata", "miss", "ambiguous", "passthrough"} {
		if got := s.Metric("coredns_virtualconsul_requests_total", `result="`+result+`"`); got < 1 {
			t.Errorf("%s counter = %v", result, got)
		}
	}
	if got := s.Metric("coredns_virtualconsul_entries"); got != float64(len(demoVC)) {
		t.Errorf("entries = %v, want %d", got, len(demoVC))
	}
	if got := s.Metric("coredns_virtualconsul_last_sync_timestamp_seconds", `source="file"`); got < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last sync = %v", got)
	}
}

// TestVirtualConsulReloadAndReject changes the table file under a running
// server: a new file answers, a file with one bad entry is rejected whole
// (the old answers stay, a metric counts it, the log names file and entry).
func TestVirtualConsulReloadAndReject(t *testing.T) {
	consul := startConsulStandIn(t)
	s := startVirtualConsul(t, consul, map[string]string{"table.json": vcTable(demoVC)}, false)
	addr, table := s.DNS(), filepath.Join(s.Dir, "table.json")
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")

	next := map[string][]string{vcFull("web"): {"240.0.0.21"}, vcFull("new"): {"240.0.0.22"}}
	writeAtomic(t, table, vcTable(next))
	Eventually(t, 5*time.Second, func() string {
		if got := DigShort(t, addr, "new.virtual.consul", "A"); strings.Join(got, " ") != "240.0.0.22" {
			return "new table not served yet: " + strings.Join(got, " ")
		}
		return ""
	})
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.21")
	wantShort(t, addr, "pay.virtual.consul", "A") // gone from the table, and the servers have no pay

	// Touched but the same content: counted as unchanged, nothing rebuilt.
	oks := s.Metric("coredns_virtualconsul_syncs_total", `source="file"`, `result="ok"`)
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(table, later, later); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, func() string {
		if s.Metric("coredns_virtualconsul_syncs_total", `source="file"`, `result="unchanged"`) < 1 {
			return "touching the file was not counted as unchanged"
		}
		return ""
	})
	if got := s.Metric("coredns_virtualconsul_syncs_total", `source="file"`, `result="ok"`); got != oks {
		t.Errorf("same content rebuilt the table: ok syncs %v -> %v", oks, got)
	}
	writeAtomic(t, table, vcTable(map[string][]string{
		vcFull("web"):  {"240.0.0.31"},
		vcFull("oops"): {"240.0.0.999"},
	}))
	Eventually(t, 5*time.Second, func() string {
		if s.Metric("coredns_virtualconsul_syncs_total", `source="file"`, `result="rejected"`) < 1 {
			return "no rejection counted"
		}
		return ""
	})
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.21")
	wantShort(t, addr, "new.virtual.consul", "A", "240.0.0.22")
	if log := s.Log(); !strings.Contains(log, "table file "+table) || !strings.Contains(log, `entry 1 ("oops.virtual.default.ns.default.ap.dc1.dc.consul"): bad address "240.0.0.999"`) {
		t.Errorf("the log does not name the file and the entry:\n%s", log)
	}
	if got := s.Metric("coredns_virtualconsul_entries"); got != 2 {
		t.Errorf("entries after a rejection = %v, want 2", got)
	}
}

// TestVirtualConsulSnapshotRestart restarts the server during a control-plane
// outage (no table file, no servers): the snapshot answers at once. A corrupt
// snapshot is ignored, and with no table the names go to the servers.
func TestVirtualConsulSnapshotRestart(t *testing.T) {
	consul := startConsulStandIn(t)
	s := startVirtualConsul(t, consul, map[string]string{"table.json": vcTable(demoVC)}, false)
	addr := s.DNS()
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
	snap := filepath.Join(s.Dir, "vc-snapshot.json")
	Eventually(t, 5*time.Second, func() string {
		if _, err := os.Stat(snap); err != nil {
			return err.Error()
		}
		return ""
	})

	// Outage: the table file and the servers are gone; restart.
	s.Stop()
	consul.Stop()
	if err := os.Remove(filepath.Join(s.Dir, "table.json")); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	addr = s.DNS()
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
	wantShort(t, addr, "api.virtual.team.ns.consul", "A", "240.0.0.2")
	wantShort(t, addr, "v6.virtual.consul", "AAAA", "fd00::6")
	if got := s.Metric("coredns_virtualconsul_syncs_total", `source="snapshot"`, `result="ok"`); got != 1 {
		t.Errorf("snapshot loads = %v, want 1", got)
	}
	if !strings.Contains(s.Log(), "Loaded 7 entries from snapshot") {
		t.Errorf("no snapshot log line:\n%s", s.Log())
	}
}

// TestVirtualConsulNoTable starts with neither a table nor a snapshot (a
// corrupt one): names go to the servers until the table file appears.
func TestVirtualConsulNoTable(t *testing.T) {
	consul := startConsulStandIn(t)
	s := startVirtualConsul(t, consul, map[string]string{"vc-snapshot.json": `[{"name": "web.virt`}, true)
	addr := s.DNS()
	wantShort(t, addr, "web.virtual.consul", "A", "10.9.9.9")
	if got := s.Metric("coredns_virtualconsul_requests_total", `result="not_ready"`); got < 1 {
		t.Errorf("not_ready counter = %v", got)
	}
	if !strings.Contains(s.Log(), "Ignoring the snapshot") {
		t.Errorf("corrupt snapshot not logged:\n%s", s.Log())
	}
	writeAtomic(t, filepath.Join(s.Dir, "table.json"), vcTable(demoVC))
	Eventually(t, 5*time.Second, func() string {
		if got := DigShort(t, addr, "web.virtual.consul", "A"); strings.Join(got, " ") != "240.0.0.1" {
			return "table not served: " + strings.Join(got, " ")
		}
		return ""
	})
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
}

// TestVirtualConsulSIGUSR1 reloads the server in place (CoreDNS restarts
// every plugin): it keeps answering, and the new instance's file source
// picks up later changes.
func TestVirtualConsulSIGUSR1(t *testing.T) {
	consul := startConsulStandIn(t)
	s := startVirtualConsul(t, consul, map[string]string{"table.json": vcTable(demoVC)}, false)
	addr := s.DNS()
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
	s.Signal(syscall.SIGUSR1)
	waitReloaded(t, s)
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
	writeAtomic(t, filepath.Join(s.Dir, "table.json"), vcTable(map[string][]string{vcFull("web"): {"240.0.0.41"}}))
	Eventually(t, 5*time.Second, func() string {
		if got := DigShort(t, addr, "web.virtual.consul", "A"); strings.Join(got, " ") != "240.0.0.41" {
			return "changed table not served after the reload: " + strings.Join(got, " ")
		}
		return ""
	})
	if s.Exited() {
		t.Fatal("meshdns exited after SIGUSR1")
	}
}

// TestVirtualConsulReloadCarry reloads the server (SIGUSR1) during an
// outage with no snapshot configured: the table file is gone, so the new
// instance's source fails, and the table the old instance served is carried
// across and keeps answering (without it the names would go to the servers).
func TestVirtualConsulReloadCarry(t *testing.T) {
	consul := startConsulStandIn(t)
	noSnapshot := strings.Replace(vcCorefile, "        snapshot vc-snapshot.json\n", "", 1)
	if noSnapshot == vcCorefile {
		t.Fatal("vcCorefile has no snapshot line to drop")
	}
	s := Start(t, noSnapshot, Options{
		Files: map[string]string{"table.json": vcTable(demoVC)},
		Ports: map[int]int{5399: consul.Port(1053)},
	})
	addr := s.DNS()
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")

	// Outage: the table file goes; the old instance keeps serving.
	if err := os.Remove(filepath.Join(s.Dir, "table.json")); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(s.Log(), "Source file failing") {
			return "the source has not noticed the table file is gone"
		}
		return ""
	})
	s.Signal(syscall.SIGUSR1)
	waitReloaded(t, s)
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
	wantShort(t, addr, "api.virtual.team.ns.consul", "A", "240.0.0.2")
	wantShort(t, addr, "v6.virtual.consul", "AAAA", "fd00::6")
	if !strings.Contains(s.Log(), "Carried 7 entries across the reload") {
		t.Errorf("no carry log line:\n%s", s.Log())
	}
	if got := s.Metric("coredns_virtualconsul_requests_total", `result="not_ready"`); got != 0 {
		t.Errorf("not_ready counter = %v after the reload, want 0", got)
	}
	if got := s.Metric("coredns_virtualconsul_entries"); got != 7 {
		t.Errorf("entries after the reload = %v, want 7", got)
	}

	// The control plane is back: the new instance's source takes over.
	writeAtomic(t, filepath.Join(s.Dir, "table.json"), vcTable(map[string][]string{vcFull("web"): {"240.0.0.61"}}))
	Eventually(t, 5*time.Second, func() string {
		if got := DigShort(t, addr, "web.virtual.consul", "A"); strings.Join(got, " ") != "240.0.0.61" {
			return "the recovered source's table not served: " + strings.Join(got, " ")
		}
		return ""
	})
	if s.Exited() {
		t.Fatal("meshdns exited after SIGUSR1")
	}
}

// TestVirtualConsulTableShapes serves the two other shapes an operator
// already has: the inline_dns_table object and a whole Envoy config_dump.
func TestVirtualConsulTableShapes(t *testing.T) {
	consul := startConsulStandIn(t)
	inline := `{"virtual_domains": [{"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.51"]}}}]}`
	s := startVirtualConsul(t, consul, map[string]string{"table.json": inline}, false)
	addr := s.DNS()
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.51")

	dump := `{"configs": [
  {"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
   "dynamic_listeners": [
    {"name": "public_listener:10.0.0.5:20000", "active_state": {"listener": {"name": "public_listener:10.0.0.5:20000"}}},
    {"name": "virtual_dns:127.0.0.1:8653", "active_state": {"listener": {
      "name": "virtual_dns:127.0.0.1:8653",
      "listener_filters": [{"name": "envoy.filters.udp.dns_filter", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.udp.dns_filter.v3.DnsFilterConfig",
        "server_config": {"inline_dns_table": {"virtual_domains": [
          {"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.52"]}}},
          {"name": "api.virtual.team.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.53"]}}}
        ]}}}}]}}}]}]}`
	writeAtomic(t, filepath.Join(s.Dir, "table.json"), dump)
	Eventually(t, 5*time.Second, func() string {
		if got := DigShort(t, addr, "web.virtual.consul", "A"); strings.Join(got, " ") != "240.0.0.52" {
			return "config_dump not served: " + strings.Join(got, " ")
		}
		return ""
	})
	wantShort(t, addr, "api.virtual.team.ns.consul", "A", "240.0.0.53")
}
