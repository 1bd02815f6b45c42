package source

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeConsul answers the three endpoints the consul source uses. Its
// services index changes on every query (a flapping catalog) unless frozen,
// and it fails every request while failing is set.
type fakeConsul struct {
	mu       sync.Mutex
	index    int
	frozen   bool
	failing  bool
	waits    []string // the index and wait of every services query
	services []time.Time
	noVIP    bool // the proxy has no consul-virtual address (yet)

	hang         atomic.Bool   // every request waits until its client gives up (a stopped agent)
	holdServices time.Duration // a services query answers only after this (a blocking query)
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	if f.hang.Load() {
		<-r.Context().Done()
		return
	}
	if r.URL.Path == "/v1/catalog/services" && f.holdServices > 0 {
		select {
		case <-time.After(f.holdServices):
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		http.Error(w, "no leader", http.StatusInternalServerError)
		return
	}
	switch {
	case r.URL.Path == "/v1/agent/version":
		fmt.Fprint(w, `{"HumanVersion": "1.16.3"}`)
	case r.URL.Path == "/v1/agent/self":
		fmt.Fprint(w, `{"Config": {"Datacenter": "DC7"}}`)
	case r.URL.Path == "/v1/catalog/services":
		f.services = append(f.services, time.Now())
		f.waits = append(f.waits, r.URL.Query().Get("index")+"/"+r.URL.Query().Get("wait"))
		if !f.frozen {
			f.index++
		}
		w.Header().Set("X-Consul-Index", fmt.Sprint(f.index+1))
		fmt.Fprint(w, `{"web-sidecar-proxy": []}`)
	case r.URL.Path == "/v1/catalog/service/"+extinctionProbe: // no service ever went extinct
		w.Header().Set("X-Consul-Index", "1")
		fmt.Fprint(w, `[]`)
	case r.URL.Path == "/v1/catalog/service/web-sidecar-proxy" && f.noVIP:
		w.Header().Set("X-Consul-Index", fmt.Sprint(f.index+1))
		fmt.Fprint(w, `[{"Datacenter": "DC7", "ServiceKind": "connect-proxy", "ServiceProxy": {"DestinationServiceName": "web"}}]`)
	case r.URL.Path == "/v1/catalog/service/web-sidecar-proxy":
		w.Header().Set("X-Consul-Index", fmt.Sprint(f.index+1))
		fmt.Fprintf(w, `[{"Datacenter": "DC7", "ServiceKind": "connect-proxy", "ServiceTaggedAddresses": {"consul-virtual": {"Address": "240.0.0.%d", "Port": 20000}},
			"ServiceProxy": {"DestinationServiceName": "web"}}]`, f.index%2+1)
	default:
		http.NotFound(w, r)
	}
}

// TestConsulSourceRun: blocking queries carry the index and the wait, a
// catalog whose index changes at every query is read at most twice a
// second, errors back off, and the keys carry the agent's datacenter.
func TestConsulSourceRun(t *testing.T) {
	f := &fakeConsul{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := &consulSource{address: srv.URL}
	var mu sync.Mutex
	var syncs []Sync
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(sy Sync) { mu.Lock(); syncs = append(syncs, sy); mu.Unlock() })
	}()
	time.Sleep(1600 * time.Millisecond)
	f.mu.Lock()
	n := len(f.services)
	gaps := append([]time.Time(nil), f.services...)
	waits := append([]string(nil), f.waits...)
	f.failing = true
	f.mu.Unlock()
	if n < 2 || n > 4 {
		t.Fatalf("%d catalog rounds in 1.6s with an index changing every time, want 2-4 (500ms apart)", n)
	}
	for i := 1; i < len(gaps); i++ {
		if d := gaps[i].Sub(gaps[i-1]); d < 450*time.Millisecond {
			t.Fatalf("rounds %v apart", d)
		}
	}
	if waits[0] != "/300000ms" || !strings.HasSuffix(waits[1], "/300000ms") || waits[1] == "/300000ms" {
		t.Fatalf("queries = %v, want index and wait=5m", waits)
	}
	time.Sleep(2 * time.Second) // failing: retries jittered, 0.5-2 s, 1-4 s, ... apart
	f.mu.Lock()
	during := len(f.services)
	f.mu.Unlock()
	cancel()
	<-done
	if during != n {
		t.Fatalf("%d services queries while the agent fails every request", during-n)
	}
	mu.Lock()
	defer mu.Unlock()
	if syncs[0].Result != SyncOK {
		t.Fatalf("first sync %+v", syncs[0])
	}
	if _, ok := syncs[0].Table.Lookup("web.virtual.default.ns.default.ap.dc7.dc.consul"); !ok {
		t.Fatal("no key with the agent's datacenter dc7")
	}
	errs := 0
	for _, sy := range syncs {
		if sy.Result == SyncError {
			errs++
		}
	}
	if errs < 1 || errs > 3 {
		t.Fatalf("%d errors reported in 2s of failures, want 1-3 (retries 0.5-2 s, then 1-4 s apart)", errs)
	}
}

