package test

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

var esvcNodes = []esvcNode{
	{"node-1", "192.0.2.10:7946", "ready"},
	{"node-2", "192.0.2.11:7946", "ready"},
	{"node-6", "[2001:db8::6]:7946", "ready"},
	{"node-h", "localhost:7946", "ready"},
}

// Situation 1: two healthy tasks of one service on one node with different
// host ports — one A record, two SRV records carrying both ports.
func TestEndpointsvcTwoTasksOneNode(t *testing.T) {
	state := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{
		{"t-1", "atlas", "node-1", "running", "healthy", 31081},
		{"t-2", "atlas", "node-1", "running", "healthy", 31082},
	})
	s := Start(t, esvcCorefile("source file state.json\nttl 30s"), Options{Files: map[string]string{"state.json": state}})
	addr := s.DNS()

	if got := DigShort(t, addr, "atlas.svc.orch", "A"); strings.Join(got, ",") != "192.0.2.10" {
		t.Errorf("dig A: %q, want one record 192.0.2.10", got)
	}
	for _, name := range []string{"_http._tcp.atlas.svc.orch", "_http._tcp.atlas.default.svc.orch", "atlas.svc.orch"} {
		want := "0 10 31081 node-1.node.svc.orch.,0 10 31082 node-1.node.svc.orch."
		if got := DigShort(t, addr, name, "SRV"); strings.Join(got, ",") != want {
			t.Errorf("dig SRV %s: %q, want %q", name, got, want)
		}
		if got := KdigShort(t, addr, name, "SRV"); strings.Join(got, ",") != want {
			t.Errorf("kdig SRV %s: %q, want %q", name, got, want)
		}
	}
	// the SRV target's address rides in the additional section
	out := Dig(t, addr, "_http._tcp.atlas.svc.orch", "SRV")
	if !strings.Contains(out, ";; ADDITIONAL SECTION:") || !strings.Contains(out, "node-1.node.svc.orch.\t30\tIN\tA\t192.0.2.10") {
		t.Errorf("no additional A for the target:\n%s", out)
	}
	// TCP, the asked case echoed, TTL from the Corefile
	r := Query(t, addr, "AtLaS.SvC.oRcH.", dns.TypeA, "tcp")
	if len(r.Answer) != 1 || r.Answer[0].Header().Name != "AtLaS.SvC.oRcH." || r.Answer[0].Header().Ttl != 30 || !r.Authoritative {
		t.Errorf("tcp reply: %v", r)
	}
	expectAnswers(t, addr, "node-1.node.svc.orch.", dns.TypeA, "192.0.2.10")
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeAAAA, "[NODATA]")
	expectAnswers(t, addr, "_grpc._tcp.atlas.svc.orch.", dns.TypeSRV, "[NXDOMAIN]")
	expectAnswers(t, addr, "nope.svc.orch.", dns.TypeA, "[NXDOMAIN]")
	if r := Query(t, addr, "nope.svc.orch.", dns.TypeA, "udp"); len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("NXDOMAIN without SOA: %v", r)
	}
	if v := s.Metric("coredns_endpointsvc_requests_total", `result="nxdomain"`); v < 1 {
		t.Errorf("requests_total{result=nxdomain} = %v", v)
	}
	if v := s.Metric("coredns_endpointsvc_endpoints"); v != 2 {
		t.Errorf("endpoints gauge = %v, want 2", v)
	}
}

