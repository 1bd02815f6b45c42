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

// vcConsulCorefile is a consul. block synced from a real Consul agent
// (8500 → its HTTP port), misses forwarded to its DNS port (8600).
const vcConsulCorefile = `consul.:1053 {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    virtualconsul {
        source consul 127.0.0.1:8500%s
        snapshot vc-snapshot.json
    }
    forward . 127.0.0.1:8600
}
`

// TestVirtualConsulConsulDifferential: meshdns synced from a real Consul
// agent gives exactly the VIP that Consul's own DNS gives for
// <svc>.virtual.consul, also after services are added and removed.
func TestVirtualConsulConsulDifferential(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	consul := startConsul(t, false)
	consul.Register("web", 8080)
	consul.Register("api", 8081)
	consul.RegisterPlain("plain", 8082)
	s := Start(t, fmt.Sprintf(vcConsulCorefile, ""), Options{Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	names := []string{"web.virtual.consul.", "api.virtual.consul.", "Web.Virtual.consul.", "plain.virtual.consul.", "db.virtual.consul."}
	check := func() {
		t.Helper()
		for _, n := range names {
			Eventually(t, 5*time.Second, func() string { return sameAnswer(s.DNS(), consul.DNS(), n) })
		}
	}
	Eventually(t, 5*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_entries"); n != 2 {
			return fmt.Sprintf("entries = %v, want 2", n)
		}
		return ""
	})
	check()
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); len(got) != 1 || !strings.HasPrefix(got[0], "240.0.0.") {
		t.Fatalf("web.virtual.consul = %v, want a 240.0.0.x VIP", got)
	}
	// Consul 1.16 CE's DNS rejects the full form (.ns/.ap); ours answers it
	// with the VIP Consul gives for the short form.
	full := Rdata(Query(t, s.DNS(), "web.virtual.default.ns.default.ap.dc1.dc.consul", dns.TypeA, "udp"))
	if want, _, _ := aOf(consul.DNS(), "web.virtual.consul.", "udp"); strings.Join(full, ",") != strings.Join(want, ",") {
		t.Fatalf("full form = %v, consul's short form %v", full, want)
	}
	hits := s.Metric("coredns_virtualconsul_requests_total", `result="hit"`)
	if hits < 6 {
		t.Fatalf("hits = %v: the VIPs did not come from the table", hits)
	}
	// kdig and dig over TCP agree too.
	want := DigShort(t, consul.DNS(), "web.virtual.consul")
	if got := KdigShort(t, s.DNS(), "web.virtual.consul", "+tcp"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("kdig +tcp: %v, consul says %v", got, want)
	}

	// Add a VIP-bearing service, remove one: new answers within seconds.
	start := time.Now()
	consul.Register("db", 8083)
	consul.Deregister("api")
	Eventually(t, 5*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_entries"); n != 2 {
			return fmt.Sprintf("entries = %v, want 2 (web, db)", n)
		}
		if got := Rdata(Query(t, s.DNS(), "db.virtual.consul", dns.TypeA, "udp")); len(got) != 1 {
			return fmt.Sprintf("db.virtual.consul = %v", got)
		}
		return ""
	})
	t.Logf("add+remove visible after %v", time.Since(start).Round(time.Millisecond))
	check()

	// The control plane goes away: the table keeps serving, one log line.
	webVIP := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp"))
	consul.Stop()
	Eventually(t, 5*time.Second, func() string {
		if s.Metric("coredns_virtualconsul_source_failing", `source="consul"`) != 1 {
			return "source_failing not 1"
		}
		return ""
	})
	for i := 0; i < 20; i++ {
		if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "tcp")); strings.Join(got, ",") != strings.Join(webVIP, ",") {
			t.Fatalf("during the outage web.virtual.consul = %v, want %v", got, webVIP)
		}
	}
	time.Sleep(1500 * time.Millisecond) // several retries
	if n := strings.Count(s.Log(), "Source consul failing"); n != 1 {
		t.Fatalf("%d 'failing' log lines, want 1:\n%s", n, s.Log())
	}
}