// TestConsulSourceLateVIP: Consul may fill a proxy's VIP after the proxy
// registered without moving the services index the source blocks on; while
// a proxy lacks its VIP the source re-reads within a bounded short wait, and
// goes back to the long wait once every VIP is there.
func TestConsulSourceLateVIP(t *testing.T) {
	f := &fakeConsul{frozen: true, noVIP: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := &consulSource{address: srv.URL}
	got := make(chan Sync, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, func(sy Sync) {
		select {
		case got <- sy:
		default:
		}
	})
	if sy := <-got; sy.Result != SyncOK || sy.Table.Len() != 0 {
		t.Fatalf("first sync %+v, want an empty table", sy)
	}
	f.mu.Lock()
	f.noVIP = false // the VIP appears; the services index stays where it was
	f.mu.Unlock()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case sy := <-got:
			if sy.Result == SyncOK && sy.Table.Len() == 1 {
				f.mu.Lock()
				waits := append([]string(nil), f.waits...)
				f.mu.Unlock()
				if !strings.HasSuffix(waits[len(waits)-1], "/1000ms") {
					t.Fatalf("pending rounds waited %v, want 1s", waits)
				}
				return
			}
		case <-deadline:
			t.Fatal("the late VIP never reached the table")
		}
	}
}

// TestConsulSourcePendingBackoff: a proxy that never gets its VIP (virtual
// IPs off on the servers) must not keep the source re-reading the catalog
// every second: the short wait doubles with every round that finds it
// still missing, up to consulPendingMax.
func TestConsulSourcePendingBackoff(t *testing.T) {
	f := &fakeConsul{frozen: true, noVIP: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := &consulSource{address: srv.URL}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, func(Sync) {}) }()
	time.Sleep(2300 * time.Millisecond) // the fake answers at once: a round every 500ms
	cancel()
	<-done
	f.mu.Lock()
	waits := append([]string(nil), f.waits...)
	f.mu.Unlock()
	want := []string{"/300000ms", "/1000ms", "/2000ms", "/4000ms", "/8000ms"}
	if len(waits) < len(want) {
		t.Fatalf("queries %v, want at least %d rounds", waits, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(waits[i], w) {
			t.Fatalf("queries %v, want waits %v", waits, want)
		}
	}
	if s.pendingWait > consulPendingMax {
		t.Errorf("pending wait %v beyond %v", s.pendingWait, consulPendingMax)
	}
}

