package mdnsfallback

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
)

// fakeEngine is an engine whose containers and event stream the test
// drives; down makes every call fail and breaks the stream.
type fakeEngine struct {
	mu       sync.Mutex
	ctrs     map[string]ctrInfo
	down     bool
	subs     []chan engineEvent
	errs     []chan error
	sessions int // successful subscriptions
	pings    int
}

func newFakeEngine() *fakeEngine { return &fakeEngine{ctrs: map[string]ctrInfo{}} }

var errFakeDown = errors.New("fake engine down")

func (f *fakeEngine) Endpoint() string { return "fake://" }
func (f *fakeEngine) Close() error     { return nil }

func (f *fakeEngine) Ping(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	if f.down {
		return "", errFakeDown
	}
	return "1.41", nil
}

func (f *fakeEngine) Events(ctx context.Context, _ time.Time) (<-chan engineEvent, <-chan error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ec := make(chan engineEvent, 64), make(chan error, 1)
	if f.down {
		ec <- errFakeDown
		return ch, ec
	}
	f.sessions++
	f.subs, f.errs = append(f.subs, ch), append(f.errs, ec)
	return ch, ec
}

func (f *fakeEngine) Running(context.Context) ([]ctrInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errFakeDown
	}
	var out []ctrInfo
	for _, c := range f.ctrs {
		if c.Running {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *fakeEngine) Inspect(_ context.Context, id string) (ctrInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return ctrInfo{}, errFakeDown
	}
	c, ok := f.ctrs[id]
	if !ok {
		return ctrInfo{ID: id}, nil
	}
	return c, nil
}

// emit sends an event to the live subscribers.
func (f *fakeEngine) emit(action, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return
	}
	for _, s := range f.subs {
		s <- engineEvent{Action: action, ID: id}
	}
}

// run starts (or restarts) a container and emits its start event.
func (f *fakeEngine) run(c ctrInfo) {
	c.Running = true
	f.mu.Lock()
	f.ctrs[c.ID] = c
	f.mu.Unlock()
	f.emit("start", c.ID)
}

// stopCtr marks a container stopped and emits die and stop.
func (f *fakeEngine) stopCtr(id string) {
	f.mu.Lock()
	c := f.ctrs[id]
	c.Running = false
	f.ctrs[id] = c
	f.mu.Unlock()
	f.emit("die", id)
	f.emit("stop", id)
}

// setDown breaks the streams (down) or lets calls succeed again.
func (f *fakeEngine) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	if down {
		for _, e := range f.errs {
			e <- errFakeDown
		}
		f.subs, f.errs = nil, nil
	}
}

func (f *fakeEngine) sessionCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions
}

func ctr(id, host, domain, ip string) ctrInfo {
	return ctrInfo{
		ID: id, Name: host, Hostname: host, Domainname: domain, NetworkMode: "wnet",
		Networks: map[string]ctrNet{"wnet": {IPv4: netip.MustParseAddr(ip), Prefix4: 24}},
	}
}