// TestVirtualConsulConsulUpstreams: with upstreams (in any letter case:
// the catalog keeps a name's, Pay), only those services
// are in the table; the others go to the Consul servers. The agent's address
// comes from CONSUL_HTTP_ADDR.
func TestVirtualConsulConsulUpstreams(t *testing.T) {
	consul := startConsul(t, false)
	consul.Register("web", 8080)
	consul.Register("api", 8081)
	consul.Register("Pay", 8082) // upstreams names it in other letters: Consul keeps the case
	// No ADDRESS: CONSUL_HTTP_ADDR says where the agent is.
	corefile := strings.Replace(fmt.Sprintf(vcConsulCorefile, " {\n            upstreams web PAY\n        }"), "consul 127.0.0.1:8500 {", "consul {", 1)
	s := Start(t, corefile, Options{Env: []string{"CONSUL_HTTP_ADDR=" + consul.HTTP()}, Ports: map[int]int{8600: portOf(consul.DNS())}})
	Eventually(t, 5*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_entries"); n != 2 {
			return fmt.Sprintf("entries = %v, want 2", n)
		}
		return ""
	})
	for _, n := range []string{"web.virtual.consul.", "api.virtual.consul.", "pay.virtual.consul."} {
		if why := sameAnswer(s.DNS(), consul.DNS(), n); why != "" {
			t.Fatal(why)
		}
	}
	if m := s.Metric("coredns_virtualconsul_requests_total", `result="miss"`); m != 2 {
		t.Fatalf("misses = %v, want 2 (api over udp and tcp, answered by Consul)", m)
	}
}

// vcXDSCorefile is a consul. block synced over ADS (port 18000 → the test's
// go-control-plane server), misses forwarded to the stand-in servers.
const vcXDSCorefile = `consul.:1053 {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    virtualconsul {
        source xds 127.0.0.1:18000 {
            node sidecar-1
            cluster web
        }
        snapshot vc-snapshot.json
    }
    forward . 127.0.0.1:5399
}
`

// TestVirtualConsulXDS: a real go-control-plane server pushes a
// virtual_dns listener, a new version, then an invalid one (NACKed, the old
// answers stay); after a disconnect the source reconnects. The same over
// delta ADS (the default), state-of-the-world ADS (protocol sotw), and
// against a server that refuses delta (the default falls back once).
func TestVirtualConsulXDS(t *testing.T) {
	for _, c := range []struct {
		mode, option string
		start        func(testing.TB, string) *xdsServer
		delta        bool // the streams must be delta, else state-of-the-world
	}{
		{"delta", "", startXDS, true},
		{"sotw", "\n            protocol sotw", startXDS, false},
		{"fallback", "", startXDSSotWOnly, false},
	} {
		t.Run(c.mode, func(t *testing.T) {
			x := c.start(t, "sidecar-1")
			s := xdsScenario(t, x, strings.Replace(vcXDSCorefile, "cluster web", "cluster web"+c.option, 1))
			if d, w := x.deltaStreams.Load(), x.sotwStreams.Load(); (c.delta && (d < 2 || w != 0)) || (!c.delta && (d != 0 || w < 2)) {
				t.Fatalf("%d delta and %d state-of-the-world streams (two connections)", d, w)
			}
			proto := "state-of-the-world ADS"
			if c.delta {
				proto = "delta ADS"
			}
			if !strings.Contains(s.Log(), "over "+proto) {
				t.Fatalf("the log does not say %s is in use:\n%s", proto, s.Log())
			}
			if n := strings.Count(s.Log(), "refuses delta ADS"); (c.mode == "fallback") != (n == 1) || n > 1 {
				t.Fatalf("%d fall-back log lines", n)
			}
		})
	}
}

