package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Scenario 1: Avahi on host B publishes a name; dig at meshdns on host A
// resolves it through mDNS, and the second query comes from the cache with
// no mDNS packet sent.
func TestMdnsfallbackResolvesFromAvahi(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	RequireTool(t, "avahi-publish", "avahi-utils")
	a, b := newHostPair(t)
	bus := startDBus(t)
	b.startAvahi(t, bus, "")
	pub := startBG(t, b, bus, "avahi-publish", "-a", "-R", "web.weave.local", "10.32.7.7")
	pub.waitLog(t, "Established", 10*time.Second)
	m := a.startMeshdns(t, "")

	if got := m.dig(t, "web.weave.local", "A"); strings.Join(got, ",") != "10.32.7.7" {
		t.Fatalf("first query: %v", got)
	}
	sent := m.metric(t, "coredns_mdnsfallback_mdns_queries_sent_total")
	if sent < 1 || m.metric(t, "coredns_mdnsfallback_requests_total", `result="mdns"`) != 1 {
		t.Fatalf("first query not answered over mDNS: sent=%v", sent)
	}
	if got := m.dig(t, "WEB.weave.local", "A"); strings.Join(got, ",") != "10.32.7.7" {
		t.Fatalf("second query: %v", got)
	}
	if after := m.metric(t, "coredns_mdnsfallback_mdns_queries_sent_total"); after != sent {
		t.Fatalf("second query sent mDNS packets: %v → %v", sent, after)
	}
	if c := m.metric(t, "coredns_mdnsfallback_requests_total", `result="cache"`); c != 1 {
		t.Fatalf("cache hits: %v", c)
	}
	// A name nobody holds: NXDOMAIN after the timeout, then negative-cached.
	if st := m.digStatus(t, "nobody.weave.local", "A"); st != "NXDOMAIN" {
		t.Fatalf("unknown name: %s", st)
	}
	if st := m.digStatus(t, "nobody.weave.local", "A"); st != "NXDOMAIN" || m.metric(t, "coredns_mdnsfallback_requests_total", `result="negative"`) != 1 {
		t.Fatalf("negative cache: %s", st)
	}
}

// Scenario 2: a record PUT into meshdns on host A; avahi-resolve on host B
// resolves it. Avahi starts after the PUT, so it must ask and meshdns's
// responder must answer; a second name put while Avahi runs resolves too.
func TestMdnsfallbackAnswersAvahi(t *testing.T) {
	RequireTool(t, "curl", "curl")
	RequireTool(t, "avahi-resolve", "avahi-utils")
	a, b := newHostPair(t)
	m := a.startMeshdns(t, "")
	if code, body := m.api(t, "PUT", "/name/c0ffee/10.32.1.5", "-d", "domain=db.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// The name is announced twice, one second apart (RFC 6762 §8.3), on
	// each link (IPv4 and, where the machine has it, IPv6); Avahi starts
	// once they are over (none for longer than the interval), so it has to
	// ask.
	Eventually(t, 6*time.Second, func() string {
		n := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="announcement"`)
		time.Sleep(1500 * time.Millisecond)
		if again := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="announcement"`); n < 2 || again != n {
			return fmt.Sprintf("%v then %v announcements: still announcing", n, again)
		}
		return ""
	})
	bus := startDBus(t)
	b.startAvahi(t, bus, "")
	resolve := func(name, want string) {
		t.Helper()
		Eventually(t, 10*time.Second, func() string {
			out, err := b.exec(t, bus, "avahi-resolve", "-4", "-n", name)
			if err != nil || !strings.Contains(out, want) {
				return fmt.Sprintf("avahi-resolve %s: %v %s", name, err, out)
			}
			return ""
		})
	}
	resolve("db.weave.local", "10.32.1.5")
	answered := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="multicast"`) +
		m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="unicast"`)
	if answered < 1 {
		t.Fatalf("meshdns sent no answer to Avahi's query")
	}
	if code, body := m.api(t, "PUT", "/name/c0ffee/10.32.1.6", "-d", "fqdn=cache.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	resolve("cache.weave.local", "10.32.1.6")
}

