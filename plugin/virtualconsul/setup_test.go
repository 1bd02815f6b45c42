package virtualconsul

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		input string
		err   string // "" for success
		check func(t *testing.T, v *VirtualConsul)
	}{
		{`virtualconsul {
			source file /tmp/table.json
		}`, "", func(t *testing.T, v *VirtualConsul) {
			if !reflect.DeepEqual(zoneNames(v), []string{"consul."}) {
				t.Errorf("zones = %v", v.zones)
			}
			if k := v.src.Key(); k != "file /tmp/table.json" { // its interval: source.TestParseSources
				t.Errorf("file source = %q", k)
			}
			if v.ns != "default" || v.ap != "default" || v.dc != "dc1" || v.ttl != 5 || v.authoritative || v.snapshot != "" {
				t.Errorf("defaults = %+v", v)
			}
		}},
		{`virtualconsul consul. CORP.example alt.domain {
			source file /tmp/t.json 250ms
			snapshot ` + dir + `/snap.json
			namespace team
			partition part
			datacenter dc2
			ttl 30s
			authoritative
		}`, "", func(t *testing.T, v *VirtualConsul) {
			if !reflect.DeepEqual(zoneNames(v), []string{"corp.example.", "alt.domain.", "consul."}) {
				t.Errorf("zones = %v (want longest first)", v.zones)
			}
			if v.metricZone != "consul." {
				t.Errorf("metric zone = %q", v.metricZone)
			}
			if k := v.src.Key(); k != "file /tmp/t.json" {
				t.Errorf("file source = %q", k)
			}
			if v.snapshot != dir+"/snap.json" || v.ns != "team" || v.ap != "part" || v.dc != "dc2" || v.ttl != 30 || !v.authoritative || v.emptyGrace != 5*time.Minute {
				t.Errorf("options = %+v", v)
			}
		}},
		{`virtualconsul {
			snapshot ` + dir + `/snap.json
			ttl 0
		}`, "", func(t *testing.T, v *VirtualConsul) {
			if v.src != nil || v.ttl != 0 {
				t.Errorf("snapshot only: %+v", v)
			}
		}},
		{`virtualconsul {
			source file t.json
			ttl 7
		}`, "", func(t *testing.T, v *VirtualConsul) {
			if v.ttl != 7 {
				t.Errorf("ttl = %d", v.ttl)
			}
		}},
		// errors, each naming the line
		{`virtualconsul`, "Testfile:1 - Error during parsing: virtualconsul needs a source or a snapshot", nil},
		{`virtualconsul {
			source file
		}`, "Testfile:2 - Error during parsing: source file: want PATH [INTERVAL]", nil},
		{`virtualconsul {
			source file a b c
		}`, "Testfile:2 - Error during parsing: source file: want PATH [INTERVAL]", nil},
		{`virtualconsul {
			source file a.json never
		}`, `Testfile:2 - Error during parsing: source file: invalid interval "never"`, nil},
		{`virtualconsul {
			source file a.json -1s
		}`, `source file: invalid interval "-1s"`, nil},
		{`virtualconsul {
			source
		}`, "Testfile:2 - Error during parsing: Wrong argument count or unexpected line ending after 'source'", nil},
		{`virtualconsul {
			source catalog http://127.0.0.1:8500
		}`, `Testfile:2 - Error during parsing: unknown source type "catalog"`, nil},
		{`virtualconsul {
			source file a.json
			source file b.json
		}`, "Testfile:3 - Error during parsing: source given twice", nil},
		{`virtualconsul {
			source file /tmp/t.json
			empty_grace 1m
		}`, "empty_grace needs snapshot", nil},
		{`virtualconsul {
			source file /tmp/t.json
			snapshot ` + dir + `/snap.json
			empty_grace -1s
		}`, "Testfile:4 - Error during parsing: bad empty_grace", nil},
		{`virtualconsul {
			source file /tmp/t.json
			snapshot ` + dir + `/snap.json
			empty_grace 0
		}`, "", func(t *testing.T, v *VirtualConsul) {
			if v.emptyGrace != 0 {
				t.Errorf("empty_grace = %v, want 0", v.emptyGrace)
			}
		}},
		{`virtualconsul {
			source file a.json
			snapshot /nonexistent-dir/snap.json
		}`, `Testfile:3 - Error during parsing: snapshot directory "/nonexistent-dir" does not exist`, nil},
		{`virtualconsul {
			snapshot
		}`, "Wrong argument count", nil},
		{`virtualconsul {
			source file a.json
			namespace Bad.Name
		}`, `Testfile:3 - Error during parsing: namespace: invalid name "Bad.Name"`, nil},
		{`virtualconsul {
			source file a.json
			datacenter
		}`, "Testfile:3 - Error during parsing: Wrong argument count", nil},
		{`virtualconsul {
			source file a.json
			ttl 1.5s
		}`, `Testfile:3 - Error during parsing: ttl: invalid TTL "1.5s"`, nil},
		{`virtualconsul {
			source file a.json
			ttl -5s
		}`, `ttl: invalid TTL "-5s"`, nil},
		{`virtualconsul {
			source file a.json
			authoritative yes
		}`, "Testfile:3 - Error during parsing: Wrong argument count", nil},
		{`virtualconsul {
			source file a.json
			fallthrough
		}`, `Testfile:3 - Error during parsing: unknown property "fallthrough"`, nil},
		{`virtualconsul {
			source file a.json
		}
		virtualconsul {
			source file a.json
		}`, "this plugin", nil},
		{`virtualconsul {
			source envoy [::1]:8653 {
				timeout 100ms
			}
			ttl 3
		}`, "", func(t *testing.T, v *VirtualConsul) {
			if v.src != nil || v.remote == nil || v.remote.Address() != "[::1]:8653" || v.ttl != 3 {
				t.Errorf("envoy: src %v, remote %+v, ttl %d", v.src, v.remote, v.ttl)
			}
			if !v.Ready() {
				t.Error("remote-listener mode not ready")
			}
		}},
		{`virtualconsul {
			source envoy 127.0.0.1:8653
			authoritative
		}`, "source envoy keeps no table", nil},
		{`virtualconsul {
			source dns 127.0.0.1
		}`, `Testfile:2 - Error during parsing: unknown source type "dns"`, nil},
	}
	for i, tc := range tests {
		c := caddy.NewTestController("dns", tc.input)
		v, err := parse(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("test %d: error = %v, want %q", i, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("test %d: %v", i, err)
			continue
		}
		tc.check(t, v)
	}
}