// TestConsulSourceHungAgent: an agent that stops answering (a stopped
// process) while a blocking query waits is noticed by the probe within
// probeEvery + probeTimeout, not at the 5-minute query deadline; the source
// reports failing and recovers once the agent answers again.
func TestConsulSourceHungAgent(t *testing.T) {
	f := &fakeConsul{frozen: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := &consulSource{address: srv.URL, probeEvery: 200 * time.Millisecond, probeTimeout: 100 * time.Millisecond}
	got := make(chan Sync, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(sy Sync) { got <- sy })
	}()
	defer func() { cancel(); <-done }()
	if sy := <-got; sy.Result != SyncOK {
		t.Fatalf("first sync %+v", sy)
	}
	f.hang.Store(true)
	next := func(want func(Sync) bool, what string) Sync {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case sy := <-got:
				if want(sy) {
					return sy
				}
			case <-deadline:
				t.Fatalf("no %s within 5s", what)
			}
		}
	}
	hungAt := time.Now()
	sy := next(func(sy Sync) bool { return sy.Result == SyncError }, "failure after the agent hung")
	if d := time.Since(hungAt); !strings.Contains(sy.Err.Error(), "agent not answering") || d > 2*time.Second {
		t.Fatalf("after %v: error %v, want the probe's within 2s", d, sy.Err)
	}
	f.hang.Store(false)
	next(func(sy Sync) bool { return sy.Result != SyncError }, "successful round after the agent answered again")
}

// TestConsulSourceSlowBlockingQuery: a blocking query the agent holds open
// while answering the probes is a healthy agent: no failure, no abandoned
// round.
func TestConsulSourceSlowBlockingQuery(t *testing.T) {
	f := &fakeConsul{frozen: true, holdServices: 900 * time.Millisecond}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := &consulSource{address: srv.URL, probeEvery: 100 * time.Millisecond, probeTimeout: 100 * time.Millisecond}
	var mu sync.Mutex
	var syncs []Sync
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(sy Sync) { mu.Lock(); syncs = append(syncs, sy); mu.Unlock() })
	}()
	time.Sleep(2500 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(syncs) < 2 {
		t.Fatalf("%d rounds in 2.5s of 0.9s blocking queries, want 2 or more", len(syncs))
	}
	for _, sy := range syncs {
		if sy.Result == SyncError {
			t.Fatalf("a healthy agent holding its blocking query was reported failing: %v", sy.Err)
		}
	}
}

// catalogFake is a catalog of connect proxies (service name → VIP) that
// records every request, answers the services list at once with an index
// that moves on every change, and refuses ns like Consul CE.
type catalogFake struct {
	mu       sync.Mutex
	index    int
	proxies  map[string]string
	requests []string // path?query of every request
}