// xdsScenario runs the TestVirtualConsulXDS scenario against x.
func xdsScenario(t *testing.T, x *xdsServer, corefile string) *Server {
	standIn := startConsulStandIn(t)
	x.Set("v1", map[string][]string{vcFull("web"): {"240.0.0.1"}, vcFull("api"): {"240.0.0.2"}})
	s := Start(t, corefile, Options{Ports: map[int]int{18000: x.port, 5399: standIn.Port(1053)}})
	a := func(name string) []string { return Rdata(Query(t, s.DNS(), name, dns.TypeA, "udp")) }
	if got := a("web.virtual.consul"); strings.Join(got, "") != "240.0.0.1" {
		t.Fatalf("v1: web = %v", got)
	}
	Eventually(t, 2*time.Second, func() string {
		if !x.Acked("v1") {
			return "v1 not ACKed"
		}
		return ""
	})

	x.Set("v2", map[string][]string{vcFull("web"): {"240.0.0.9"}, vcFull("db"): {"240.0.0.3"}})
	Eventually(t, 5*time.Second, func() string {
		if got := a("web.virtual.consul"); strings.Join(got, "") != "240.0.0.9" {
			return fmt.Sprintf("v2: web = %v", got)
		}
		return ""
	})
	if got := a("db.virtual.consul"); strings.Join(got, "") != "240.0.0.3" {
		t.Fatalf("v2: db = %v", got)
	}
	if got := a("api.virtual.consul"); strings.Join(got, "") != "10.0.0.99" && len(got) != 0 {
		// api left the table: the stand-in servers answer (they have no api: NXDOMAIN)
		t.Fatalf("v2: api = %v, want the servers' answer", got)
	}
	Eventually(t, 2*time.Second, func() string {
		if !x.Acked("v2") {
			return "v2 not ACKed"
		}
		return ""
	})

	// Names DNS cannot ask for are left out and counted; the rest serves.
	x.Set("v2b", map[string][]string{vcFull("web"): {"240.0.0.9"}, vcFull("db"): {"240.0.0.3"}, "bad..name": {"240.0.0.11"}, "web.consul": {"240.0.0.12"}})
	Eventually(t, 5*time.Second, func() string {
		if !x.Acked("v2b") {
			return "v2b (two names DNS cannot ask for) not ACKed"
		}
		if n := s.Metric("coredns_virtualconsul_entries_skipped", `source="xds"`, `reason="name"`); n != 2 {
			return fmt.Sprintf("entries_skipped{reason=name} = %v, want 2", n)
		}
		return ""
	})

	// A structurally invalid response is NACKed and not applied.
	x.SetInvalid("v3")
	Eventually(t, 5*time.Second, func() string {
		if x.nacks.Load() == 0 {
			return "v3 not NACKed"
		}
		return ""
	})
	if x.Acked("v3") {
		t.Fatal("v3 ACKed")
	}
	if got := a("web.virtual.consul"); strings.Join(got, "") != "240.0.0.9" {
		t.Fatalf("after the NACK: web = %v, want v2's 240.0.0.9", got)
	}
	if r := s.Metric("coredns_virtualconsul_syncs_total", `source="xds"`, `result="rejected"`); r != 1 {
		t.Fatalf("rejected syncs = %v, want 1", r)
	}

	// The control plane goes away: v2 keeps serving; it comes back with v4.
	x.Stop()
	Eventually(t, 5*time.Second, func() string {
		if s.Metric("coredns_virtualconsul_source_failing", `source="xds"`) != 1 {
			return "source_failing not 1"
		}
		return ""
	})
	if got := a("web.virtual.consul"); strings.Join(got, "") != "240.0.0.9" {
		t.Fatalf("during the outage: web = %v", got)
	}
	x.Set("v4", map[string][]string{vcFull("web"): {"240.0.0.4"}})
	x.Start()
	Eventually(t, 10*time.Second, func() string {
		if got := a("web.virtual.consul"); strings.Join(got, "") != "240.0.0.4" {
			return fmt.Sprintf("v4: web = %v", got)
		}
		return ""
	})
	if s.Metric("coredns_virtualconsul_source_failing", `source="xds"`) != 0 {
		t.Fatal("source_failing still 1 after the reconnect")
	}
	Eventually(t, 2*time.Second, func() string {
		for _, l := range []string{"Source xds failing", "Source xds recovered", "NACKed"} {
			if !strings.Contains(s.Log(), l) {
				return fmt.Sprintf("log lacks %q:\n%s", l, s.Log())
			}
		}
		return ""
	})
	Eventually(t, 2*time.Second, func() string {
		if !x.Acked("v4") {
			return "v4 not ACKed"
		}
		return ""
	})
	return s
}

// vcEnvoyCorefile is the remote-listener mode (8653 → the listener stand-in).
const vcEnvoyCorefile = `consul.:1053 {
    bind 127.0.0.1
    errors
    prometheus 127.0.0.1:9153
    virtualconsul {
        source envoy 127.0.0.1:8653 {
            timeout 300ms
            backoff 2s
        }
    }
    forward . 127.0.0.1:5399
}
`