func startFakeUpdater(t *testing.T, f *fakeEngine, cfg updaterConfig) (*updater, *DB) {
	t.Helper()
	if cfg.checkInterval == 0 {
		cfg.checkInterval, cfg.checkTimeout = 100*time.Millisecond, 100*time.Millisecond
	}
	db := NewDB([]string{"weave.local."}, 1000)
	u := newUpdater(cfg, db, []string{"weave.local."}, f)
	u.start()
	t.Cleanup(u.stop)
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

func hasName(db *DB, name string, ip string) bool {
	e := db.ix.lookup(name)
	if e == nil {
		return false
	}
	for _, a := range append(append([]net.IP{}, e.a...), e.aaaa...) {
		if a.String() == ip {
			return true
		}
	}
	return false
}

func TestUpdaterEventsAndOwnership(t *testing.T) {
	f := newFakeEngine()
	f.run(ctr("c1", "web", "weave.local", "10.32.0.2"))
	f.run(ctr("c2", "other", "example.org", "10.32.0.9")) // outside the zone
	db := NewDB([]string{"weave.local."}, 1000)
	// Records of others: an API record, and one under c1's identifier.
	if _, _, err := db.Put(Record{ID: "weave:extern", IP: netip.MustParseAddr("10.1.1.1"), Domain: "ext.weave.local"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Put(Record{ID: "c1", IP: netip.MustParseAddr("10.1.1.2"), Domain: "alias.weave.local"}); err != nil {
		t.Fatal(err)
	}
	var gone []Record
	var gmu sync.Mutex
	db.onGone = func(rs []Record) { gmu.Lock(); gone = append(gone, rs...); gmu.Unlock() }
	u := newUpdater(updaterConfig{checkInterval: time.Second, checkTimeout: time.Second}, db, []string{"weave.local."}, f)
	u.start()
	defer u.stop()

	waitFor(t, "web after the first reconcile", func() bool { return hasName(db, "web.weave.local.", "10.32.0.2") })
	if db.ix.lookup("other.example.org.") != nil {
		t.Error("a container outside the zones got a record")
	}
	f.run(ctr("c3", "db.weave.local", "", "10.32.0.3")) // hostname already a full name
	waitFor(t, "db from its start event", func() bool { return hasName(db, "db.weave.local.", "10.32.0.3") })

	f.stopCtr("c1")
	waitFor(t, "web gone after die", func() bool { return db.ix.lookup("web.weave.local.") == nil })
	if !hasName(db, "alias.weave.local.", "10.1.1.2") || !hasName(db, "ext.weave.local.", "10.1.1.1") {
		t.Errorf("records written by others were touched: %+v", db.Records(""))
	}
	gmu.Lock()
	if len(gone) != 1 || gone[0].Domain != "web.weave.local." {
		t.Errorf("goodbyes = %+v, want one for web", gone)
	}
	gmu.Unlock()
	// start c3, die c1, stop c1
	waitFor(t, "three events handled", func() bool { return u.status().Counters["events"] >= 3 })
	st := u.status()
	if st.State != "connected" || st.APIVersion != "1.41" || len(st.Containers) != 1 || st.Containers[0].Domain != "db.weave.local." {
		t.Errorf("status = %+v", st)
	}
	if st.Counters["reconciles"] != 1 {
		t.Errorf("counters = %v", st.Counters)
	}
}

func TestUpdaterDisconnectReconcile(t *testing.T) {
	f := newFakeEngine()
	f.run(ctr("c1", "web", "weave.local", "10.32.0.2"))
	f.run(ctr("c2", "db", "weave.local", "10.32.0.3"))
	u, db := startFakeUpdater(t, f, updaterConfig{})
	waitFor(t, "both names", func() bool {
		return hasName(db, "web.weave.local.", "10.32.0.2") && hasName(db, "db.weave.local.", "10.32.0.3")
	})
	f.setDown(true)
	waitFor(t, "disconnected", func() bool { return u.status().State == "disconnected" })
	// While the engine is away: c1 vanishes, c4 starts, c2 moves address.
	f.mu.Lock()
	delete(f.ctrs, "c1")
	f.ctrs["c4"] = func() ctrInfo { c := ctr("c4", "new", "weave.local", "10.32.0.4"); c.Running = true; return c }()
	c2 := f.ctrs["c2"]
	c2.Networks = map[string]ctrNet{"wnet": {IPv4: netip.MustParseAddr("10.32.0.33"), Prefix4: 24}}
	f.ctrs["c2"] = c2
	f.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	if !hasName(db, "web.weave.local.", "10.32.0.2") {
		t.Fatal("records were dropped while the engine was away")
	}
	f.setDown(false)
	waitFor(t, "reconciled after reconnect", func() bool {
		return db.ix.lookup("web.weave.local.") == nil && hasName(db, "new.weave.local.", "10.32.0.4") &&
			hasName(db, "db.weave.local.", "10.32.0.33") && !hasName(db, "db.weave.local.", "10.32.0.3")
	})
	st := u.status()
	if st.State != "connected" || st.Counters["reconnects"] < 1 || st.LastError == "" {
		t.Errorf("status = %+v", st)
	}
}

func TestUpdaterBackoffCapped(t *testing.T) {
	f := newFakeEngine()
	f.setDown(true)
	u, _ := startFakeUpdater(t, f, updaterConfig{})
	time.Sleep(1200 * time.Millisecond) // 250+500 ms: three tries at most
	f.mu.Lock()
	pings := f.pings
	f.mu.Unlock()
	if pings < 2 || pings > 4 {
		t.Errorf("pings in 1.2 s = %d, want 2..4 (backoff 250ms doubling)", pings)
	}
	if st := u.status(); st.State != "disconnected" || !strings.Contains(st.LastError, "down") {
		t.Errorf("status = %+v", st)
	}
	if min(2*backoffCap, backoffCap) != backoffCap {
		t.Fatal("cap")
	}
}

func TestUpdaterStaleOwnedRecordsDropped(t *testing.T) {
	// Records from a snapshot that this updater wrote for a container that
	// no longer runs go at the first reconcile; others' stay.
	f := newFakeEngine()
	db := NewDB([]string{"weave.local."}, 1000)
	for _, r := range []Record{
		{ID: "dead", IP: netip.MustParseAddr("10.32.0.7"), Domain: "dead.weave.local", Owner: updaterOwner},
		{ID: "dead", IP: netip.MustParseAddr("10.32.0.8"), Domain: "api.weave.local"},
	} {
		if _, _, err := db.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	u := newUpdater(updaterConfig{checkInterval: time.Second, checkTimeout: time.Second}, db, []string{"weave.local."}, f)
	u.start()
	defer u.stop()
	waitFor(t, "stale record dropped", func() bool { return db.ix.lookup("dead.weave.local.") == nil })
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

	f := newFakeEngine()
	c := ctr("c1", "web", "weave.local", "127.0.0.1")
	c.Check = "tcp:" + strconv.Itoa(port)
	f.run(c)
	bad := ctr("c2", "bad", "weave.local", "127.0.0.2")
	bad.Check = "udp:53"
	f.run(bad)
	u, db := startFakeUpdater(t, f, updaterConfig{})
	waitFor(t, "a failed check", func() bool { return u.status().Counters["checks_fail"] > 0 })
	if db.ix.lookup("web.weave.local.") != nil {
		t.Fatal("web is present while its check fails")
	}
	ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web once the listener is up", func() bool { return hasName(db, "web.weave.local.", "127.0.0.1") })
	ln.Close()
	waitFor(t, "web withheld again", func() bool { return db.ix.lookup("web.weave.local.") == nil })
	if db.ix.lookup("bad.weave.local.") != nil || u.status().Counters["checks_invalid"] != 1 {
		t.Errorf("a bad label must keep the name out: %+v", u.status())
	}
}

func TestProbeHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ip := netip.MustParseAddr("127.0.0.1")
	for path, pass := range map[string]bool{"/ok": true, "/bad": false, "/slow": false, "/missing": false} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		err := probe(ctx, http.DefaultClient, checkSpec{kind: "http", port: port, path: path}, ip)
		cancel()
		if (err == nil) != pass {
			t.Errorf("http %s: err %v, want pass %v", path, err, pass)
		}
		if time.Since(start) > 700*time.Millisecond {
			t.Errorf("http %s took %v: the timeout did not bound it", path, time.Since(start))
		}
	}
}

func TestParseCheck(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"tcp:8080", "tcp:8080", ""},
		{"http:80", "http:80/", ""},
		{"http:8080/healthz?x=1", "http:8080/healthz?x=1", ""},
		{"tcp:0", "", "not in 1..65535"},
		{"tcp:65536", "", "not in 1..65535"},
		{"tcp:+80", "", "not in 1..65535"},
		{"tcp:80/x", "", "takes no path"},
		{"udp:53", "", "want tcp:<port>"},
		{"http:80/a b", "", "holds a space"},
		{"8080", "", "want tcp:<port>"},
		{"http:", "", "not in 1..65535"},
	}
	for _, tc := range tests {
		got, err := parseCheck(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseCheck(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("parseCheck(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{"tcp:80", "http:8080/x", "http:1", "tcp:", "http:80/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := parseCheck(s)
		if err != nil {
			return
		}
		again, err := parseCheck(spec.String())
		if err != nil || again != spec {
			t.Fatalf("%q → %v does not round-trip: %v %v", s, spec, again, err)
		}
	})
}

func TestWantedRecords(t *testing.T) {
	zones := []string{"weave.local."}
	two := ctr("c", "web", "weave.local", "10.32.0.2")
	two.Running = true
	two.Networks["bridge"] = ctrNet{IPv4: netip.MustParseAddr("172.17.0.2"), Prefix4: 16}
	two.Networks["wnet"] = ctrNet{IPv4: netip.MustParseAddr("10.32.0.2"), Prefix4: 24, IPv6: netip.MustParseAddr("fd00::2"), Prefix6: 64}
	tests := []struct {
		name    string
		c       ctrInfo
		network string
		want    string
	}{
		{"own network", two, "", "10.32.0.2 fd00::2"},
		{"named network", two, "bridge", "172.17.0.2"},
		{"missing network", two, "nope", ""},
		{"not running", func() ctrInfo { c := two; c.Running = false; return c }(), "", ""},
		{"outside zone", func() ctrInfo { c := two; c.Domainname = "example.org"; return c }(), "", ""},
		{"no domain", func() ctrInfo { c := two; c.Domainname = ""; return c }(), "", ""},
		{"full hostname, mixed case", func() ctrInfo { c := two; c.Hostname, c.Domainname = "Web.Weave.Local", ""; return c }(), "", "10.32.0.2 fd00::2"},
		{"mode host, first by name", func() ctrInfo { c := two; c.NetworkMode = "host"; return c }(), "", "172.17.0.2"},
	}
	for _, tc := range tests {
		var got []string
		for _, r := range wantedRecords(tc.c, tc.network, zones) {
			if r.Domain != "web.weave.local." || r.Owner != updaterOwner || r.ID != "c" {
				t.Errorf("%s: record %+v", tc.name, r)
			}
			got = append(got, r.IP.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: got %v, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSlimDocker(t *testing.T) {
	r := container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: "abc", Name: "/web",
			State:      &container.State{Running: true},
			HostConfig: &container.HostConfig{NetworkMode: "default"},
		},
		Config: &container.Config{Hostname: "web", Domainname: "weave.local", Labels: map[string]string{checkLabel: "tcp:80"}},
		NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{
			"bridge": {IPAddress: "172.17.0.2", IPPrefixLen: 16, GlobalIPv6Address: "fd00::2", GlobalIPv6PrefixLen: 64},
			"none":   nil,
		}},
	}
	c := slimContainer(r)
	if c.ID != "abc" || c.Name != "web" || !c.Running || c.NetworkMode != "bridge" || c.Check != "tcp:80" ||
		c.Networks["bridge"].IPv4.String() != "172.17.0.2" || c.Networks["bridge"].IPv6.String() != "fd00::2" {
		t.Errorf("slim = %+v", c)
	}
	if c := slimContainer(container.InspectResponse{}); c.Running || c.ID != "" {
		t.Errorf("empty inspect = %+v", c)
	}
	evs := []struct {
		m    events.Message
		want engineEvent
		ok   bool
	}{
		{events.Message{Type: events.ContainerEventType, Action: "start", Actor: events.Actor{ID: "x"}}, engineEvent{"start", "x"}, true},
		{events.Message{Type: events.ContainerEventType, Action: "exec_start: sh", Actor: events.Actor{ID: "x"}}, engineEvent{}, false},
		{events.Message{Type: events.NetworkEventType, Action: "connect", Actor: events.Actor{ID: "n", Attributes: map[string]string{"container": "x"}}}, engineEvent{"connect", "x"}, true},
		{events.Message{Type: events.NetworkEventType, Action: "create", Actor: events.Actor{ID: "n"}}, engineEvent{}, false},
		{events.Message{Type: events.ImageEventType, Action: "pull"}, engineEvent{}, false},
	}
	for _, e := range evs {
		got, ok := slimEvent(e.m)
		if ok != e.ok || got != e.want {
			t.Errorf("slimEvent(%+v) = %+v %v", e.m, got, ok)
		}
	}
}

func TestSetupUpdater(t *testing.T) {
	tests := []struct {
		in   string
		err  string
		want updaterConfig
	}{
		{"mdnsfallback {\n updater docker\n}", "", updaterConfig{checkInterval: defaultCheckInterval, checkTimeout: defaultCheckTimeout, reconcileInterval: defaultReconcileInterval}},
		{"mdnsfallback {\n updater docker unix:///run/d.sock {\n network wnet\n check_interval 5s\n check_timeout 2s\n }\n}", "",
			updaterConfig{endpoint: "unix:///run/d.sock", network: "wnet", checkInterval: 5 * time.Second, checkTimeout: 2 * time.Second, reconcileInterval: defaultReconcileInterval}},
		{"mdnsfallback {\n updater docker tcp://127.0.0.1:2375\n}", "", updaterConfig{endpoint: "tcp://127.0.0.1:2375", checkInterval: defaultCheckInterval, checkTimeout: defaultCheckTimeout, reconcileInterval: defaultReconcileInterval}},
		{"mdnsfallback {\n updater docker {\n reconcile_interval 5s\n }\n}", "", updaterConfig{checkInterval: defaultCheckInterval, checkTimeout: defaultCheckTimeout, reconcileInterval: 5 * time.Second}},
		{"mdnsfallback {\n updater\n}", "Wrong argument count", updaterConfig{}},
		{"mdnsfallback {\n updater podman\n}", `unknown kind "podman"`, updaterConfig{}},
		{"mdnsfallback {\n updater docker localhost\n}", "endpoint", updaterConfig{}},
		{"mdnsfallback {\n updater docker a b\n}", "Wrong argument count", updaterConfig{}},
		{"mdnsfallback {\n updater docker {\n network\n }\n}", "Wrong argument count", updaterConfig{}},
		{"mdnsfallback {\n updater docker {\n colour red\n }\n}", `unknown property "colour"`, updaterConfig{}},
		{"mdnsfallback {\n updater docker {\n check_interval 1ms\n }\n}", "not a duration in [100ms, 1h]", updaterConfig{}},
		{"mdnsfallback {\n updater docker {\n check_interval 1s\n check_timeout 2s\n }\n}", "longer than check_interval", updaterConfig{}},
		{"mdnsfallback {\n updater docker\n updater docker\n}", "only once", updaterConfig{}},
		{"mdnsfallback {\n updater docker {\n network a\n", "Unexpected EOF", updaterConfig{}},
		{"mdnsfallback {\n updater docker {\n network a\n }\n ttl 10s\n}", "", updaterConfig{network: "a", checkInterval: defaultCheckInterval, checkTimeout: defaultCheckTimeout, reconcileInterval: defaultReconcileInterval}},
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
		if cfg.updater == nil || *cfg.updater != tc.want {
			t.Errorf("%d: updater = %+v, want %+v", i, cfg.updater, tc.want)
		}
	}
}

func TestLifecycleUpdater(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFakeEngine()
	f.run(ctr("c1", "web", "weave.local", "10.32.0.2"))
	p := newTestPlugin(func(c *config) {
		c.api = ""
		c.updater = &updaterConfig{checkInterval: time.Second, checkTimeout: time.Second}
	})
	var endpoints []string
	p.newEngine = func(endpoint string) (engine, error) { endpoints = append(endpoints, endpoint); return f, nil }
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
	if p.updater.Load() != nil {
		t.Fatal("updater still running after OnRestart")
	}
	q := newTestPlugin(func(c *config) {
		c.api = ""
		c.updater = &updaterConfig{checkInterval: time.Second, checkTimeout: time.Second}
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
		c.updater = &updaterConfig{checkInterval: time.Second, checkTimeout: time.Second}
	})
	p.newEngine = func(string) (engine, error) { return nil, errors.New("bad endpoint") }
	if err := p.onStartup(); err == nil || !strings.Contains(err.Error(), "updater docker: bad endpoint") {
		t.Fatalf("want the engine error, got %v", err)
	}
	if p.Ready() {
		t.Fatal("ready after a failed start")
	}
}

// FuzzDockerPayloads feeds engine answers (an inspect body and an event)
// through the JSON decoding and the slim conversions.
func FuzzDockerPayloads(f *testing.F) {
	f.Add([]byte(`{"Id":"abc","Name":"/web","State":{"Running":true},"HostConfig":{"NetworkMode":"default"},`+
		`"Config":{"Hostname":"web","Domainname":"weave.local","Labels":{"meshdns.check":"tcp:80"}},`+
		`"NetworkSettings":{"Networks":{"bridge":{"IPAddress":"172.17.0.2","IPPrefixLen":16,"GlobalIPv6Address":"fd00::2"}}}}`),
		[]byte(`{"Type":"container","Action":"start","Actor":{"ID":"abc","Attributes":{"name":"web"}}}`))
	f.Add([]byte(`{"NetworkSettings":{"Networks":{"x":null}}}`), []byte(`{"Type":"network","Action":"connect","Actor":{"Attributes":{"container":"abc"}}}`))
	f.Add([]byte(`{"Config":{"Hostname":"a.weave.local."},"NetworkSettings":{"Networks":{"n":{"IPAddress":"::ffff:10.0.0.1"}}}}`), []byte(`{}`))
	db := NewDB([]string{"weave.local."}, 100)
	f.Fuzz(func(t *testing.T, inspect, event []byte) {
		var r container.InspectResponse
		if json.Unmarshal(inspect, &r) == nil {
			c := slimContainer(r)
			c.Running = true
			for _, rec := range wantedRecords(c, "", []string{"weave.local."}) {
				if _, err := db.Normalize(rec); err != nil && !errors.Is(err, ErrBadID) && !errors.Is(err, ErrBadDomain) && !errors.Is(err, ErrBadPrefix) && !errors.Is(err, ErrBadIP) {
					t.Fatalf("record %+v: %v", rec, err)
				}
			}
			_, _ = parseCheck(c.Check)
		}
		var m events.Message
		if json.Unmarshal(event, &m) == nil {
			if ev, ok := slimEvent(m); ok && ev.ID == "" {
				t.Fatalf("event without an ID: %+v", m)
			}
		}
	})
}
