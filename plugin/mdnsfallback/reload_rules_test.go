package mdnsfallback

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
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
	if _, _, err := p.db.Put(records.Record{ID: "ctr", IP: netip.MustParseAddr("10.32.0.2"), Domain: "ctr.weave.local", Owner: updater.Owner}); err != nil {
		t.Fatal(err)
	}
	p.onRestart()
	q := newTestPlugin(func(c *config) { c.api, c.block, c.ttl = "", "b0", 5 }) // api off now
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	defer q.shutdown()
	p.shutdown()
	if q.db.Len() != 1 || q.db.Lookup("web.weave.local.") == nil || q.db.Lookup("ctr.weave.local.") != nil {
		t.Fatalf("after a reload that changed api and dropped the updater: %v", q.db.Records(""))
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