// TestVirtualConsulEnvoyTTLAndAmbiguous: in remote-listener mode answers
// carry the plugin's ttl, not the listener's (Envoy's 300 s), and a name the
// listener answers with two VIPs is ambiguous: it goes on to the next
// plugin, never answered with both addresses.
func TestVirtualConsulEnvoyTTLAndAmbiguous(t *testing.T) {
	standIn := startConsulStandIn(t)
	l := startListenerStandIn(t, map[string]string{vcFull("web") + ".": "240.0.0.1", vcFull("two") + ".": "240.0.0.5,240.0.0.6"})
	cf := strings.Replace(vcEnvoyCorefile, "            backoff 2s\n        }\n", "            backoff 2s\n        }\n        ttl 7\n", 1)
	s := Start(t, cf, Options{Ports: map[int]int{8653: portOf(l.addr), 5399: standIn.Port(1053)}, WaitDNS: true})
	r := Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")
	if len(r.Answer) != 1 || rrData(r.Answer[0]) != "240.0.0.1" || r.Answer[0].Header().Ttl != 7 {
		t.Fatalf("web: %v, want 240.0.0.1 with TTL 7", r)
	}
	got := Rdata(Query(t, s.DNS(), "two.virtual.consul", dns.TypeA, "udp"))
	for _, a := range got {
		if a == "240.0.0.5" || a == "240.0.0.6" {
			t.Fatalf("an ambiguous name was answered with the listener's VIPs: %v", got)
		}
	}
	if s.Metric("coredns_virtualconsul_requests_total", `result="ambiguous"`) != 1 {
		t.Fatalf("the ambiguous answer was not counted:\n%s", s.Metrics())
	}
	t.Logf("two.virtual.consul went on to the servers: %v", got)
}

// TestVirtualConsulEnvoyBackoff: remote-listener mode against a real DNS
// server on loopback standing for Envoy's virtual_dns listener. Hits are
// rewritten to the asked name, over UDP even for TCP clients; a hung or dead
// listener costs one timeout, then for the backoff no query waits on it,
// and it is tried again after.
func TestVirtualConsulEnvoyBackoff(t *testing.T) {
	standIn := startConsulStandIn(t)
	l := startListenerStandIn(t, map[string]string{vcFull("web") + ".": "240.0.0.1", vcFull("api") + ".": "240.0.0.2"})
	s := Start(t, vcEnvoyCorefile, Options{Ports: map[int]int{8653: portOf(l.addr), 5399: standIn.Port(1053)}, WaitDNS: true})
	for _, proto := range []string{"udp", "tcp"} {
		r := Query(t, s.DNS(), "WEB.virtual.consul", dns.TypeA, proto)
		if len(r.Answer) != 1 || r.Answer[0].Header().Name != "WEB.virtual.consul." || rrData(r.Answer[0]) != "240.0.0.1" {
			t.Fatalf("%s: %v", proto, r)
		}
	}
	// Not a hit at the listener (NXDOMAIN for AAAA, an unknown name): the
	// next plugin (the stand-in servers) answers.
	if got := Rdata(Query(t, s.DNS(), "nope.virtual.consul", dns.TypeA, "udp")); strings.Join(got, "") != "10.0.0.14" {
		t.Fatalf("miss: %v, want the servers' 10.0.0.14", got)
	}
	for _, n := range l.Names() {
		if n != vcFull("web")+"." && n != vcFull("nope")+"." {
			t.Fatalf("the listener was asked %q, want canonical names", n)
		}
	}
	if got := wantOver(l, func() { Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "tcp") }); got != 1 {
		t.Fatalf("a TCP client's query reached the UDP listener %d times, want 1", got)
	}

	// Hang the listener: one query waits the 300ms timeout and goes on to
	// the servers; then for the 2s window no query waits (nor reaches it).
	l.hung.Store(true)
	t0 := time.Now()
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); strings.Join(got, "") != "10.9.9.9" {
		t.Fatalf("timed out query: %v, want the servers' answer", got)
	}
	first := time.Since(t0)
	if first < 250*time.Millisecond || first > 1500*time.Millisecond {
		t.Fatalf("the first query after the hang took %v, want about the 300ms timeout", first)
	}
	windowStart := time.Now()
	before := l.queries.Load()
	var worst time.Duration
	n := 0
	for time.Since(windowStart) < 1500*time.Millisecond {
		q0 := time.Now()
		if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); strings.Join(got, "") != "10.9.9.9" {
			t.Fatalf("during the backoff: %v", got)
		}
		worst = max(worst, time.Since(q0))
		n++
		time.Sleep(20 * time.Millisecond)
	}
	if l.queries.Load() != before {
		t.Fatalf("the listener got %d queries during the backoff", l.queries.Load()-before)
	}
	if worst > 150*time.Millisecond {
		t.Fatalf("worst latency during the backoff %v, want far below the 300ms timeout", worst)
	}
	t.Logf("first query %v (timeout), then %d queries in the window, worst %v", first.Round(time.Millisecond), n, worst.Round(time.Millisecond))
	if s.Metric("coredns_virtualconsul_requests_total", `result="backoff"`) < float64(n) {
		t.Fatal("backoff results not counted")
	}

	// After the window the listener is tried again, and it answers.
	l.hung.Store(false)
	time.Sleep(time.Until(windowStart.Add(2100 * time.Millisecond)))
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); strings.Join(got, "") != "240.0.0.1" {
		t.Fatalf("after the backoff: %v, want the listener's 240.0.0.1", got)
	}

	// Kill it: the error (port unreachable) also opens a window.
	l.Stop()
	t0 = time.Now()
	for i := 0; i < 10; i++ {
		if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); strings.Join(got, "") != "10.9.9.9" {
			t.Fatalf("listener dead: %v", got)
		}
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("10 queries with the listener dead took %v", d)
	}
	if s.Metric("coredns_virtualconsul_source_failing", `source="envoy"`) != 1 {
		t.Fatal("source_failing not 1")
	}
	l.Start()
	time.Sleep(2100 * time.Millisecond)
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); strings.Join(got, "") != "240.0.0.1" {
		t.Fatalf("after the restart: %v", got)
	}
	Eventually(t, 2*time.Second, func() string { // the log reaches us through a pipe
		for _, line := range []string{"Source envoy failing", "Source envoy recovered"} {
			if strings.Count(s.Log(), line) != 2 {
				return fmt.Sprintf("want %q twice in:\n%s", line, s.Log())
			}
		}
		return ""
	})
}