// Situation 2: a task that is desired-stopped but still running is in no
// record type, even with include_unhealthy; an unhealthy one only with it.
func TestEndpointsvcDesiredStoppedExcluded(t *testing.T) {
	state := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{
		{"t-1", "atlas", "node-1", "running", "healthy", 31081},
		{"t-old", "atlas", "node-2", "stopped", "running", 31099},
		{"t-v6", "atlas", "node-6", "running", "unhealthy", 31066},
	})
	for _, inc := range []bool{false, true} {
		opts := "source file state.json"
		if inc {
			opts += "\ninclude_unhealthy"
		}
		s := Start(t, esvcCorefile(opts), Options{Files: map[string]string{"state.json": state}})
		addr := s.DNS()
		wantAAAA := []string{"[NODATA]"}
		wantSRV := []string{"0 10 31081 node-1.node.svc.orch."}
		if inc {
			wantAAAA = []string{"2001:db8::6"}
			wantSRV = []string{"0 10 31066 node-6.node.svc.orch.", "0 10 31081 node-1.node.svc.orch."}
		}
		expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10")
		expectAnswers(t, addr, "atlas.default.svc.orch.", dns.TypeA, "192.0.2.10")
		expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeAAAA, wantAAAA...)
		expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeSRV, wantSRV...)
		expectAnswers(t, addr, "_http._tcp.atlas.svc.orch.", dns.TypeSRV, wantSRV...)
		for _, tool := range []string{"dig", "kdig"} {
			var out string
			if tool == "dig" {
				out = Dig(t, addr, "_http._tcp.atlas.svc.orch", "SRV")
			} else {
				out = Kdig(t, addr, "_http._tcp.atlas.svc.orch", "SRV")
			}
			if strings.Contains(out, "192.0.2.11") || strings.Contains(out, "31099") || strings.Contains(out, "node-2.node") {
				t.Errorf("%s: the desired-stopped task shows up:\n%s", tool, out)
			}
		}
		s.Stop()
	}
}

// Situation 3: an IPv6 advertise address answers AAAA, a hostname one
// contributes what it resolves to (localhost → 127.0.0.1), also as the
// SRV target's additional record.
func TestEndpointsvcIPv6AndHostname(t *testing.T) {
	state := esvcState([]string{"six", "named", "both.prod"}, esvcNodes, []esvcTask{
		{"t-6", "six", "node-6", "running", "running", 31006},
		{"t-h", "named", "node-h", "running", "healthy", 31007},
		{"t-b1", "both.prod", "node-1", "running", "healthy", 31008},
		{"t-b2", "both.prod", "node-6", "running", "healthy", 31009},
	})
	s := Start(t, esvcCorefile("source file state.json"), Options{Files: map[string]string{"state.json": state}})
	addr := s.DNS()
	if got := DigShort(t, addr, "six.svc.orch", "AAAA"); strings.Join(got, ",") != "2001:db8::6" {
		t.Errorf("dig AAAA six: %q", got)
	}
	if got := KdigShort(t, addr, "six.svc.orch", "A"); len(got) != 0 {
		t.Errorf("kdig A six: %q, want nothing", got)
	}
	expectAnswers(t, addr, "six.svc.orch.", dns.TypeA, "[NODATA]")
	if got := DigShort(t, addr, "named.svc.orch", "A"); strings.Join(got, ",") != "127.0.0.1" {
		t.Errorf("dig A named (hostname localhost): %q", got)
	}
	expectAnswers(t, addr, "node-h.node.svc.orch.", dns.TypeA, "127.0.0.1")
	r := Query(t, addr, "_http._tcp.named.svc.orch.", dns.TypeSRV, "udp")
	if len(r.Answer) != 1 || len(r.Extra) < 1 || !strings.Contains(r.String(), "node-h.node.svc.orch.\t0\tIN\tA\t127.0.0.1") && !strings.Contains(r.String(), "node-h.node.svc.orch.\t30\tIN\tA\t127.0.0.1") {
		t.Errorf("SRV on the hostname node: %v", r)
	}
	expectAnswers(t, addr, "both.prod.svc.orch.", dns.TypeA, "192.0.2.10")
	expectAnswers(t, addr, "both.prod.svc.orch.", dns.TypeAAAA, "2001:db8::6")
	out := Kdig(t, addr, "_http._tcp.both.prod.svc.orch", "SRV")
	for _, want := range []string{"31008 node-1.node.svc.orch.", "31009 node-6.node.svc.orch.", "node-6.node.svc.orch.", "2001:db8::6", "192.0.2.10"} {
		if !strings.Contains(out, want) {
			t.Errorf("kdig SRV both.prod lacks %q:\n%s", want, out)
		}
	}
}

