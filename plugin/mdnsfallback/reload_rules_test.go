package mdnsfallback

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloadAnyLineKeepsRecords: whatever line of the stanza a reload
// changes (here api, turned off, and ttl, and the
// updater's removal), the new instance of the same server block takes the
// records; the updater's records go once it is gone from the stanza.
func TestReloadAnyLineKeepsRecords(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.api, c.block = "127.0.0.1:0", "b0" })
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	if _, _, err := p.db.Put(Record{ID: "ctr", IP: netip.MustParseAddr("10.32.0.2"), Domain: "ctr.weave.local", Owner: updaterOwner}); err != nil {
		t.Fatal(err)
	}
	p.onRestart()
	q := newTestPlugin(func(c *config) { c.api, c.block, c.ttl = "", "b0", 5 }) // api off now
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	defer q.shutdown()
	p.shutdown()
	if q.db.Len() != 1 || q.db.ix.lookup("web.weave.local.") == nil || q.db.ix.lookup("ctr.weave.local.") != nil {
		t.Fatalf("after a reload that changed api and dropped the updater: %v", q.db.Records(""))
	}
}

// TestTTLMergeRule: one address of a name held by two identifiers is
// served with the lower TTL as served, 0 standing for the Corefile's ttl.
func TestTTLMergeRule(t *testing.T) {
	for _, tc := range []struct{ a, b, want uint32 }{
		{0, 5, 5},    // explicit 5 beats the ttl of 30
		{5, 0, 5},    // in either order
		{0, 60, 0},   // the ttl of 30 beats an explicit 60
		{60, 0, 0},   // in either order
		{20, 10, 10}, // two explicit ones: the lower
	} {
		p := newTestPlugin(nil) // ttl 30
		put(t, p, "a", "10.32.0.1", "web.weave.local", tc.a)
		put(t, p, "b", "10.32.0.1", "web.weave.local", tc.b)
		if got := p.db.ix.lookup("web.weave.local.").ttlA[0]; got != tc.want {
			t.Errorf("TTLs %d and %d: merged %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestSnapshotRetry: a snapshot write that fails (here the directory is
// a file) is retried without another change, and lands once it can.
func TestSnapshotRetry(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "state")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(blocker, "records.json")
	p := newTestPlugin(func(c *config) { c.snapshot = snap })
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	defer p.shutdown()
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	time.Sleep(300 * time.Millisecond) // the first write failed
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(snap)
		if strings.Contains(string(b), "10.32.0.1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed snapshot write was not retried")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUpdaterPeriodicReconcile: a container whose event the updater never
// saw (a failed inspect, a dropped event) gets its record within one
// reconcile interval, and one that went without its event loses it.
func TestUpdaterPeriodicReconcile(t *testing.T) {
	f := newFakeEngine()
	f.run(ctr("c1", "web", "weave.local", "10.32.0.2"))
	u, db := startFakeUpdater(t, f, updaterConfig{reconcileInterval: 200 * time.Millisecond})
	waitFor(t, "web after the first reconcile", func() bool { return hasName(db, "web.weave.local.", "10.32.0.2") })
	f.mu.Lock() // no events: the engine changed behind the updater's back
	delete(f.ctrs, "c1")
	c := ctr("c2", "db", "weave.local", "10.32.0.3")
	c.Running = true
	f.ctrs["c2"] = c
	f.mu.Unlock()
	waitFor(t, "the missed start and stop repaired", func() bool {
		return hasName(db, "db.weave.local.", "10.32.0.3") && db.ix.lookup("web.weave.local.") == nil
	})
	if st := u.status(); st.Counters["reconciles"] < 2 || st.Counters["reconnects"] != 0 {
		t.Fatalf("counters %v", st.Counters)
	}
}