// wantOver returns how many queries reached l during f.
func wantOver(l *listenerStandIn, f func()) int64 {
	before := l.queries.Load()
	f()
	return l.queries.Load() - before
}

// TestVirtualConsulSidecarCorefile runs corefile/sidecar.Corefile against a
// real Consul agent and a recursor stand-in: virtual names come from the
// table, other consul. names from Consul, public names from the recursor,
// and no consul. name ever reaches the recursor, also while Consul is down.
func TestVirtualConsulSidecarCorefile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "corefile", "sidecar.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	consul := startConsul(t, false)
	consul.Register("web", 8080)
	consul.Register("api", 8081)
	consul.Register("db", 8082)
	rec1, rec2 := startRecursorStandIn(t), startRecursorStandIn(t)
	dir := t.TempDir()
	CopyDir(t, filepath.Join(repoRoot, "corefile"), dir)
	s := Start(t, string(b), Options{Dir: dir, Ports: map[int]int{
		8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS()),
		5301: portOf(rec1.addr), 5302: portOf(rec2.addr),
	}})
	names := []string{"web.virtual.consul.", "api.virtual.consul.", "db.virtual.consul.", "web.service.consul.", "nope.virtual.consul.", "consul.service.consul."}
	Eventually(t, 5*time.Second, func() string {
		for _, n := range names {
			if why := sameAnswer(s.DNS(), consul.DNS(), n); why != "" {
				return why
			}
		}
		return ""
	})
	if got := Rdata(Query(t, s.DNS(), "example.com", dns.TypeA, "udp")); strings.Join(got, "") != "198.51.100.1" {
		t.Fatalf("example.com = %v, want the recursor's answer", got)
	}
	consul.Stop()
	for _, n := range names {
		for _, proto := range []string{"udp", "tcp"} {
			_, _ = TryQuery(s.DNS(), n, dns.TypeA, proto)
			_, _ = TryQuery(s.DNS(), n, dns.TypeAAAA, proto)
		}
	}
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); len(got) != 1 {
		t.Fatalf("web.virtual.consul during the outage = %v", got)
	}
	if got := Rdata(Query(t, s.DNS(), "www.example.org", dns.TypeA, "tcp")); strings.Join(got, "") != "198.51.100.1" {
		t.Fatalf("www.example.org = %v", got)
	}
	seen := append(rec1.Names(), rec2.Names()...)
	public := 0
	for _, n := range seen {
		if strings.HasSuffix(strings.ToLower(n), "consul.") {
			t.Fatalf("the recursor was asked %q: consul. names must never leave for a public recursor (all: %v)", n, seen)
		}
		public++
	}
	if public == 0 {
		t.Fatal("the recursor got no query at all")
	}
	t.Logf("recursor queries: %d, none under consul.", public)
}

