package mdnsfallback

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestLifecycleSnapshot(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "records.json")
	os.WriteFile(snap, []byte("{not json"), 0o644)
	before := runtime.NumGoroutine()

	p := newTestPlugin(func(c *config) { c.api = "127.0.0.1:0"; c.snapshot = snap })
	if p.Ready() {
		t.Fatal("ready before start")
	}
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	if !p.Ready() {
		t.Fatal("not ready after start")
	}
	if _, err := os.Stat(snap + ".bad"); err != nil {
		t.Fatalf("unreadable snapshot not kept aside: %v", err)
	}
	resp, err := http.Get("http://" + p.api.ln.Addr().String() + "/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("API: %v %v", resp, err)
	}
	resp.Body.Close()
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	p.shutdown()
	p.shutdown() // idempotent
	if p.Ready() {
		t.Fatal("ready after shutdown")
	}
	b, _ := os.ReadFile(snap)
	if !strings.Contains(string(b), `"10.32.0.1"`) {
		t.Fatalf("snapshot not written on shutdown: %s", b)
	}

	q := newTestPlugin(func(c *config) { c.api = ""; c.snapshot = snap })
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	if q.db.Len() != 1 || q.db.Lookup("web.weave.local.") == nil {
		t.Fatalf("snapshot not loaded: %v", q.db.Records(""))
	}
	q.shutdown()

	// No goroutine survives the stop.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after shutdown, %d before", n, before)
	}
}

func TestLifecycleReloadCarriesRecords(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.api = "127.0.0.1:0" })
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	p.onRestart()
	// A failed reload brings the old instance back with its records.
	if err := p.onRestartFailed(); err != nil || !p.Ready() || p.db.Len() != 1 {
		t.Fatalf("restart failed: %v ready=%v len=%d", err, p.Ready(), p.db.Len())
	}
	p.onRestart()
	q := newTestPlugin(func(c *config) { c.api = "127.0.0.1:0" })
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	if q.db.Len() != 1 {
		t.Fatalf("records not carried across the reload: %v", q.db.Records(""))
	}
	p.shutdown()
	q.shutdown()
}

// TestStartupInterfaceLater: a configured interface that does not exist
// yet does not fail start-up (a bridge created after meshdns): the block
// is ready, and /status says the interface is missing (waited for); one
// that exists without multicast (loopback) fails start-up with its name.
func TestStartupInterfaceLater(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.interfaces = []string{"nosuchif0"} })
	if err := p.onStartup(); err != nil {
		t.Fatalf("start-up with an interface that does not exist yet: %v", err)
	}
	defer p.shutdown()
	if !p.Ready() {
		t.Fatal("not ready")
	}
	st := p.status()
	if got := fmt.Sprint(st.MDNSInterfaces); got != "[{nosuchif0 missing 0 []}]" {
		t.Fatalf("status interfaces: %s", got)
	}
	lo := newTestPlugin(func(c *config) { c.interfaces = []string{"lo"} })
	err := lo.onStartup()
	if err == nil || !strings.Contains(err.Error(), `interface "lo" has no multicast`) {
		t.Fatalf("want a no-multicast error, got %v", err)
	}
	if lo.Ready() {
		t.Fatal("ready after a failed start")
	}
}

// TestLifecycleReloadTwoBlocks: two mdnsfallback server blocks reload at
// once; each new instance takes only its own block's records, so the first
// to start does not throw away the other's.
func TestLifecycleReloadTwoBlocks(t *testing.T) {
	zones := [][]string{{"weave.local."}, {"other.local."}}
	var old, next [2]*MDNSFallback
	for i, z := range zones {
		old[i] = newTestPlugin(func(c *config) { c.zones, c.block = z, fmt.Sprint(i) })
		if err := old[i].onStartup(); err != nil {
			t.Fatal(err)
		}
		put(t, old[i], "c1", "10.32.0.1", "web."+z[0], 0)
	}
	for _, p := range old {
		p.onRestart()
	}
	for i, z := range zones {
		next[i] = newTestPlugin(func(c *config) { c.zones, c.block = z, fmt.Sprint(i) })
		if err := next[i].onStartup(); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range next {
		if p.db.Len() != 1 || p.db.Lookup("web."+zones[i][0]) == nil {
			t.Errorf("block %s: records not carried: %v", zones[i][0], p.db.Records(""))
		}
		p.shutdown()
	}
}

// TestReloadKeepsAcknowledgedWrites: PUTs through the API race a reload
// (onRestart of the old instance, onStartup of the new one), with and
// without a snapshot; every PUT answered 200 is in the new instance.
func TestReloadKeepsAcknowledgedWrites(t *testing.T) {
	for _, withSnapshot := range []bool{false, true} {
		snap := ""
		if withSnapshot {
			snap = filepath.Join(t.TempDir(), "records.json")
		}
		p := newTestPlugin(func(c *config) { c.api = "127.0.0.1:0"; c.snapshot = snap })
		if err := p.onStartup(); err != nil {
			t.Fatal(err)
		}
		url := "http://" + p.api.ln.Addr().String()
		acked := make(chan string, 1000)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c := http.Client{Timeout: time.Second}
			for i := 0; i < 1000; i++ {
				name := fmt.Sprintf("w%d.weave.local", i)
				req, _ := http.NewRequest(http.MethodPut, url+"/name/w/10.32.9.9", strings.NewReader("domain="+name))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := c.Do(req)
				if err != nil {
					return // the API stopped
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					acked <- name
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		if err := p.onRestart(); err != nil {
			t.Fatal(err)
		}
		<-done
		close(acked)
		q := newTestPlugin(func(c *config) { c.api = "127.0.0.1:0"; c.snapshot = snap }) // the same stanza
		if err := q.onStartup(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for name := range acked {
			n++
			if q.db.Lookup(name+".") == nil {
				t.Fatalf("snapshot %v: %s was acknowledged before the reload and is gone after it", withSnapshot, name)
			}
		}
		if n == 0 {
			t.Fatal("no write was acknowledged before the reload")
		}
		q.shutdown()
	}
}