// Scenario 3: two meshdns, one per host: a name registered on A resolves at
// B (asked over mDNS when B started after the PUT, learnt from A's
// announcement when B was already up); after DELETE on A, B stops answering
// once the goodbye arrives; when A stops, B forgets the rest of A's names.
func TestMdnsfallbackTwoHostsGoodbye(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	a, b := newHostPair(t)
	ma := a.startMeshdns(t, "")
	if code, body := ma.api(t, "PUT", "/name/c1/10.32.2.1", "-H", "Content-Type: application/json",
		"-d", `{"fqdn": "app.weave.local.", "routing_prefix": 12, "ttl": 120}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// B starts once the put's two announcements (at once and a second
	// later) are over, so its first lookup asks the network; a timeout of
	// 1 s, not 250 ms, for a loaded machine (the lookup ends at the first
	// answer's collection window, not at the timeout).
	time.Sleep(1500 * time.Millisecond)
	mb := b.startMeshdns(t, "timeout 1s\n")
	if got := mb.dig(t, "app.weave.local", "A"); strings.Join(got, ",") != "10.32.2.1" ||
		mb.metric(t, "coredns_mdnsfallback_requests_total", `result="mdns"`) != 1 {
		t.Fatalf("B resolving A's name over mDNS: %v", got)
	}
	if got := mb.dig(t, "app.weave.local", "A"); strings.Join(got, ",") != "10.32.2.1" ||
		mb.metric(t, "coredns_mdnsfallback_requests_total", `result="cache"`) != 1 {
		t.Fatalf("B's second answer not from its cache: %v", got)
	}
	// A name put while B runs reaches B's cache through the announcement:
	// once B heard it, a lookup sends no query.
	answersBefore := mb.metric(t, "coredns_mdnsfallback_mdns_answers_received_total")
	if code, body := ma.api(t, "PUT", "/name/c2/10.32.2.2", "-d", "domain=late.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	Eventually(t, 5*time.Second, func() string {
		if n := mb.metric(t, "coredns_mdnsfallback_mdns_answers_received_total"); n <= answersBefore {
			return "announcement not received yet"
		}
		return ""
	})
	sent := mb.metric(t, "coredns_mdnsfallback_mdns_queries_sent_total")
	Eventually(t, 5*time.Second, func() string {
		if got := mb.dig(t, "late.weave.local", "A"); strings.Join(got, ",") != "10.32.2.2" {
			return fmt.Sprintf("late name at B: %v", got)
		}
		return ""
	})
	if n := mb.metric(t, "coredns_mdnsfallback_mdns_queries_sent_total"); n != sent {
		t.Fatalf("B queried for an announced name: %v → %v", sent, n)
	}
	answersBefore = mb.metric(t, "coredns_mdnsfallback_mdns_answers_received_total")
	if code, body := ma.api(t, "DELETE", "/name/c1"); code != 200 || !strings.Contains(body, "10.32.2.1") {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	Eventually(t, 5*time.Second, func() string {
		if n := mb.metric(t, "coredns_mdnsfallback_mdns_answers_received_total"); n <= answersBefore {
			return "goodbye not received yet"
		}
		return ""
	})
	// The goodbye takes effect one second after it arrived (RFC 6762 §10.1),
	// long before the record's TTL of 120 s.
	time.Sleep(1100 * time.Millisecond)
	Eventually(t, 3*time.Second, func() string {
		if st := mb.digStatus(t, "app.weave.local", "A"); st != "NXDOMAIN" {
			return "B still answers after the goodbye: " + st
		}
		return ""
	})
	if st := ma.digStatus(t, "app.weave.local", "A"); st != "NXDOMAIN" {
		t.Fatalf("A still answers after DELETE: %s", st)
	}
	if got := mb.dig(t, "late.weave.local", "A"); strings.Join(got, ",") != "10.32.2.2" {
		t.Fatalf("the other name went too: %v", got)
	}
	// A stops (SIGTERM): its goodbyes (RFC 6762 §10.1) empty B's cache of
	// A's names one second later, long before their TTLs end.
	answersBefore = mb.metric(t, "coredns_mdnsfallback_mdns_answers_received_total")
	ma.proc.stop()
	Eventually(t, 3*time.Second, func() string {
		if n := mb.metric(t, "coredns_mdnsfallback_mdns_answers_received_total"); n <= answersBefore {
			return fmt.Sprintf("no goodbye from A's stop reached B (answers %v → %v)", answersBefore, n)
		}
		return ""
	})
	time.Sleep(1100 * time.Millisecond)
	Eventually(t, 3*time.Second, func() string { // the TTL is 30 s
		if st := mb.digStatus(t, "late.weave.local", "A"); st != "NXDOMAIN" {
			return "B still answers A's name after A stopped: " + st
		}
		return ""
	})
}

const apiCorefile = `weave.local.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    mdnsfallback {
        api 127.0.0.1:6785
        token_file token
        snapshot records.json
        reverse 10.32.0.0/12
    }
}
`

func httpDo(t *testing.T, method, url, ctype, body, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b := new(strings.Builder)
	_, _ = fmt.Fprint(b, readAll(resp))
	return resp.StatusCode, b.String()
}

func readAll(resp *http.Response) string {
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// Scenario 4: bad API input leaves the database unchanged; a restart with
// snapshot keeps the records.
func TestMdnsfallbackAPIAndSnapshot(t *testing.T) {
	s := Start(t, apiCorefile, Options{Files: map[string]string{"token": "t0ken\n"}})
	api := "http://" + s.Addr(6785)
	form := "application/x-www-form-urlencoded"
	if code, body := httpDo(t, "PUT", api+"/name/c1/10.32.0.10", form, "domain=web.weave.local&ttl=15", "t0ken"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if code, body := httpDo(t, "PUT", api+"/name/c2/fd00::20", "application/json", `{"fqdn":"web.weave.local"}`, "t0ken"); code != 200 {
		t.Fatalf("PUT JSON: %d %s", code, body)
	}
	_, before := httpDo(t, "GET", api+"/name/", "", "", "")
	for _, tc := range []struct {
		method, path, ctype, body, token string
		code                             int
	}{
		{"PUT", "/name/c1/10.32.0.300", form, "domain=x.weave.local", "t0ken", 400},
		{"PUT", "/name/c1/10.32.0.11", form, "domain=x.example.org", "t0ken", 400},
		{"PUT", "/name/" + strings.Repeat("i", 300) + "/10.32.0.11", form, "domain=x.weave.local", "t0ken", 400},
		{"PUT", "/name/c1/10.32.0.11", "application/json", `{"domain":`, "t0ken", 400},
		{"PUT", "/name/c1/10.32.0.11", "application/json", `{"domain":"x.weave.local","x":"` + strings.Repeat("a", 70000) + `"}`, "t0ken", 413},
		{"PUT", "/name/c1/10.32.0.11", form, "domain=x.weave.local", "", 401},
		{"DELETE", "/name/c1", "", "", "wrong", 401},
		{"POST", "/name/c1/10.32.0.11", form, "domain=x.weave.local", "t0ken", 405},
	} {
		code, body := httpDo(t, tc.method, api+tc.path, tc.ctype, tc.body, tc.token)
		if code != tc.code || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: %d %s, want %d with a JSON error", tc.method, tc.path[:min(len(tc.path), 40)], code, body, tc.code)
		}
	}
	if _, after := httpDo(t, "GET", api+"/name/", "", "", ""); after != before {
		t.Fatalf("bad input changed the database:\n%s\n%s", before, after)
	}
	check := func(when string) {
		t.Helper()
		r := Query(t, s.DNS(), "web.weave.local.", dns.TypeA, "udp")
		if got := Rdata(r); strings.Join(got, ",") != "10.32.0.10" || r.Answer[0].Header().Ttl != 15 {
			t.Fatalf("%s: A %v", when, r)
		}
		if got := KdigShort(t, s.DNS(), "web.weave.local", "AAAA"); strings.Join(got, ",") != "fd00::20" {
			t.Fatalf("%s: AAAA %v", when, got)
		}
		if got := DigShort(t, s.DNS(), "-x", "10.32.0.10"); len(got) != 0 {
			// the server block holds only weave.local.: reverse names are not routed here
			t.Fatalf("%s: PTR %v", when, got)
		}
	}
	check("before restart")
	Eventually(t, 5*time.Second, func() string {
		b, _ := os.ReadFile(filepath.Join(s.Dir, "records.json"))
		if !strings.Contains(string(b), "fd00::20") {
			return "snapshot not written: " + string(b)
		}
		return ""
	})
	s.Restart()
	check("after restart")
	if _, after := httpDo(t, "GET", api+"/name/", "", "", ""); after != before {
		t.Fatalf("restart changed the database:\n%s\n%s", before, after)
	}
	if code, body := httpDo(t, "GET", api+"/status", "", "", ""); code != 200 || !strings.Contains(body, `"records":2`) {
		t.Fatalf("status: %d %s", code, body)
	}
}

// TestMdnsfallbackLatency measures the mDNS round trip through Avahi: each
// of MDNSFALLBACK_LATENCY_N (default 50) distinct names that Avahi holds in
// its static hosts file is asked once at meshdns, so every answer is an
// mDNS query to Avahi and its reply. It logs the median and p99.
func TestMdnsfallbackLatency(t *testing.T) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("MDNSFALLBACK_LATENCY_N")); err == nil && v > 0 && v <= 2000 {
		n = v
	}
	a, b := newHostPair(t)
	bus := startDBus(t)
	var hosts strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&hosts, "10.32.%d.%d lat%d.weave.local\n", 100+i/250, 1+i%250, i)
	}
	b.startAvahi(t, bus, hosts.String())
	// Static entries answer after Avahi's probing; wait for the last one.
	Eventually(t, 20*time.Second, func() string {
		out, err := b.exec(t, bus, "avahi-resolve", "-4", "-n", fmt.Sprintf("lat%d.weave.local", n-1))
		if err != nil {
			return "avahi not publishing yet: " + out
		}
		return ""
	})
	// Start meshdns after Avahi's announcements, which it would cache:
	// Avahi announces each record up to four times, the intervals doubling
	// from one second, and the names are asked over a second or more (each
	// query collects answers for 20 ms after the first).
	time.Sleep(7 * time.Second)
	// query_rate: this measures the round trip of back-to-back distinct
	// names, not the query budget (TestRandomNameFlood's)
	m := a.startMeshdns(t, "        timeout 1s\n        query_rate 10000\n")
	var lat []time.Duration
	inNetns(t, a.ns, func() {
		c := dns.Client{Net: "udp", Timeout: 3 * time.Second}
		for i := 0; i < n; i++ {
			q := new(dns.Msg)
			q.SetQuestion(fmt.Sprintf("lat%d.weave.local.", i), dns.TypeA)
			start := time.Now()
			r, _, err := c.Exchange(q, "127.0.0.1:1053")
			d := time.Since(start)
			if err != nil || len(r.Answer) != 1 {
				t.Errorf("lat%d: %v %v", i, err, r)
				continue
			}
			lat = append(lat, d)
		}
	})
	if len(lat) == 0 {
		t.Fatal("no answers")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p99 := lat[min(len(lat)-1, (len(lat)*99+99)/100-1)]
	t.Logf("mDNS round trip through Avahi over %d queries: median %v p99 %v max %v", len(lat), lat[len(lat)/2], p99, lat[len(lat)-1])
	if out := os.Getenv("MDNSFALLBACK_LATENCY_OUT"); out != "" {
		_ = os.WriteFile(out, []byte(fmt.Sprintf("queries=%d median_ms=%.3f p99_ms=%.3f max_ms=%.3f\n", len(lat),
			ms(lat[len(lat)/2]), ms(p99), ms(lat[len(lat)-1]))), 0o644)
	}
	if got := m.metric(t, "coredns_mdnsfallback_requests_total", `result="mdns"`); int(got) != len(lat) {
		t.Fatalf("%v answers over mDNS, want %d", got, len(lat))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestMdnsfallbackReload: a reload (SIGUSR1) without a snapshot keeps the
// records, and the API listens again afterwards.
func TestMdnsfallbackReload(t *testing.T) {
	s := Start(t, `weave.local.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    mdnsfallback {
        api 127.0.0.1:6785
    }
}
`)
	api := "http://" + s.Addr(6785)
	if code, body := httpDo(t, "PUT", api+"/name/c1/10.32.0.10?domain=web.weave.local", "", "", ""); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	for i := 1; i <= 2; i++ {
		s.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if n := strings.Count(s.Log(), "Reloading complete"); n < i {
				return "reload not complete"
			}
			return ""
		})
	}
	if got := Rdata(Query(t, s.DNS(), "web.weave.local.", dns.TypeA, "udp")); strings.Join(got, ",") != "10.32.0.10" {
		t.Fatalf("after reload: %v", got)
	}
	Eventually(t, 5*time.Second, func() string {
		code, body := httpDo(t, "GET", api+"/name/c1", "", "", "")
		if code != 200 || !strings.Contains(body, "10.32.0.10") {
			return fmt.Sprintf("API after reload: %d %s", code, body)
		}
		return ""
	})
}

// TestMdnsfallbackReloadTwoBlocks: with two mdnsfallback server blocks and
// no snapshot, a reload keeps both blocks' records (each new instance takes
// only its own block's carried records).
func TestMdnsfallbackReloadTwoBlocks(t *testing.T) {
	s := Start(t, `weave.local.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    mdnsfallback {
        api 127.0.0.1:6785
    }
}
other.local.:1053 {
    bind 127.0.0.1
    mdnsfallback other.local. {
        api 127.0.0.1:6786
    }
}
`)
	blocks := []struct{ api, name, ip string }{
		{"http://" + s.Addr(6785), "web.weave.local", "10.32.0.10"},
		{"http://" + s.Addr(6786), "db.other.local", "10.32.0.20"},
	}
	for _, b := range blocks {
		if code, body := httpDo(t, "PUT", b.api+"/name/c1/"+b.ip+"?domain="+b.name, "", "", ""); code != 200 {
			t.Fatalf("PUT %s: %d %s", b.name, code, body)
		}
	}
	for i := 1; i <= 2; i++ {
		s.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if n := strings.Count(s.Log(), "Reloading complete"); n < i {
				return "reload not complete"
			}
			return ""
		})
		for _, b := range blocks {
			if got := Rdata(Query(t, s.DNS(), b.name+".", dns.TypeA, "udp")); strings.Join(got, ",") != b.ip {
				t.Fatalf("after reload %d: %s = %v, want %s", i, b.name, got, b.ip)
			}
		}
	}
}