// TestVirtualConsulOutageDrill is the bounded end-to-end outage drill (the
// dnsperf one is build/drill-virtualconsul.sh): under steady load, the
// Consul server dies → zero failed virtual answers; meshdns restarts while
// it is down → answers from the snapshot as soon as ready; Consul comes back
// with a service added meanwhile → it appears.
func TestVirtualConsulOutageDrill(t *testing.T) {
	consul := startConsul(t, true)
	consul.Register("web", 8080)
	consul.Register("api", 8081)
	s := Start(t, fmt.Sprintf(vcConsulCorefile, ""), Options{Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	want := map[string]string{}
	Eventually(t, 10*time.Second, func() string {
		for _, svc := range []string{"web", "api"} {
			got, _, _ := aOf(s.DNS(), svc+".virtual.consul.", "udp")
			if len(got) != 1 {
				return svc + ": no VIP yet"
			}
			want[svc+".virtual.consul."] = got[0]
		}
		return ""
	})
	stop := make(chan struct{})
	load := steadyLoad(s.DNS(), want, 200, 20*time.Second, stop)
	time.Sleep(time.Second)
	consul.Stop()
	time.Sleep(3 * time.Second)
	close(stop)
	<-load.done
	t.Logf("control plane down: %d queries, %d ok, %d failed", load.sent.Load(), load.ok.Load(), load.failed.Load())
	if load.failed.Load() != 0 || load.sent.Load() < 200 {
		t.Fatalf("%d of %d virtual answers failed (first: %s)", load.failed.Load(), load.sent.Load(), load.firstFail)
	}

	// Restart meshdns while Consul is down: the snapshot answers at once.
	t0 := time.Now()
	s.Restart()
	ready := time.Since(t0)
	for n, ip := range want {
		if got, _, _ := aOf(s.DNS(), n, "udp"); strings.Join(got, "") != ip {
			t.Fatalf("after the restart %s = %v, want %s from the snapshot", n, got, ip)
		}
	}
	t.Logf("restart with the control plane down: ready and answering from the snapshot after %v", ready.Round(time.Millisecond))

	// A change made meanwhile: a service defined while the agent is down.
	stop = make(chan struct{})
	load = steadyLoad(s.DNS(), want, 200, 30*time.Second, stop)
	consul.DefineService("late", 8090)
	consul.Start()
	t0 = time.Now()
	Eventually(t, 15*time.Second, func() string {
		if got, _, _ := aOf(s.DNS(), "late.virtual.consul.", "udp"); len(got) != 1 || !strings.HasPrefix(got[0], "240.") {
			return fmt.Sprintf("late.virtual.consul = %v", got)
		}
		return ""
	})
	t.Logf("control plane back: the change appeared %v after the agent had a leader", time.Since(t0).Round(time.Millisecond))
	close(stop)
	<-load.done
	t.Logf("recovery: %d queries, %d failed", load.sent.Load(), load.failed.Load())
	if load.failed.Load() != 0 {
		t.Fatalf("%d of %d virtual answers failed during the recovery (first: %s)", load.failed.Load(), load.sent.Load(), load.firstFail)
	}
}

// TestVirtualConsulXDSOutageDrill is the outage drill with the xDS control
// plane, over delta and over state-of-the-world ADS: under steady load the
// server stops → zero failed answers; meshdns restarts while it is down →
// the snapshot answers as soon as ready; a new version made meanwhile
// appears when the server is back.
func TestVirtualConsulXDSOutageDrill(t *testing.T) {
	t.Run("delta", func(t *testing.T) { xdsOutageDrill(t, vcXDSCorefile) })
	t.Run("sotw", func(t *testing.T) {
		xdsOutageDrill(t, strings.Replace(vcXDSCorefile, "cluster web", "cluster web\n            protocol sotw", 1))
	})
}

func xdsOutageDrill(t *testing.T, corefile string) {
	standIn := startConsulStandIn(t)
	x := startXDS(t, "sidecar-1")
	want := map[string]string{}
	domains := map[string][]string{}
	for i := 1; i <= 20; i++ {
		svc := fmt.Sprintf("svc%d", i)
		ip := fmt.Sprintf("240.0.1.%d", i)
		domains[vcFull(svc)] = []string{ip}
		want[svc+".virtual.consul."] = ip
	}
	x.Set("v1", domains)
	s := Start(t, corefile, Options{Ports: map[int]int{18000: x.port, 5399: standIn.Port(1053)}})

	stop := make(chan struct{})
	load := steadyLoad(s.DNS(), want, 200, 20*time.Second, stop)
	time.Sleep(time.Second)
	x.Stop()
	time.Sleep(2 * time.Second)
	close(stop)
	<-load.done
	t.Logf("xDS server down: %d queries, %d failed", load.sent.Load(), load.failed.Load())
	if load.failed.Load() != 0 || load.sent.Load() < 150 {
		t.Fatalf("%d of %d answers failed (first: %s)", load.failed.Load(), load.sent.Load(), load.firstFail)
	}

	t0 := time.Now()
	s.Restart()
	t.Logf("restart with the xDS server down: ready after %v", time.Since(t0).Round(time.Millisecond))
	for n, ip := range want {
		if got, _, _ := aOf(s.DNS(), n, "tcp"); strings.Join(got, "") != ip {
			t.Fatalf("after the restart %s = %v, want %s from the snapshot", n, got, ip)
		}
	}

	domains[vcFull("late")] = []string{"240.0.1.99"}
	x.Set("v2", domains) // the change made while the server was down
	stop = make(chan struct{})
	load = steadyLoad(s.DNS(), want, 200, 30*time.Second, stop)
	x.Start()
	t0 = time.Now()
	Eventually(t, 15*time.Second, func() string {
		if got, _, _ := aOf(s.DNS(), "late.virtual.consul.", "udp"); strings.Join(got, "") != "240.0.1.99" {
			return fmt.Sprintf("late.virtual.consul = %v", got)
		}
		return ""
	})
	t.Logf("xDS server back: v2 served after %v", time.Since(t0).Round(time.Millisecond))
	close(stop)
	<-load.done
	if load.failed.Load() != 0 {
		t.Fatalf("%d of %d answers failed during the recovery (first: %s)", load.failed.Load(), load.sent.Load(), load.firstFail)
	}
}

// TestVirtualConsulXDSTLS: the ADS stream over mutual TLS.
func TestVirtualConsulXDSTLS(t *testing.T) {
	standIn := startConsulStandIn(t)
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	x := startXDSTLS(t, "sidecar-1", pki.serverConfig)
	x.Set("v1", map[string][]string{vcFull("web"): {"240.0.0.7"}})
	corefile := strings.Replace(vcXDSCorefile, "cluster web", "cluster web\n            tls ca.pem client.pem client-key.pem", 1)
	s := Start(t, corefile, Options{Dir: dir, Ports: map[int]int{18000: x.port, 5399: standIn.Port(1053)}})
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "tcp")); strings.Join(got, "") != "240.0.0.7" {
		t.Fatalf("over TLS: web = %v", got)
	}
}