// TestLifecycle starts and stops the plugin as CoreDNS does and checks the
// snapshot is loaded at once, the source runs, and no goroutine survives.
func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap.json")
	tbl, _ := table.Build([]table.Entry{{Name: webKey, Addresses: []string{"240.0.0.1"}}})
	if err := writeSnapshot(snap, tbl); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "table.json")
	c := caddy.NewTestController("dns", `virtualconsul {
		source file `+file+` 10ms
		snapshot `+snap+`
	}`)
	v, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if v.Ready() {
		t.Fatal("ready before start")
	}
	before := runtime.NumGoroutine()
	if err := v.start(); err != nil {
		t.Fatal(err)
	}
	if n := runtime.NumGoroutine(); n <= before {
		t.Fatalf("goroutines %d after start, %d before: the source does not run", n, before)
	}
	if !v.Ready() || v.table.Load().Len() != 1 {
		t.Fatal("snapshot not loaded at start")
	}
	// The file appears: the source picks it up and rewrites the snapshot.
	writeTable(t, file, map[string]string{webKey: "240.0.0.9", apiKey: "240.0.0.2"})
	waitFor(t, func() bool { return v.table.Load().Len() == 2 })
	waitFor(t, func() bool {
		s, err := readSnapshot(snap)
		return err == nil && s != nil && s.Len() == 2
	})
	if err := v.stop(); err != nil {
		t.Fatal(err)
	}
	// stop has waited for the source's goroutine to finish; give it the
	// moment it needs to return after closing done.
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
	_ = v.stop() // a second stop is harmless
}