func (f *catalogFake) set(mod func(map[string]string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mod(f.proxies)
	f.index++
}

func (f *catalogFake) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func (f *catalogFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.URL.Path+"?"+r.URL.RawQuery)
	if r.URL.Query().Has("ns") {
		http.Error(w, `Invalid query parameter: "ns" - Namespaces are a Consul Enterprise feature`, http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Consul-Index", fmt.Sprint(f.index+1))
	switch name, isSvc := strings.CutPrefix(r.URL.Path, "/v1/catalog/service/"); {
	case r.URL.Path == "/v1/agent/self":
		http.Error(w, "Permission denied: token lacks agent:read", http.StatusForbidden)
	case r.URL.Path == "/v1/catalog/services":
		var b strings.Builder
		b.WriteString("{")
		i := 0
		for n := range f.proxies {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%q: []", n)
			i++
		}
		b.WriteString("}")
		fmt.Fprint(w, b.String())
	case isSvc && name == extinctionProbe: // no service ever went extinct
		w.Header().Set("X-Consul-Index", "1")
		fmt.Fprint(w, `[]`)
	case isSvc && f.proxies[name] != "":
		fmt.Fprintf(w, `[{"Datacenter": "dc1", "ServiceKind": "connect-proxy", "ServiceTaggedAddresses": {"consul-virtual": {"Address": %q}},
			"ServiceProxy": {"DestinationServiceName": %q}}]`, f.proxies[name], strings.TrimSuffix(name, "-sidecar-proxy"))
	case isSvc:
		fmt.Fprint(w, `[]`)
	default:
		http.NotFound(w, r)
	}
}

// TestConsulSourceReadsOnlyWhatChanged: the first round reads every proxy;
// afterwards a list change that adds a proxy reads that proxy alone, one
// that removes a proxy or changes nothing about the proxies reads none
// (these proxies front no instance of their destination: no list of every
// service either).
// Every request is a stale read (no leader's read), and a Consul CE agent's
// refusal of ns=* is taken once, then default/default is followed.
func TestConsulSourceReadsOnlyWhatChanged(t *testing.T) {
	f := &catalogFake{proxies: map[string]string{}}
	for i := range 50 {
		f.proxies[fmt.Sprintf("s%d-sidecar-proxy", i)] = fmt.Sprintf("240.0.0.%d", i+1)
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := &consulSource{address: srv.URL}
	got := make(chan Sync, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, func(sy Sync) { got <- sy }) }()
	defer func() { cancel(); <-done }()
	// next returns the next round's report; waiting for a change, it skips
	// rounds that ran before the change was made (unchanged).
	next := func(want string) Sync {
		t.Helper()
		for {
			select {
			case sy := <-got:
				if sy.Result == SyncUnchanged && want != SyncUnchanged {
					continue
				}
				if sy.Result != want {
					t.Fatalf("round: %s (%v), want %s", sy.Result, sy.Err, want)
				}
				return sy
			case <-time.After(5 * time.Second):
				t.Fatal("no round in 5s")
			}
		}
	}
	reads := func(from int) (n int) {
		for _, r := range f.log()[from:] {
			if strings.HasPrefix(r, "/v1/catalog/service/") && !strings.Contains(r, extinctionProbe) {
				n++
			}
		}
		return n
	}
	if sy := next(SyncOK); sy.Table.Len() != 50 {
		t.Fatalf("first table: %d entries", sy.Table.Len())
	}
	if n := reads(0); n != 50 {
		t.Fatalf("first round read %d proxies, want 50", n)
	}
	mark := len(f.log())
	f.set(func(p map[string]string) { p["new-sidecar-proxy"] = "240.0.1.1" })
	if sy := next(SyncOK); sy.Table.Len() != 51 {
		t.Fatalf("after an added proxy: %d entries", sy.Table.Len())
	}
	if n := reads(mark); n != 1 {
		t.Fatalf("an added proxy cost %d reads, want 1", n)
	}
	mark = len(f.log())
	f.set(func(p map[string]string) { delete(p, "s7-sidecar-proxy") })
	if sy := next(SyncOK); sy.Table.Len() != 50 {
		t.Fatalf("after a removed proxy: %d entries", sy.Table.Len())
	}
	f.set(func(map[string]string) {}) // an instance more of some proxy: the list's index moves, nothing else
	next(SyncUnchanged)
	if n := reads(mark); n != 0 {
		t.Fatalf("a removal and an unchanged list cost %d reads, want 0", n)
	}
	for _, r := range f.log()[mark:] {
		if strings.HasPrefix(r, "/v1/catalog/services?") && !strings.Contains(r, "filter=") {
			t.Fatalf("a proxy that fronts no instance was removed, and every service was listed: %q", r)
		}
	}
	for i, r := range f.log() {
		switch {
		case strings.HasPrefix(r, "/v1/agent/self"): // the agent's own datacenter, once
		case i == 0 && !strings.Contains(r, "ns=%2A"):
			t.Fatalf("the first request %q does not ask every namespace", r)
		case i > 0 && strings.Contains(r, "ns="):
			t.Fatalf("request %d %q asks for namespaces after the agent refused them", i, r)
		case !strings.Contains(r, "stale"):
			t.Fatalf("request %q is not a stale read", r)
		}
	}
}
