package mdnsfallback

import (
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater/updatertest"
)

// waitFor polls cond for up to 3 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasName(db *records.DB, name string, ip string) bool {
	e := db.Lookup(name)
	return e != nil && e.Holds(netip.MustParseAddr(ip))
}

func TestSetupUpdater(t *testing.T) {
	tests := []struct {
		in   string
		err  string
		want updater.Config
	}{
		{"mdnsfallback {\n updater docker\n}", "", updater.Config{CheckInterval: updater.DefaultCheckInterval, CheckTimeout: updater.DefaultCheckTimeout, ReconcileInterval: updater.DefaultReconcileInterval, CheckFailures: 3, CheckRate: 100}},
		{"mdnsfallback {\n updater docker unix:///run/d.sock {\n network wnet\n check_interval 5s\n check_timeout 2s\n }\n}", "",
			updater.Config{Endpoint: "unix:///run/d.sock", Network: "wnet", CheckInterval: 5 * time.Second, CheckTimeout: 2 * time.Second, ReconcileInterval: updater.DefaultReconcileInterval, CheckFailures: 3, CheckRate: 100}},
		{"mdnsfallback {\n updater docker tcp://127.0.0.1:2375\n}", "", updater.Config{Endpoint: "tcp://127.0.0.1:2375", CheckInterval: updater.DefaultCheckInterval, CheckTimeout: updater.DefaultCheckTimeout, ReconcileInterval: updater.DefaultReconcileInterval, CheckFailures: 3, CheckRate: 100}},
		{"mdnsfallback {\n updater docker {\n reconcile_interval 5s\n }\n}", "", updater.Config{CheckInterval: updater.DefaultCheckInterval, CheckTimeout: updater.DefaultCheckTimeout, ReconcileInterval: 5 * time.Second, CheckFailures: 3, CheckRate: 100}},
		{"mdnsfallback {\n updater\n}", "Wrong argument count", updater.Config{}},
		{"mdnsfallback {\n updater podman\n}", `unknown kind "podman"`, updater.Config{}},
		{"mdnsfallback {\n updater docker localhost\n}", "endpoint", updater.Config{}},
		{"mdnsfallback {\n updater docker a b\n}", "Wrong argument count", updater.Config{}},
		{"mdnsfallback {\n updater docker {\n network\n }\n}", "Wrong argument count", updater.Config{}},
		{"mdnsfallback {\n updater docker {\n colour red\n }\n}", `unknown property "colour"`, updater.Config{}},
		{"mdnsfallback {\n updater docker {\n check_failures 5\n check_rate 20\n }\n}", "", updater.Config{CheckInterval: updater.DefaultCheckInterval, CheckTimeout: updater.DefaultCheckTimeout, ReconcileInterval: updater.DefaultReconcileInterval, CheckFailures: 5, CheckRate: 20}},
		{"mdnsfallback {\n updater docker {\n check_failures 0\n }\n}", "not a number in 1..10", updater.Config{}},
		{"mdnsfallback {\n updater docker {\n check_interval 1ms\n }\n}", "not a duration in [100ms, 1h]", updater.Config{}},
		{"mdnsfallback {\n updater docker {\n check_interval 1s\n check_timeout 2s\n }\n}", "longer than check_interval", updater.Config{}},
		{"mdnsfallback {\n updater docker\n updater docker\n}", "only once", updater.Config{}},
		{"mdnsfallback {\n updater docker {\n network a\n", "Unexpected EOF", updater.Config{}},
		{"mdnsfallback {\n updater docker {\n network a\n }\n ttl 10s\n}", "", updater.Config{Network: "a", CheckInterval: updater.DefaultCheckInterval, CheckTimeout: updater.DefaultCheckTimeout, ReconcileInterval: updater.DefaultReconcileInterval, CheckFailures: 3, CheckRate: 100}},
	}
	for i, tc := range tests {
		c := caddy.NewTestController("dns", tc.in)
		cfg, err := parse(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%d: err = %v, want %q", i, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%d: %v", i, err)
			continue
		}
		if cfg.upd == nil || *cfg.upd != tc.want {
			t.Errorf("%d: updater = %+v, want %+v", i, cfg.upd, tc.want)
		}
	}
}

func TestLifecycleUpdater(t *testing.T) {
	before := runtime.NumGoroutine()
	f := updatertest.New()
	f.Run(updatertest.Ctr("c1", "web", "weave.local", "10.32.0.2"))
	p := newTestPlugin(func(c *config) {
		c.api = ""
		c.upd = &updater.Config{CheckInterval: time.Second, CheckTimeout: time.Second}
	})
	var endpoints []string
	p.newEngine = func(endpoint string) (updater.Engine, error) { endpoints = append(endpoints, endpoint); return f, nil }
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web from the updater", func() bool { return hasName(p.db, "web.weave.local.", "10.32.0.2") })
	if st := p.status(); st.Updater == nil || st.Updater.State != "connected" || st.Updater.Kind != "docker" {
		t.Fatalf("status.updater = %+v", st.Updater)
	}
	// A reload stops this updater and starts the next one's, which takes
	// the records over without a gap.
	p.onRestart()
	if p.upd.Load() != nil {
		t.Fatal("updater still running after OnRestart")
	}
	q := newTestPlugin(func(c *config) {
		c.api = ""
		c.upd = &updater.Config{CheckInterval: time.Second, CheckTimeout: time.Second}
	})
	q.newEngine = p.newEngine
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	if !hasName(q.db, "web.weave.local.", "10.32.0.2") {
		t.Fatal("records not carried across the reload")
	}
	waitFor(t, "the new updater synced", func() bool { return q.status().Updater.State == "connected" })
	q.shutdown()
	if st := q.status(); st.Updater != nil {
		t.Fatalf("updater in status after shutdown: %+v", st.Updater)
	}
	if len(endpoints) != 2 || endpoints[0] != "" {
		t.Errorf("engines made for %q", endpoints)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after shutdown, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestStartupUpdaterEngineError(t *testing.T) {
	p := newTestPlugin(func(c *config) {
		c.api = ""
		c.upd = &updater.Config{CheckInterval: time.Second, CheckTimeout: time.Second}
	})
	p.newEngine = func(string) (updater.Engine, error) { return nil, errors.New("bad endpoint") }
	if err := p.onStartup(); err == nil || !strings.Contains(err.Error(), "updater docker: bad endpoint") {
		t.Fatalf("want the engine error, got %v", err)
	}
	if p.Ready() {
		t.Fatal("ready after a failed start")
	}
}
