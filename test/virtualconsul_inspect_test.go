package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// vcInspectCorefile is vcCorefile with the inspect listener.
var vcInspectCorefile = strings.Replace(vcCorefile, "    errors\n", "    errors\n    inspect 127.0.0.1:8182\n", 1)

// vcListing is GET /virtualconsul as a client reads it.
type vcListing struct {
	Plugin    string
	Instances []struct {
		Zones      []string
		Source     string
		TableFrom  string `json:"table_from"`
		Generation uint64
		Count      int        `json:"entries_count"`
		LastSync   *time.Time `json:"last_sync"`
		Snapshot   *struct {
			Path string
			Age  *float64 `json:"age_seconds"`
		}
		Entries []struct {
			Key       string
			Addresses []string
			Ambiguous bool
		}
	}
}

// getListing reads GET /virtualconsul of inspect at addr.
func getListing(t *testing.T, addr string) vcListing {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/virtualconsul")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var l vcListing
	if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil {
		t.Fatalf("GET /virtualconsul: %s: %s", resp.Status, b)
	}
	return l
}

// TestVirtualConsulInspect reads the listing of the real binary and checks
// it against the answers: every entry listed answers its addresses (A and
// AAAA, a dual entry both), an ambiguous one goes to the servers, nothing
// is listed that the table does not answer; a new table shows with a
// higher generation.
func TestVirtualConsulInspect(t *testing.T) {
	consul := startConsulStandIn(t)
	table := map[string][]string{
		vcFull("web"): {"240.0.0.1"}, vcFull("v6"): {"fd00::6"}, vcFull("dual"): {"240.0.0.9", "fd00::9"},
		vcFull("amb"): {"240.0.0.4", "240.0.0.5"}, "db.virtual.default.ns.part.ap.dc2.dc.consul": {"240.0.0.3"},
	}
	s := Start(t, vcInspectCorefile, Options{Files: map[string]string{"table.json": vcTable(table)}, Ports: map[int]int{5399: consul.Port(1053)}})
	l := getListing(t, s.Addr(8182))
	if l.Plugin != "virtualconsul" || len(l.Instances) != 1 {
		t.Fatalf("listing %+v", l)
	}
	in := l.Instances[0]
	if in.Source != "file" || in.Count != len(table) || len(in.Entries) != len(table) || in.Generation == 0 || in.LastSync == nil ||
		in.Snapshot == nil || in.Snapshot.Path != filepath.Join(s.Dir, "vc-snapshot.json") {
		t.Fatalf("instance %+v", in)
	}
	for _, e := range in.Entries {
		want := table[e.Key]
		sort.Strings(want)
		got := append([]string(nil), e.Addresses...)
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") || e.Ambiguous != (len(want) == 2 && !strings.Contains(want[1], ":")) {
			t.Fatalf("listed %+v, the table file says %v", e, want)
		}
		checkListed(t, s.DNS(), e.Key, e.Addresses, e.Ambiguous)
	}

	// A new table: a higher generation, the new entry listed and answered.
	table[vcFull("api")] = []string{"240.0.0.2"}
	writeAtomic(t, filepath.Join(s.Dir, "table.json"), vcTable(table))
	Eventually(t, 5*time.Second, func() string {
		l2 := getListing(t, s.Addr(8182))
		if g := l2.Instances[0].Generation; g <= in.Generation || l2.Instances[0].Count != len(table) {
			return fmt.Sprintf("generation %d (was %d), %d entries", g, in.Generation, l2.Instances[0].Count)
		}
		return ""
	})
	checkListed(t, s.DNS(), vcFull("api"), []string{"240.0.0.2"}, false)
}

// checkListed asks meshdns for a listed entry: an IPv4 address answers A,
// an IPv6 one AAAA, an ambiguous entry neither from the table (the stand-in
// servers answer: 10.x or nothing).
func checkListed(t *testing.T, addr, key string, addrs []string, ambiguous bool) {
	t.Helper()
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		var want []string
		for _, a := range addrs {
			if strings.Contains(a, ":") == (qt == dns.TypeAAAA) && !ambiguous {
				want = append(want, a)
			}
		}
		got, err := answersOf(addr, key+".", qt)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if ambiguous && !strings.HasPrefix(g, "10.") {
				t.Fatalf("%s %s = %v: an ambiguous entry answered from the table", key, dns.TypeToString[qt], got)
			}
		}
		if !ambiguous && strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s %s = %v, listed %v", key, dns.TypeToString[qt], got, want)
		}
	}
}
