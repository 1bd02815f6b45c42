package updater_test

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater/updatertest"
)

func startFakeUpdater(t *testing.T, f *updatertest.Engine, cfg updater.Config) (*updater.Updater, *records.DB) {
	t.Helper()
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval, cfg.CheckTimeout = 100*time.Millisecond, 100*time.Millisecond
	}
	db := records.NewDB([]string{"weave.local."}, 1000, 30)
	u := updater.New(cfg, db, []string{"weave.local."}, f, nil)
	u.Start()
	t.Cleanup(u.Stop)
	return u, db
}

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

func TestUpdaterEventsAndOwnership(t *testing.T) {
	f := updatertest.New()
	f.Run(updatertest.Ctr("c1", "web", "weave.local", "10.32.0.2"))
	f.Run(updatertest.Ctr("c2", "other", "example.org", "10.32.0.9")) // outside the zone
	db := records.NewDB([]string{"weave.local."}, 1000, 30)
	// Records of others: an API record, and one under c1's identifier.
	if _, _, err := db.Put(records.Record{ID: "weave:extern", IP: netip.MustParseAddr("10.1.1.1"), Domain: "ext.weave.local"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Put(records.Record{ID: "c1", IP: netip.MustParseAddr("10.1.1.2"), Domain: "alias.weave.local"}); err != nil {
		t.Fatal(err)
	}
	var gone []records.Record
	var gmu sync.Mutex
	db.SetHooks(nil, func(rs []records.Record) { gmu.Lock(); gone = append(gone, rs...); gmu.Unlock() }, nil)
	u := updater.New(updater.Config{CheckInterval: time.Second, CheckTimeout: time.Second}, db, []string{"weave.local."}, f, nil)
	u.Start()
	defer u.Stop()

	waitFor(t, "web after the first reconcile", func() bool { return hasName(db, "web.weave.local.", "10.32.0.2") })
	if db.Lookup("other.example.org.") != nil {
		t.Error("a container outside the zones got a record")
	}
	f.Run(updatertest.Ctr("c3", "db.weave.local", "", "10.32.0.3")) // hostname already a full name
	waitFor(t, "db from its start event", func() bool { return hasName(db, "db.weave.local.", "10.32.0.3") })

	f.Stop("c1")
	waitFor(t, "web gone after die", func() bool { return db.Lookup("web.weave.local.") == nil })
	if !hasName(db, "alias.weave.local.", "10.1.1.2") || !hasName(db, "ext.weave.local.", "10.1.1.1") {
		t.Errorf("records written by others were touched: %+v", db.Records(""))
	}
	gmu.Lock()
	if len(gone) != 1 || gone[0].Domain != "web.weave.local." {
		t.Errorf("goodbyes = %+v, want one for web", gone)
	}
	gmu.Unlock()
	// start c3, die c1, stop c1
	waitFor(t, "three events handled", func() bool { return u.Status().Counters["events"] >= 3 })
	st := u.Status()
	if st.State != "connected" || st.APIVersion != "1.41" || len(st.Containers) != 1 || st.Containers[0].Domain != "db.weave.local." {
		t.Errorf("status = %+v", st)
	}
	if st.Counters["reconciles"] != 1 {
		t.Errorf("counters = %v", st.Counters)
	}
}

func TestUpdaterDisconnectReconcile(t *testing.T) {
	f := updatertest.New()
	f.Run(updatertest.Ctr("c1", "web", "weave.local", "10.32.0.2"))
	f.Run(updatertest.Ctr("c2", "db", "weave.local", "10.32.0.3"))
	u, db := startFakeUpdater(t, f, updater.Config{})
	waitFor(t, "both names", func() bool {
		return hasName(db, "web.weave.local.", "10.32.0.2") && hasName(db, "db.weave.local.", "10.32.0.3")
	})
	f.SetDown(true)
	waitFor(t, "disconnected", func() bool { return u.Status().State == "disconnected" })
	// While the engine is away: c1 vanishes, c4 starts, c2 moves address.
	f.Remove("c1")
	c4 := updatertest.Ctr("c4", "new", "weave.local", "10.32.0.4")
	c4.Running = true
	f.Set(c4)
	c2 := f.Get("c2")
	c2.Networks = map[string]updater.Net{"wnet": {IPv4: netip.MustParseAddr("10.32.0.33"), Prefix4: 24}}
	f.Set(c2)
	time.Sleep(300 * time.Millisecond)
	if !hasName(db, "web.weave.local.", "10.32.0.2") {
		t.Fatal("records were dropped while the engine was away")
	}
	f.SetDown(false)
	waitFor(t, "reconciled after reconnect", func() bool {
		return db.Lookup("web.weave.local.") == nil && hasName(db, "new.weave.local.", "10.32.0.4") &&
			hasName(db, "db.weave.local.", "10.32.0.33") && !hasName(db, "db.weave.local.", "10.32.0.3")
	})
	st := u.Status()
	if st.State != "connected" || st.Counters["reconnects"] < 1 || st.LastError == "" {
		t.Errorf("status = %+v", st)
	}
}

func TestUpdaterBackoffCapped(t *testing.T) {
	f := updatertest.New()
	f.SetDown(true)
	u, _ := startFakeUpdater(t, f, updater.Config{})
	time.Sleep(1200 * time.Millisecond) // 250+500 ms: three tries at most
	pings := f.Pings()
	if pings < 2 || pings > 4 {
		t.Errorf("pings in 1.2 s = %d, want 2..4 (backoff 250ms doubling)", pings)
	}
	if st := u.Status(); st.State != "disconnected" || !strings.Contains(st.LastError, "down") {
		t.Errorf("status = %+v", st)
	}
}

func TestUpdaterStaleOwnedRecordsDropped(t *testing.T) {
	// Records from a snapshot that this updater wrote for a container that
	// no longer runs go at the first reconcile; others' stay.
	f := updatertest.New()
	db := records.NewDB([]string{"weave.local."}, 1000, 30)
	for _, r := range []records.Record{
		{ID: "dead", IP: netip.MustParseAddr("10.32.0.7"), Domain: "dead.weave.local", Owner: updater.Owner},
		{ID: "dead", IP: netip.MustParseAddr("10.32.0.8"), Domain: "api.weave.local"},
	} {
		if _, _, err := db.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	u := updater.New(updater.Config{CheckInterval: time.Second, CheckTimeout: time.Second}, db, []string{"weave.local."}, f, nil)
	u.Start()
	defer u.Stop()
	waitFor(t, "stale record dropped", func() bool { return db.Lookup("dead.weave.local.") == nil })
	if !hasName(db, "api.weave.local.", "10.32.0.8") {
		t.Error("an API record under the same identifier was dropped")
	}
}

func TestUpdaterHealthCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens now

	f := updatertest.New()
	c := updatertest.Ctr("c1", "web", "weave.local", "127.0.0.1")
	c.Check = "tcp:" + strconv.Itoa(port)
	f.Run(c)
	bad := updatertest.Ctr("c2", "bad", "weave.local", "127.0.0.2")
	bad.Check = "udp:53"
	f.Run(bad)
	u, db := startFakeUpdater(t, f, updater.Config{})
	waitFor(t, "a failed check", func() bool { return u.Status().Counters["checks_fail"] > 0 })
	if db.Lookup("web.weave.local.") != nil {
		t.Fatal("web is present while its check fails")
	}
	ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web once the listener is up", func() bool { return hasName(db, "web.weave.local.", "127.0.0.1") })
	ln.Close()
	waitFor(t, "web withheld again", func() bool { return db.Lookup("web.weave.local.") == nil })
	if db.Lookup("bad.weave.local.") != nil || u.Status().Counters["checks_invalid"] != 1 {
		t.Errorf("a bad label must keep the name out: %+v", u.Status())
	}
}

// TestUpdaterPeriodicReconcile: a container whose event the updater never
// saw (a failed inspect, a dropped event) gets its record within one
// reconcile interval, and one that went without its event loses it.
func TestUpdaterPeriodicReconcile(t *testing.T) {
	f := updatertest.New()
	f.Run(updatertest.Ctr("c1", "web", "weave.local", "10.32.0.2"))
	u, db := startFakeUpdater(t, f, updater.Config{ReconcileInterval: 200 * time.Millisecond})
	waitFor(t, "web after the first reconcile", func() bool { return hasName(db, "web.weave.local.", "10.32.0.2") })
	f.Remove("c1") // no events: the engine changed behind the updater's back
	c := updatertest.Ctr("c2", "db", "weave.local", "10.32.0.3")
	c.Running = true
	f.Set(c)
	waitFor(t, "the missed start and stop repaired", func() bool {
		return hasName(db, "db.weave.local.", "10.32.0.3") && db.Lookup("web.weave.local.") == nil
	})
	if st := u.Status(); st.Counters["reconciles"] < 2 || st.Counters["reconnects"] != 0 {
		t.Fatalf("counters %v", st.Counters)
	}
}