func zoneNames(v *VirtualConsul) []string {
	var out []string
	for _, z := range v.zones {
		out = append(out, z.Zone)
	}
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCarry hands the table across a reload as CoreDNS does (OnRestart on
// the old instance, OnStartup on the new one) with a dead source and no
// snapshot; a failed reload takes it back; another block's key gets nothing.
func TestCarry(t *testing.T) {
	file := filepath.Join(t.TempDir(), "table.json")
	newVC := func(keys ...string) *VirtualConsul {
		t.Helper()
		c := caddy.NewTestController("dns", `virtualconsul {
			source file `+file+` 10ms
		}`)
		c.ServerBlockKeys = keys
		v, err := parse(c)
		if err != nil {
			t.Fatal(err)
		}
		carried.Want(v.carryKey) // as setup does
		return v
	}
	old := newVC("consul.:1053")
	writeTable(t, file, map[string]string{webKey: "240.0.0.1"})
	if err := old.start(); err != nil {
		t.Fatal(err)
	}
	defer old.stop()
	waitFor(t, old.Ready)
	if err := os.Remove(file); err != nil { // the control plane goes away
		t.Fatal(err)
	}

	// A reload that fails: the old instance keeps its table, nothing waits.
	_ = old.handOver()
	_ = old.keep()
	if v := newVC("consul.:1053"); v.start() != nil || v.Ready() {
		t.Fatal("a failed reload left its table for the next instance")
	} else {
		_ = v.stop()
	}

	// A reload that succeeds: the new instance serves the old table at once.
	_ = old.handOver()
	other := newVC("consul.:1054") // the same zone and source in another block
	next := newVC("consul.:1053")  // CoreDNS sets up every block before it starts one
	if err := other.start(); err != nil {
		t.Fatal(err)
	}
	defer other.stop()
	if other.Ready() {
		t.Fatal("another server block took the table")
	}
	if err := next.start(); err != nil {
		t.Fatal(err)
	}
	defer next.stop()
	if !next.Ready() || next.table.Load() != old.table.Load() {
		t.Fatal("the table was not carried across the reload")
	}
	if _, ok := carried.Take(next.carryKey, next.sourceKey()); ok {
		t.Fatal("the carried table was left behind after the new instance took it")
	}

	// A reload that changes the port and the zones, with the same source:
	// the table is carried to the new block.
	_ = next.handOver()
	moved := newVC("consul.:2053", "mesh.:2053")
	if err := moved.start(); err != nil {
		t.Fatal(err)
	}
	defer moved.stop()
	if !moved.Ready() || moved.table.Load() != old.table.Load() {
		t.Fatal("a reload that changed the port lost the table of the same source")
	}
}

// writeSnapshot persists t at path as the snapshot writer does.
func writeSnapshot(path string, t *table.Table) error {
	return persist.WriteStream(path, t.WriteJSON)
}

// TestReporterTimestamps: last_sync moves on every successful check, a
// change or not; last_change only on a change; a failure moves neither.
func TestReporterTimestamps(t *testing.T) {
	v := &VirtualConsul{metricZone: "ts.consul.", servers: []string{"dns://:1153"}}
	report := v.reporter("file", nil)
	sync := func() float64 {
		return testutil.ToFloat64(lastSync.WithLabelValues("dns://:1153", "ts.consul.", "file"))
	}
	change := func() float64 {
		return testutil.ToFloat64(lastChange.WithLabelValues("dns://:1153", "ts.consul.", "file"))
	}
	b := table.NewBuilder(0)
	report(source.Sync{Result: source.SyncOK, Table: b.Table()})
	s0, c0 := sync(), change()
	if s0 == 0 || c0 == 0 {
		t.Fatalf("after a change: last_sync %v, last_change %v", s0, c0)
	}
	time.Sleep(20 * time.Millisecond)
	report(source.Sync{Result: source.SyncUnchanged})
	if s1, c1 := sync(), change(); s1 <= s0 || c1 != c0 {
		t.Fatalf("after an unchanged check: last_sync %v → %v, last_change %v → %v", s0, s1, c0, c1)
	}
	s1 := sync()
	time.Sleep(20 * time.Millisecond)
	report(source.Sync{Result: source.SyncError, Err: errors.New("down")})
	if s2, c2 := sync(), change(); s2 != s1 || c2 != c0 {
		t.Fatalf("a failure moved a timestamp: last_sync %v → %v, last_change %v → %v", s1, s2, c0, c2)
	}
}
