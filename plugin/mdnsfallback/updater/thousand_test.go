package updater

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
)

// Item 5 of issue 29: the updater at a thousand containers.

// fakeProbe is a prober whose results the test sets per address: pass,
// fail at once, or hang until the check's timeout (a blackholed port).
type fakeProbe struct {
	mu    sync.Mutex
	res   map[netip.Addr]string // "pass" (default), "fail", "hang"
	calls atomic.Int64
}

func (f *fakeProbe) set(ip, res string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res[netip.MustParseAddr(ip)] = res
}

func (f *fakeProbe) probe(ctx context.Context, _ checkSpec, ip netip.Addr) error {
	f.calls.Add(1)
	f.mu.Lock()
	r := f.res[ip]
	f.mu.Unlock()
	switch r {
	case "fail":
		return errors.New("refused")
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// memEngine is a minimal engine over a fixed set of running containers.
type memEngine struct {
	mu   sync.Mutex
	ctrs map[string]Container
	ev   chan Event
}

func (m *memEngine) Ping(context.Context) (string, error) { return "1.41", nil }
func (m *memEngine) Events(context.Context, time.Time) (<-chan Event, <-chan error) {
	return m.ev, make(chan error)
}
func (m *memEngine) Running(context.Context) ([]Container, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Container
	for _, c := range m.ctrs {
		out = append(out, c)
	}
	return out, nil, nil
}
func (m *memEngine) Inspect(_ context.Context, id string) (Container, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctrs[id], nil
}
func (m *memEngine) Endpoint() string { return "mem://" }
func (m *memEngine) Close() error     { return nil }

func (m *memEngine) run(id, ip string) {
	c := ctr(id, id, "weave.local", ip)
	c.Running, c.Check = true, "tcp:80"
	m.mu.Lock()
	m.ctrs[id] = c
	m.mu.Unlock()
	m.ev <- Event{Action: "start", ID: id}
}

// thousand starts an updater over n running containers with checks, the
// first hang of them blackholed.
func thousand(t testing.TB, n, hang int, cfg Config) (*Updater, *memEngine, *fakeProbe, *records.DB) {
	eng := &memEngine{ctrs: map[string]Container{}, ev: make(chan Event, 64)}
	fp := &fakeProbe{res: map[netip.Addr]string{}}
	for i := range n {
		ip := fmt.Sprintf("10.32.%d.%d", i/250, i%250+1)
		c := ctr(fmt.Sprintf("c%d", i), fmt.Sprintf("c%d", i), "weave.local", ip)
		c.Running, c.Check = true, "tcp:80"
		eng.ctrs[c.ID] = c
		if i < hang {
			fp.set(ip, "hang")
		}
	}
	db := records.NewDB([]string{"weave.local."}, 100000, 30)
	u := New(cfg, db, []string{"weave.local."}, eng, nil)
	u.probe = fp.probe
	u.Start()
	t.Cleanup(u.Stop)
	return u, eng, fp, db
}

// TestCheckThreshold: a container whose check passed is withheld only
// after CheckFailures failures in a row (here the default, 3); one pass
// in between starts the count over.
func TestCheckThreshold(t *testing.T) {
	u, _, fp, db := thousand(t, 1, 0, Config{CheckInterval: 100 * time.Millisecond, CheckTimeout: 100 * time.Millisecond})
	waitUntil(t, func() bool { return db.Lookup("c0.weave.local.") != nil })
	fp.set("10.32.0.1", "fail")
	waitUntil(t, func() bool { return u.counts.checks[checkFail].Load() >= 2 })
	if db.Lookup("c0.weave.local.") == nil && u.counts.checks[checkFail].Load() < 3 {
		t.Fatal("withheld before three failures in a row")
	}
	waitUntil(t, func() bool { return db.Lookup("c0.weave.local.") == nil })
	if n := u.counts.checks[checkFail].Load(); n < 3 {
		t.Fatalf("withheld after %d failures", n)
	}
}

// TestFirstChecksFirst: a new container's first check goes before the
// periodic checks due at the same time, so a thousand containers due
// never hold a new one back.
func TestFirstChecksFirst(t *testing.T) {
	u := New(Config{CheckInterval: time.Second, CheckTimeout: time.Second}, records.NewDB([]string{"weave.local."}, 10, 30), []string{"weave.local."}, nil, nil)
	past := time.Now().Add(-time.Minute)
	for i := range 100 {
		spec := checkSpec{kind: "tcp", port: 80}
		u.tracked[fmt.Sprint(i)] = &tracked{check: &spec, checked: true, next: past, recs: []records.Record{{IP: netip.MustParseAddr("10.0.0.1")}}}
	}
	spec := checkSpec{kind: "tcp", port: 80}
	u.tracked["new"] = &tracked{check: &spec, recs: []records.Record{{IP: netip.MustParseAddr("10.0.0.2")}}}
	jobs, _ := u.dueChecks(time.Now(), 1000)
	if len(jobs) != 101 || jobs[0].id != "new" {
		t.Fatalf("%d checks due, the first %q; want the new container's first", len(jobs), jobs[0].id)
	}
}

// TestReconcileSurvivesFailedInspect: a container whose inspect fails is
// left as it is, and the reconcile goes on with the others.
func TestReconcileSurvivesFailedInspect(t *testing.T) {
	db := records.NewDB([]string{"weave.local."}, 100, 30)
	u := New(Config{CheckInterval: time.Second, CheckTimeout: time.Second}, db, []string{"weave.local."}, nil, nil)
	a, b := ctr("a", "a", "weave.local", "10.32.0.1"), ctr("b", "b", "weave.local", "10.32.0.2")
	a.Running, b.Running = true, true
	u.reconcile([]Container{a}, nil, 0)
	u.reconcile([]Container{b}, []string{"a"}, 0) // a's inspect failed
	if db.Lookup("a.weave.local.") == nil || db.Lookup("b.weave.local.") == nil {
		t.Fatalf("after a reconcile with a failed inspect: %v", db.Records(""))
	}
}

// TestReconcileOffTheEventLoop: while a reconcile waits on the engine, the
// events go on being handled; and a reconcile whose list is older than an
// event does not undo it.
func TestReconcileOffTheEventLoop(t *testing.T) {
	u, eng, _, db := thousand(t, 1, 0, Config{CheckInterval: 100 * time.Millisecond, CheckTimeout: 100 * time.Millisecond, ReconcileInterval: 100 * time.Millisecond})
	waitUntil(t, func() bool { return db.Lookup("c0.weave.local.") != nil })
	u.mu.Lock()
	since := u.epoch
	u.mu.Unlock()
	stale := []Container{eng.ctrs["c0"]} // a list taken now
	eng.run("late", "10.32.9.9")
	waitUntil(t, func() bool { return db.Lookup("late.weave.local.") != nil })
	u.reconcile(stale, nil, since) // older than late's start: late stays
	if db.Lookup("late.weave.local.") == nil {
		t.Fatal("a reconcile from an older list removed a container an event added")
	}
}

func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkUpdaterThousand: 1,000 running containers with checks, 80 of
// them blackholed (their checks hang until check_timeout), default
// check_interval 2 s and check_timeout 1 s; a new healthy container
// starts: the time until its name is in the database, the checks started
// a second over the first 5 s, and a reconcile's time over an engine
// whose inspects take 2 ms each (eight at a time).
func BenchmarkUpdaterThousand(b *testing.B) {
	cfg := Config{CheckInterval: DefaultCheckInterval, CheckTimeout: DefaultCheckTimeout}
	u, eng, fp, db := thousand(b, 1000, 80, cfg)
	deadline := time.Now().Add(time.Minute)
	for db.Len() < 900 && time.Now().Before(deadline) { // the first checks: 1,000 at check_rate
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // periodic checks under way
	start := time.Now()
	eng.run("new", "10.32.200.1")
	for db.Lookup("new.weave.local.") == nil {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "resolve-ms")
	c0 := fp.calls.Load()
	time.Sleep(5 * time.Second)
	b.ReportMetric(float64(fp.calls.Load()-c0)/5, "checks/s")
	start = time.Now()
	list, failed, _ := eng.Running(context.Background())
	for range list {
		time.Sleep(2 * time.Millisecond / 8)
	}
	u.reconcile(list, failed, 0)
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "reconcile-ms")
}
