package endpointsvc

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"

	"github.com/miekg/dns"
)

func TestSnapshotAndLifecycle(t *testing.T) {
	dir := t.TempDir()
	good, _ := os.ReadFile(stateFile)
	statePath, snap := filepath.Join(dir, "state.json"), filepath.Join(dir, "snap.json")
	os.WriteFile(statePath, good, 0o644)
	newPlugin := func() *Endpointsvc {
		e := orchPlugin(30, &syncer{snapshotPath: snap}, "svc.orch.")
		e.source = &fileSource{path: statePath, interval: 20 * time.Millisecond, decode: e.schema.decode}
		return e
	}
	before := runtime.NumGoroutine()
	e := newPlugin()
	e.start(e.source)
	deadline := time.Now().Add(3 * time.Second)
	for !e.Ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !e.Ready() {
		t.Fatal("not ready after the first sync")
	}
	e.stop()
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("no snapshot written: %v", err)
	}
	// the source is gone now: the snapshot alone serves after a restart
	os.Remove(statePath)
	e = newPlugin()
	e.start(e.source)
	if !e.Ready() {
		t.Fatal("snapshot did not make the plugin ready at start")
	}
	checkCase(t, e, test.Case{Qname: "atlas.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("atlas.svc.orch. 30 IN A 192.0.2.10")}})
	time.Sleep(60 * time.Millisecond) // the failing source keeps the snapshot's answers
	checkCase(t, e, test.Case{Qname: "atlas.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("atlas.svc.orch. 30 IN A 192.0.2.10")}})
	e.stop()
	time.Sleep(20 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before start, %d after stop", before, after)
	}
}

func TestRefreshHosts(t *testing.T) {
	var mu sync.Mutex
	addr := "198.51.100.4"
	fail := false
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return nil, context.DeadlineExceeded
		}
		return []netip.Addr{netip.MustParseAddr(addr)}, nil
	}
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	e.finish(lookup)
	e.apply(context.Background(), "test", loadState(t, stateFile), false)
	e.resolveHosts(context.Background()) // apply leaves hostnames to the refresher
	want := func(ip string) {
		t.Helper()
		checkCase(t, e, test.Case{Qname: "hosty.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("hosty.svc.orch. 30 IN A " + ip)}})
	}
	want("198.51.100.4")
	mu.Lock()
	addr = "198.51.100.44"
	mu.Unlock()
	orchOf(e).resolve(context.Background(), true, e.rebuild)
	want("198.51.100.44")
	mu.Lock()
	fail = true
	mu.Unlock()
	orchOf(e).resolve(context.Background(), true, e.rebuild)
	want("198.51.100.44") // a failed lookup keeps the last good addresses
}

// TestApplyNoLookup checks that apply builds the table from cached
// addresses only and leaves the lookup to the refresher.
func TestApplyNoLookup(t *testing.T) {
	var calls atomic.Int32
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		calls.Add(1)
		return []netip.Addr{netip.MustParseAddr("198.51.100.4")}, nil
	}
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	e.finish(lookup)
	e.apply(context.Background(), "test", loadState(t, stateFile), false)
	if n := calls.Load(); n != 0 {
		t.Fatalf("apply made %d lookups, want 0", n)
	}
	checkCase(t, e, test.Case{Qname: "hosty.svc.orch.", Qtype: dns.TypeA, Ns: []dns.RR{test.SOA("svc.orch. 30 IN SOA ns.dns.svc.orch. hostmaster.ns.dns.svc.orch. 0 7200 1800 86400 30")}})
	select {
	case <-orchOf(e).kick:
	default:
		t.Fatal("apply did not ask the refresher for the new hostname")
	}
	e.resolveHosts(context.Background())
	checkCase(t, e, test.Case{Qname: "hosty.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("hosty.svc.orch. 30 IN A 198.51.100.4")}})
}

// TestHandOver checks that a reload's new instance serves the old one's
// table, once, under the same key only.
func TestHandOver(t *testing.T) {
	old := newTestPlugin(t, false)
	old.carryKey = "test handover"
	old.handOver()
	other := orchPlugin(30, &syncer{carryKey: "test other"}, "svc.orch.")
	if other.takeOver() {
		t.Fatal("took over a table of another key")
	}
	e := orchPlugin(30, &syncer{carryKey: "test handover"}, "svc.orch.")
	if !e.takeOver() || e.tbl.Load() != old.tbl.Load() {
		t.Fatal("the old table was not taken over")
	}
	checkCase(t, e, test.Case{Qname: "hosty.svc.orch.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("hosty.svc.orch. 30 IN A 198.51.100.4")}})
	if e.takeOver() {
		t.Fatal("a carried table was taken twice")
	}
}

// oneShot delivers one state, then waits for the end.
type oneShot struct{ st feed.State }

func (o oneShot) Name() string { return "oneshot" }
func (o oneShot) Key() string  { return "oneshot" }
func (o oneShot) Run(ctx context.Context, s feed.Sink) {
	s.Update(o.st)
	<-ctx.Done()
}

// TestStartStopHangingLookup checks that start-up does not wait on a
// hostname lookup and that stop cancels one in flight.
func TestStartStopHangingLookup(t *testing.T) {
	looking := make(chan struct{}, 1)
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		select {
		case looking <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	e.finish(lookup)
	orchOf(e).resolver.Timeout = time.Minute
	began := time.Now()
	e.start(oneShot{loadState(t, stateFile)})
	if d := time.Since(began); d > time.Second {
		t.Errorf("start took %v", d)
	}
	if e.tbl.Load() == nil {
		t.Fatal("no table after start")
	}
	<-looking
	began = time.Now()
	e.stop()
	if d := time.Since(began); d > time.Second {
		t.Errorf("stop took %v with a lookup in flight", d)
	}
}

// lateSource fails at once, then delivers its state after delay.
type lateSource struct {
	st    feed.State
	delay time.Duration
}

func (l lateSource) Name() string { return "late" }
func (l lateSource) Key() string  { return "late" }
func (l lateSource) Run(ctx context.Context, s feed.Sink) {
	s.Failed(errors.New("API server not there yet"))
	select {
	case <-time.After(l.delay):
		s.Update(l.st)
	case <-ctx.Done():
	}
	<-ctx.Done()
}

// TestStartupTimeout: with startup_timeout, start-up waits for a table
// through the source's failures (the kubernetes plugin waits for its
// sync), at most that long; without it, the first failure ends the wait.
func TestStartupTimeout(t *testing.T) {
	for _, c := range []struct {
		timeout, delay time.Duration
		table          bool
	}{
		{0, 300 * time.Millisecond, false},              // the failure ends the wait
		{2 * time.Second, 300 * time.Millisecond, true}, // waits through it
		{200 * time.Millisecond, time.Minute, false},    // bounded
	} {
		e := orchPlugin(30, &syncer{startupTimeout: c.timeout}, "svc.orch.")
		e.finish(nil)
		began := time.Now()
		e.start(lateSource{loadState(t, stateFile), c.delay})
		took := time.Since(began)
		if got := e.tbl.Load() != nil; got != c.table {
			t.Errorf("startup_timeout %v, state after %v: table after start %v, want %v (took %v)", c.timeout, c.delay, got, c.table, took)
		}
		if c.timeout > 0 && !c.table && (took < c.timeout || took > c.timeout+time.Second) {
			t.Errorf("startup_timeout %v: start took %v", c.timeout, took)
		}
		e.stop()
	}
}
