package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestReloadHundredTimesMemoryFlat: 100 reloads, each to blocks with a new
// extra zone (so every reload changes every plugin's carry key), during a
// source outage, each plugin holding a table of thousands of names from its
// snapshot. Every handed-over table that no new instance takes must be
// dropped by the end of its reload: with the drop disabled, each reload
// keeps one more copy of every table for the life of the process (measured:
// heap in use 195 MiB after 15 reloads, 1159 MiB after 100; with it, 78 and
// 68 MiB). The heap in use after the last
// reloads must stay within a bound of the heap after the first ones, and
// every reload must answer the newest state.
func TestReloadHundredTimesMemoryFlat(t *testing.T) {
	const n = 20000
	vc := make(map[string][]string, n)
	for i := range n {
		vc[vcFull(fmt.Sprintf("svc%d", i))] = []string{fmt.Sprintf("240.%d.%d.%d", i>>16, (i>>8)&255, i&255)}
	}
	services := make([]string, 0, n/4)
	for i := range n / 4 {
		services = append(services, fmt.Sprintf("svc%d", i))
	}
	type rec struct {
		ID     string `json:"id"`
		IP     string `json:"ip"`
		Domain string `json:"domain"`
	}
	recs := make([]rec, 0, n/4)
	for i := range n / 4 {
		recs = append(recs, rec{fmt.Sprintf("c%d", i), fmt.Sprintf("10.32.%d.%d", i>>8, i&255), fmt.Sprintf("h%d.weave.local.", i)})
	}
	weave, err := json.Marshal(map[string]any{"version": 1, "records": recs})
	if err != nil {
		t.Fatal(err)
	}
	// The sources (files) exist for the first start only: every reload
	// runs during the outage, from the snapshots and the carried tables.
	files := map[string]string{
		"data/vc.json":      vcTable(vc),
		"data/state.json":   esvcState(services, esvcNodes, nil),
		"data/records.json": string(weave),
		"data/.keep":        "",
	}
	head := ".:1053 {\n    bind 127.0.0.1\n    ready 127.0.0.1:18181\n    prometheus 127.0.0.1:19153\n    whoami\n}\n"
	corefile := func(extra string) string {
		return head + fmt.Sprintf(`consul.:1053 %[1]s:1053 {
    bind 127.0.0.1
    virtualconsul consul. %[1]s {
        source file data/vc.json 200ms
        snapshot data/vc-snap.json
    }
}
svc.orch.:1053 %[2]s:1053 {
    bind 127.0.0.1
    endpointsvc svc.orch. %[2]s {
        source file data/state.json 200ms
        snapshot data/esvc-snap.json
    }
}
weave.local.:1053 %[3]s:1053 {
    bind 127.0.0.1
    mdnsfallback weave.local. %[3]s {
        api 127.0.0.1:6785
        snapshot data/records.json
    }
}
`, "a-"+extra+".consul.", "a-"+extra+".orch.", "a-"+extra+".local.")
	}
	s := Start(t, corefile("x"), Options{Files: files, WaitDNS: true})
	check := func() {
		t.Helper()
		for _, q := range []struct{ name, want string }{
			{"svc19999.virtual.consul.", "240.0.78.31"},
			{"svc4999.svc.orch.", "[NODATA]"},
			{"h4999.weave.local.", "10.32.19.135"},
		} {
			Eventually(t, 5*time.Second, func() string {
				if got := answers(t, s.DNS(), q.name, dns.TypeA); strings.Join(got, ",") != q.want {
					return fmt.Sprintf("%s = %v, want %s", q.name, got, q.want)
				}
				return ""
			})
		}
	}
	check()
	Eventually(t, 5*time.Second, func() string {
		for _, f := range []string{"vc-snap.json", "esvc-snap.json"} {
			if st, err := os.Stat(filepath.Join(s.Dir, "data", f)); err != nil || st.Size() < 100000 {
				return "no full snapshot " + f + " yet"
			}
		}
		return ""
	})
	for _, f := range []string{"vc.json", "state.json"} {
		if err := os.Remove(filepath.Join(s.Dir, "data", f)); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() float64 { return s.Metric("go_memstats_heap_inuse_bytes") }
	var early, late float64
	start := time.Now()
	for i := 1; i <= 100; i++ {
		reloadTo(t, s, corefile(fmt.Sprint(i)), i) // a new key every time
		if i%10 == 0 {
			check()
		}
		switch h := heap(); {
		case i >= 6 && i <= 15:
			early = max(early, h)
		case i >= 91:
			late = max(late, h)
		}
	}
	check()
	t.Logf("100 reloads in %v; heap in use: max %.1f MiB over reloads 6-15, %.1f MiB over 91-100; %v goroutines",
		time.Since(start).Round(time.Second), early/(1<<20), late/(1<<20), s.Metric("go_goroutines"))
	// A leak of one table set per reload adds ~11 MiB a reload (~950 MiB
	// over the 85 reloads between the windows); GC's own swing stays
	// within half a heap.
	if late > 1.5*early+16<<20 {
		t.Fatalf("heap in use grew from %.1f MiB to %.1f MiB over 85 reloads", early/(1<<20), late/(1<<20))
	}
}