// Situation 4: a task is rescheduled onto another node; the answers change
// on the next sync, with the TTL as configured.
func TestEndpointsvcRescheduled(t *testing.T) {
	before := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{
		{"t-1", "atlas", "node-1", "running", "healthy", 31081},
	})
	after := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{
		{"t-1", "atlas", "node-1", "stopped", "stopped", 31081},
		{"t-2", "atlas", "node-2", "running", "healthy", 31777},
	})
	s := Start(t, esvcCorefile("source file state.json 100ms\nttl 7"), Options{Files: map[string]string{"state.json": before}})
	addr := s.DNS()
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10")
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeSRV, "0 10 31081 node-1.node.svc.orch.")
	if err := os.WriteFile(filepath.Join(s.Dir, "state.json"), []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.11")
	expectAnswers(t, addr, "_http._tcp.atlas.svc.orch.", dns.TypeSRV, "0 10 31777 node-2.node.svc.orch.")
	out := Dig(t, addr, "+noall", "+answer", "atlas.svc.orch", "A")
	if !strings.Contains(out, "atlas.svc.orch.\t\t7\tIN\tA\t192.0.2.11") && !strings.Contains(out, "atlas.svc.orch.\t7\tIN\tA\t192.0.2.11") {
		t.Errorf("TTL not 7:\n%s", out)
	}
	// an invalid state is rejected whole: the last good answers hold
	bad := strings.Replace(after, `"status": "ready"`, `"status": "exploded"`, 1)
	os.WriteFile(filepath.Join(s.Dir, "state.json"), []byte(bad), 0o644)
	Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(s.Log(), `unknown status \"exploded\"`) && !strings.Contains(s.Log(), `unknown status "exploded"`) {
			return "the rejection is not logged"
		}
		return ""
	})
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.11")
}

// The orch source against an HTTP API in the test that changes state, fails
// with 5xx, a timeout and garbage, then recovers: the last good answers hold
// throughout, and a restart during the outage answers from the snapshot.
func TestEndpointsvcOrchSource(t *testing.T) {
	v1 := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{{"t-1", "atlas", "node-1", "running", "healthy", 31081}})
	v2 := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{
		{"t-1", "atlas", "node-1", "running", "healthy", 31081},
		{"t-2", "atlas", "node-2", "running", "healthy", 31082},
	})
	v3 := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{{"t-3", "atlas", "node-6", "running", "healthy", 31083}})
	orch := &fakeOrch{state: v1, version: 1, token: "t0ken", hits: map[string]int{}, hangTime: 3 * time.Second}
	ts := httptest.NewServer(orch)
	defer ts.Close()
	opts := "source orch " + ts.URL + "/v1/state 100ms\ntoken_file token\ntimeout 300ms\nmax_backoff 400ms\nsnapshot snap.json\nmax_body 1m"
	// keep the API's port as it is: the harness rewrites every other port
	apiPort := ts.Listener.Addr().(*net.TCPAddr).Port
	s := Start(t, esvcCorefile(opts), Options{Files: map[string]string{"token": "t0ken\n"}, Ports: map[int]int{apiPort: apiPort}})
	addr := s.DNS()
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10")
	Eventually(t, 5*time.Second, func() string {
		if orch.count("304") == 0 {
			return "no conditional GET answered 304 yet"
		}
		return ""
	})

	orch.set("", v2)
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10", "192.0.2.11")
	holds := func(phase string) {
		t.Helper()
		for i := 0; i < 5; i++ {
			if got := answers(t, addr, "atlas.svc.orch.", dns.TypeA); strings.Join(got, ",") != "192.0.2.10,192.0.2.11" {
				t.Fatalf("%s: answers %q, want the last good ones", phase, got)
			}
			if got := answers(t, addr, "_http._tcp.atlas.svc.orch.", dns.TypeSRV); len(got) != 2 {
				t.Fatalf("%s: SRV %q, want the last good two", phase, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, mode := range []string{"500", "hang", "garbage"} {
		errorsBefore := s.Metric("coredns_endpointsvc_syncs_total", `result="error"`)
		orch.set(mode, "")
		Eventually(t, 5*time.Second, func() string {
			if orch.count(mode) == 0 || s.Metric("coredns_endpointsvc_syncs_total", `result="error"`) <= errorsBefore {
				return "no failed sync in mode " + mode + " yet"
			}
			return ""
		})
		holds(mode)
	}
	// restart while the API is still broken: the snapshot answers
	s.Restart()
	holds("restart during the outage")
	if !strings.Contains(s.Log(), "from snapshot") {
		t.Errorf("no snapshot load in the log:\n%s", s.Log())
	}

	orch.set("", v3)
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeAAAA, "2001:db8::6")
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "[NODATA]")
	expectAnswers(t, addr, "_http._tcp.atlas.svc.orch.", dns.TypeSRV, "0 10 31083 node-6.node.svc.orch.")
	if orch.count("401") != 0 {
		t.Errorf("%d requests without the bearer token", orch.count("401"))
	}
	if v := s.Metric("coredns_endpointsvc_last_sync_timestamp_seconds", `source="orch"`); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last_sync_timestamp_seconds = %v", v)
	}
	if !strings.Contains(s.Log(), "Source orch recovered") {
		t.Errorf("no recovery in the log:\n%s", s.Log())
	}
}