// TestVirtualConsulConsulTLSAndToken: a Consul agent with ACLs (default
// deny) and HTTPS that requires client certificates; the source reads the
// token from token_file and talks TLS with tls CA CERT KEY. Without a token
// (the environment's CONSUL_HTTP_TOKEN wrong) the source fails and nothing
// is served.
func TestVirtualConsulConsulTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	newTestPKI(t, dir)
	https := freePort(t)
	hcl := fmt.Sprintf(`acl {
  enabled = true
  default_policy = "deny"
  tokens { initial_management = "root-secret" }
}
tls {
  defaults {
    ca_file = %q
    cert_file = %q
    key_file = %q
    verify_incoming = true
  }
}
`, dir+"/ca.pem", dir+"/server.pem", dir+"/server-key.pem")
	consul := startConsulWith(t, false, hcl, "root-secret")
	// https is set apart from the helper's port line (https = -1 there).
	conf := filepath.Join(consul.dir, "conf", "base.hcl")
	b, _ := os.ReadFile(conf)
	os.WriteFile(conf, []byte(strings.Replace(string(b), "https = -1", fmt.Sprintf("https = %d", https), 1)), 0o644)
	consul.Stop()
	consul.Start()
	consul.Register("web", 8080)
	os.WriteFile(filepath.Join(dir, "token"), []byte("root-secret\n"), 0o600)
	corefile := fmt.Sprintf(vcConsulCorefile, " {\n            token_file token\n            tls ca.pem client.pem client-key.pem\n        }")
	corefile = strings.Replace(corefile, "source consul 127.0.0.1:8500", "source consul https://127.0.0.1:8501", 1)
	s := Start(t, corefile, Options{Dir: dir, Env: []string{"CONSUL_HTTP_TOKEN=wrong"},
		Ports: map[int]int{8501: https, 8600: portOf(consul.DNS())}})
	Eventually(t, 5*time.Second, func() string {
		if n := s.Metric("coredns_virtualconsul_entries"); n != 1 {
			return fmt.Sprintf("entries = %v", n)
		}
		return ""
	})
	if got := Rdata(Query(t, s.DNS(), "web.virtual.consul", dns.TypeA, "udp")); len(got) != 1 || !strings.HasPrefix(got[0], "240.0.0.") {
		t.Fatalf("web = %v", got)
	}

	// The environment's token alone (wrong) is refused: the source fails.
	corefile2 := strings.Replace(corefile, "token_file token\n", "", 1)
	s2 := Start(t, corefile2, Options{Dir: t.TempDir(), Files: map[string]string{
		"ca.pem": mustRead(t, dir+"/ca.pem"), "client.pem": mustRead(t, dir+"/client.pem"), "client-key.pem": mustRead(t, dir+"/client-key.pem")},
		Env: []string{"CONSUL_HTTP_TOKEN=wrong"}, Ports: map[int]int{8501: https, 8600: portOf(consul.DNS())}, WaitDNS: true})
	Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(s2.Log(), "Source consul failing") {
			return "no failing line"
		}
		return ""
	})
	for _, l := range strings.Split(s2.Log(), "\n") {
		if strings.Contains(l, "Source consul failing") {
			t.Log(l)
			if !strings.Contains(l, "403") && !strings.Contains(l, "ACL not found") {
				t.Fatalf("failing for another reason than the token: %s", l)
			}
		}
	}
	if s2.Metric("coredns_virtualconsul_entries") != 0 {
		t.Fatal("a table without a valid token")
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestVirtualConsulHungAgent: a Consul agent that hangs (SIGSTOP: sockets
// open, nothing answered) while meshdns's blocking query waits is reported
// failing within seconds (the probe), not at the 5-minute query deadline;
// the VIPs keep answering meanwhile; once the agent continues, the source
// recovers.
func TestVirtualConsulHungAgent(t *testing.T) {
	consul := startConsul(t, false)
	consul.Register("web", 8080)
	s := Start(t, fmt.Sprintf(vcConsulCorefile, ""), Options{Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	var vip string
	Eventually(t, 10*time.Second, func() string {
		got, _, _ := aOf(s.DNS(), "web.virtual.consul.", "udp")
		if len(got) != 1 {
			return "web: no VIP yet"
		}
		vip = got[0]
		return ""
	})
	time.Sleep(time.Second) // the source is inside its blocking query now
	consul.Pause()
	defer consul.Resume() // so the agent can be stopped at the end
	paused := time.Now()
	Eventually(t, 25*time.Second, func() string {
		if !strings.Contains(s.Log(), "Source consul failing") {
			return "no failure logged"
		}
		return ""
	})
	t.Logf("hung agent noticed after %v", time.Since(paused).Round(time.Millisecond))
	if !strings.Contains(s.Log(), "agent not answering") {
		t.Errorf("the failure does not name the hang:\n%s", s.Log())
	}
	if s.Metric("coredns_virtualconsul_source_failing", `source="consul"`) != 1 {
		t.Error("source_failing is not 1 while the agent hangs")
	}
	for i := 0; i < 5; i++ {
		if got, _, _ := aOf(s.DNS(), "web.virtual.consul.", "udp"); len(got) != 1 || got[0] != vip {
			t.Fatalf("web while the agent hangs: %v, want %s", got, vip)
		}
	}
	consul.Resume()
	resumed := time.Now()
	Eventually(t, 25*time.Second, func() string {
		if !strings.Contains(s.Log(), "Source consul recovered") {
			return "no recovery logged"
		}
		return ""
	})
	t.Logf("recovered %v after the agent continued", time.Since(resumed).Round(time.Millisecond))
	if n := strings.Count(s.Log(), "Source consul failing"); n != 1 {
		t.Errorf("the failure was logged %d times, want once", n)
	}
}
