package test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// consulStandIn is the zone the stand-in "Consul servers" (a second meshdns
// serving a zone file) answer: every name the virtualconsul block must pass
// on answers from here with a 10.x address, so a test can tell who answered.
const consulStandIn = `$ORIGIN consul.
$TTL 30
@ IN SOA ns.consul. hostmaster.consul. 1 3600 600 86400 30
@ IN NS ns.consul.
ns IN A 127.0.0.1
web.virtual IN A 10.9.9.9
web.service IN A 10.0.0.10
web.service.virtual IN A 10.0.0.11
amb.virtual IN A 10.0.0.12
web.virtual.dc9.dc IN A 10.0.0.13
nope.virtual IN A 10.0.0.14
web.virtual.p1.peer IN A 10.0.0.15
`

// vcTable returns a table file (virtual_domains array) for name → VIPs;
// several VIPs make an ambiguous entry.
func vcTable(entries map[string][]string) string {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("[")
	for i, n := range names {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n {\"name\": %q, \"endpoint\": {\"address_list\": {\"address\": [\"%s\"]}}}", n, strings.Join(entries[n], `", "`))
	}
	b.WriteString("\n]\n")
	return b.String()
}

// vcFull is the full-form table key of a short service name.
func vcFull(service string) string {
	return service + ".virtual.default.ns.default.ap.dc1.dc.consul"
}

// startConsulStandIn starts the stand-in Consul servers: meshdns with the
// file plugin serving consulStandIn.
func startConsulStandIn(t *testing.T) *Server {
	t.Helper()
	return Start(t, `consul.:1053 {
    bind 127.0.0.1
    file consul.zone
}
`, Options{Files: map[string]string{"consul.zone": consulStandIn}, WaitDNS: true})
}

// vcCorefile is the block under test: virtualconsul for consul. and an alt
// domain, misses forwarded to the stand-in servers on port 5399.
const vcCorefile = `consul.:1053 consul-alt.:1053 {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    virtualconsul consul. consul-alt. {
        source file table.json 100ms
        snapshot vc-snapshot.json
        ttl 7s
    }
    forward . 127.0.0.1:5399
}
`

// startVirtualConsul starts vcCorefile with its forward pointed at consul.
func startVirtualConsul(t *testing.T, consul *Server, files map[string]string, waitDNS bool) *Server {
	t.Helper()
	return Start(t, vcCorefile, Options{
		Files:   files,
		Ports:   map[int]int{5399: consul.Port(1053)},
		WaitDNS: waitDNS,
	})
}

// writeAtomic replaces path with content by rename, as an operator's tool
// (or consul-template) would.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// clients are the four real client runs every answer is checked with.
var clients = []struct {
	name string
	run  func(t testing.TB, addr string, args ...string) []string
	tcp  string
}{
	{"dig/udp", DigShort, ""},
	{"dig/tcp", DigShort, "+tcp"},
	{"kdig/udp", KdigShort, ""},
	{"kdig/tcp", KdigShort, "+tcp"},
}

// shortAll asks name/qtype with dig and kdig over UDP and TCP, fails unless
// all four agree, and returns their (sorted) +short answer.
func shortAll(t *testing.T, addr, name, qtype string) []string {
	t.Helper()
	var first []string
	for i, c := range clients {
		args := []string{name, qtype}
		if c.tcp != "" {
			args = append(args, c.tcp)
		}
		got := c.run(t, addr, args...)
		if i == 0 {
			first = got
			continue
		}
		if strings.Join(got, " ") != strings.Join(first, " ") {
			t.Fatalf("%s %s: %s says %v, %s says %v", name, qtype, clients[0].name, first, c.name, got)
		}
	}
	return first
}

// wantShort checks the four clients' answer for name/qtype is want.
func wantShort(t *testing.T, addr, name, qtype string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := shortAll(t, addr, name, qtype); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s %s = %v, want %v", name, qtype, got, want)
	}
}

// waitReloaded waits for caddy's "Reloading complete", logged once the new
// instance has started (its OnStartup ran) and the old one has stopped;
// "[INFO] Reloading" alone is logged before the new instance starts.
func waitReloaded(t *testing.T, s *Server) {
	t.Helper()
	Eventually(t, 10*time.Second, func() string {
		if !strings.Contains(s.Log(), "Reloading complete") {
			return "no \"Reloading complete\" in the log"
		}
		return ""
	})
}