// The orch source over TLS, the server's certificate checked against a CA
// file given with `tls CA`; a reload (SIGUSR1) keeps answering and leaves no
// goroutine behind.
func TestEndpointsvcOrchTLSAndReload(t *testing.T) {
	state := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{{"t-1", "atlas", "node-1", "running", "healthy", 31081}})
	orch := &fakeOrch{state: state, version: 1, hits: map[string]int{}}
	ts := httptest.NewTLSServer(orch)
	defer ts.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}))
	apiPort := ts.Listener.Addr().(*net.TCPAddr).Port
	s := Start(t, esvcCorefile("source orch "+ts.URL+"/state 200ms\ntls ca.pem"),
		Options{Files: map[string]string{"ca.pem": ca}, Ports: map[int]int{apiPort: apiPort}})
	addr := s.DNS()
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10")

	goroutines := func() float64 { return s.Metric("go_goroutines") }
	before := goroutines()
	// query all along the reloads: the new instance must not answer SERVFAIL
	stop := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		defer close(bad)
		for n := 0; n < 2000; n++ {
			select {
			case <-stop:
				return
			default:
			}
			r, err := TryQuery(addr, "atlas.svc.orch.", dns.TypeA, "udp")
			if err == nil && (r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1) {
				bad <- r.String()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for i := 1; i <= 3; i++ {
		s.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if n := strings.Count(s.Log(), "Reloading complete"); n < i {
				return fmt.Sprintf("reload %d not complete (%d so far)", i, n)
			}
			return ""
		})
		expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10")
	}
	close(stop)
	if msg, ok := <-bad; ok {
		t.Errorf("a reply during a reload was not the answer:\n%s", msg)
	}
	Eventually(t, 5*time.Second, func() string {
		if after := goroutines(); after > before+2 {
			return fmt.Sprintf("goroutines grew over 3 reloads: %v → %v", before, after)
		}
		return ""
	})
	if s.Exited() {
		t.Fatal("meshdns exited on reload")
	}
	if n := strings.Count(s.Log(), "Reloading complete"); n != 3 {
		t.Errorf("%d reloads completed, want 3", n)
	}
}

// A reload (SIGUSR1) while the orch source is dead and there is no snapshot
// keeps answering: the old instance hands its table to the new one.
func TestEndpointsvcReloadDeadSourceNoSnapshot(t *testing.T) {
	state := esvcState([]string{"atlas"}, esvcNodes, []esvcTask{{"t-1", "atlas", "node-1", "running", "healthy", 31081}})
	orch := &fakeOrch{state: state, version: 1, hits: map[string]int{}}
	ts := httptest.NewServer(orch)
	defer ts.Close()
	apiPort := ts.Listener.Addr().(*net.TCPAddr).Port
	s := Start(t, esvcCorefile("source orch "+ts.URL+"/state 200ms\ntimeout 300ms\nmax_backoff 400ms"),
		Options{Ports: map[int]int{apiPort: apiPort}})
	addr := s.DNS()
	expectAnswers(t, addr, "atlas.svc.orch.", dns.TypeA, "192.0.2.10")

	ts.Close() // the control plane is gone: connections are refused
	for i := 1; i <= 2; i++ {
		s.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if n := strings.Count(s.Log(), "Reloading complete"); n < i {
				return fmt.Sprintf("%d reloads complete, want %d", n, i)
			}
			return ""
		})
		if s.Exited() {
			t.Fatal("meshdns exited on reload")
		}
		for j := 0; j < 5; j++ {
			if got := answers(t, addr, "atlas.svc.orch.", dns.TypeA); strings.Join(got, ",") != "192.0.2.10" {
				t.Fatalf("after reload %d: answers %q, want the carried table's", i, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := strings.Count(s.Log(), "carried over the reload"); n != 2 {
		t.Errorf("%d tables carried over, want 2:\n%s", n, s.Log())
	}
}
