package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mdnsInspectCorefile is a weave.local. block with mdnsfallback asking
// the network on the namespace's veth, and inspect in another block (it
// lists every block's instance).
const mdnsInspectCorefile = `.:1054 {
    bind 127.0.0.1
    inspect 127.0.0.1:8182
    whoami
}
weave.local.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    mdnsfallback {
        api 127.0.0.1:6785
        interface VETH
        negative_ttl 30s
    }
}
`

// mdnsInspected is GET /mdnsfallback as a client reads it.
type mdnsInspected struct {
	Plugin    string
	Instances []struct {
		Generation uint64
		Count      int `json:"records_count"`
		Records    []struct{ Domain, ID, IP, Owner string }
		Cache      []struct {
			Name, Type string
			Answers    []struct {
				Data         string
				TTLRemaining uint32 `json:"ttl_remaining"`
			}
		}
		Negative []struct{ Name, Type string }
	}
}

// TestMdnsfallbackInspect reads the listing of the real binary in a
// namespace, with Avahi publishing a name on the other end of the veth,
// and checks it against the answers: every listed local record's name
// answers its address, the name Avahi answered is in the cache with the
// remaining TTL meshdns answers it with, the name nobody holds is in the
// negative cache, and a new record lists with a higher generation.
func TestMdnsfallbackInspect(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	RequireTool(t, "avahi-publish", "avahi-utils")
	a, b := newHostPair(t)
	bus := startDBus(t)
	b.startAvahi(t, bus, "")
	pub := startBG(t, b, bus, "avahi-publish", "-a", "-R", "far.weave.local", "10.32.7.7")
	pub.waitLog(t, "Established", 10*time.Second)
	m := &nsMeshdns{h: a, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(m.dir, "Corefile"), []byte(strings.Replace(mdnsInspectCorefile, "VETH", a.veth, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	for _, put := range [][2]string{{"/name/c1/10.32.0.10", "domain=web.weave.local"}, {"/name/c2/10.32.0.11", "domain=web.weave.local&ttl=15"},
		{"/name/c3/fd00::3", "domain=v6.weave.local"}} {
		if code, body := m.api(t, "PUT", put[0], "-d", put[1]); code != 200 {
			t.Fatalf("PUT %s: %d %s", put[0], code, body)
		}
	}
	if got := m.dig(t, "far.weave.local", "A"); !slices.Equal(got, []string{"10.32.7.7"}) {
		t.Fatalf("far.weave.local: %v", got)
	}
	if st := m.digStatus(t, "nobody.weave.local", "A"); st != "NXDOMAIN" {
		t.Fatalf("nobody.weave.local: %s", st)
	}

	l := getMdnsListing(t, m)
	in := l.Instances[0]
	if l.Plugin != "mdnsfallback" || len(l.Instances) != 1 || in.Count != 3 || len(in.Records) != 3 || in.Generation == 0 {
		t.Fatalf("listing %+v", l)
	}
	for _, r := range in.Records {
		qtype := "A"
		if strings.Contains(r.IP, ":") {
			qtype = "AAAA"
		}
		if got := m.dig(t, r.Domain, qtype); !slices.Contains(got, r.IP) || r.Owner != "" {
			t.Fatalf("listed %+v; %s %s answers %v", r, r.Domain, qtype, got)
		}
	}
	var far *struct {
		Data         string
		TTLRemaining uint32 `json:"ttl_remaining"`
	}
	for _, c := range in.Cache {
		if c.Name == "far.weave.local." && c.Type == "A" && len(c.Answers) == 1 && c.Answers[0].Data == "10.32.7.7" {
			far = &c.Answers[0]
		}
	}
	if far == nil {
		t.Fatalf("far.weave.local. A is not in the listed cache: %+v", in.Cache)
	}
	ttl := digTTL(t, m, "far.weave.local")
	if d := int(far.TTLRemaining) - ttl; d < 0 || d > 2 {
		t.Fatalf("far.weave.local.: listed remaining TTL %d, answered with %d", far.TTLRemaining, ttl)
	}
	if !slices.ContainsFunc(in.Negative, func(n struct{ Name, Type string }) bool { return n.Name == "nobody.weave.local." }) {
		t.Fatalf("nobody.weave.local. is not in the listed negative cache: %+v", in.Negative)
	}

	if code, body := m.api(t, "PUT", "/name/c4/10.32.0.12", "-d", "domain=api.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	l2 := getMdnsListing(t, m)
	if g := l2.Instances[0].Generation; g <= in.Generation || l2.Instances[0].Count != 4 {
		t.Fatalf("after a PUT: generation %d (was %d), %d records", g, in.Generation, l2.Instances[0].Count)
	}
	if got := m.dig(t, "api.weave.local", "A"); !slices.Equal(got, []string{"10.32.0.12"}) {
		t.Fatalf("api.weave.local: %v", got)
	}
}

// getMdnsListing reads GET /mdnsfallback inside meshdns's namespace.
func getMdnsListing(t *testing.T, m *nsMeshdns) mdnsInspected {
	t.Helper()
	out, err := m.h.exec(t, nil, "curl", "-sf", "http://127.0.0.1:8182/mdnsfallback")
	var l mdnsInspected
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Instances) != 1 {
		t.Fatalf("GET /mdnsfallback: %v\n%s", err, out)
	}
	return l
}

// digTTL is the TTL of name's first A record as meshdns answers it.
func digTTL(t *testing.T, m *nsMeshdns, name string) int {
	t.Helper()
	out, err := m.h.exec(t, nil, "dig", "@127.0.0.1", "-p", "1053", "+time=3", "+tries=1", "+noall", "+answer", name, "A")
	f := strings.Fields(out)
	if err != nil || len(f) < 2 {
		t.Fatalf("dig %s: %v %q", name, err, out)
	}
	ttl, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(fmt.Errorf("dig %s: %q: %w", name, out, err))
	}
	return ttl
}
