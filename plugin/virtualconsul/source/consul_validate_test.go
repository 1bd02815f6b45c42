package source

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// modelInstance is one catalog instance of a carrier in modelConsul.
type modelInstance struct {
	Kind, Dest, VIP string
}

// modelConsul is an agent over a small catalog model: carriers (the
// services the list shows) with their instances, the list's index and the
// service extinction index, each set by the test. Blocking list queries
// wait until the model changes.
type modelConsul struct {
	mu       sync.Mutex
	carriers map[string][]modelInstance
	index    uint64 // the list's X-Consul-Index
	extinct  uint64 // the extinction index (the probe's X-Consul-Index)
	changed  chan struct{}
	requests []string // path (+ "?index=N" for lists) of every request
	// gateways: terminating gateway → the VIPs of the services it links;
	// gwMods its config entry's ModifyIndex, cfgIndex the entries' index.
	gateways  map[string]map[string]string
	gwMods    map[string]uint64
	cfgIndex  uint64
	failNext  int // answer the next requests (but agent probes) 429
	failReads int // answer the next service reads 429
}

func newModelConsul(carriers map[string][]modelInstance) *modelConsul {
	return &modelConsul{carriers: carriers, index: 10, extinct: 5, changed: make(chan struct{})}
}

// set changes the model and wakes blocking queries.
func (m *modelConsul) set(mod func(m *modelConsul)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mod(m)
	close(m.changed)
	m.changed = make(chan struct{})
}

// reads counts the requests whose recorded path is p.
func (m *modelConsul) count(p string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.requests {
		if r == p {
			n++
		}
	}
	return n
}

func (m *modelConsul) since(i int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.requests[i:]...)
}

func (m *modelConsul) mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

func (m *modelConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	m.mu.Lock()
	rec := r.URL.Path
	switch {
	case r.URL.Path == "/v1/catalog/services", r.URL.Path == "/v1/config/terminating-gateway":
		rec += "?index=" + q.Get("index")
	}
	m.requests = append(m.requests, rec)
	if m.failNext > 0 && r.URL.Path != "/v1/agent/version" {
		m.failNext--
		m.mu.Unlock()
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		return
	}
	if m.failReads > 0 && strings.HasPrefix(r.URL.Path, "/v1/catalog/service/") && !strings.HasSuffix(r.URL.Path, extinctionProbe) {
		m.failReads--
		m.mu.Unlock()
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		return
	}
	if blocked := r.URL.Path == "/v1/catalog/services" && q.Get("index") == fmt.Sprint(m.index) ||
		r.URL.Path == "/v1/config/terminating-gateway" && q.Get("index") == fmt.Sprint(m.cfgIndex); blocked {
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	w.Header().Set("X-Consul-Index", fmt.Sprint(m.index))
	switch name, isSvc := strings.CutPrefix(r.URL.Path, "/v1/catalog/service/"); {
	case r.URL.Path == "/v1/agent/self":
		fmt.Fprint(w, `{"Config": {"Datacenter": "dc1"}}`)
	case r.URL.Path == "/v1/agent/version":
		fmt.Fprint(w, `{}`)
	case r.URL.Path == "/v1/config/terminating-gateway":
		w.Header().Set("X-Consul-Index", fmt.Sprint(m.cfgIndex))
		var out []map[string]any
		for g := range m.gateways {
			out = append(out, map[string]any{"Kind": "terminating-gateway", "Name": g, "ModifyIndex": m.gwMods[g]})
		}
		json.NewEncoder(w).Encode(out)
	case strings.HasPrefix(r.URL.Path, "/v1/catalog/gateway-services/"):
		var out []map[string]any
		for s := range m.gateways[strings.TrimPrefix(r.URL.Path, "/v1/catalog/gateway-services/")] {
			out = append(out, map[string]any{"Service": map[string]any{"Name": s}})
		}
		json.NewEncoder(w).Encode(out)
	case isSvc && m.gateways[name] != nil:
		addrs := map[string]any{}
		for s, vip := range m.gateways[name] {
			addrs["consul-virtual:"+s] = map[string]any{"Address": vip}
		}
		json.NewEncoder(w).Encode([]map[string]any{{"Datacenter": "dc1", "ServiceName": name, "ServiceKind": kindTermGateway, "ServiceTaggedAddresses": addrs}})
	case r.URL.Path == "/v1/catalog/services":
		out := map[string][]string{}
		for g := range m.gateways {
			out[g] = []string{}
		}
		for n := range m.carriers {
			out[n] = []string{}
		}
		json.NewEncoder(w).Encode(out)
	case isSvc && name == extinctionProbe:
		w.Header().Set("X-Consul-Index", fmt.Sprint(m.extinct))
		fmt.Fprint(w, `[]`)
	case isSvc:
		var out []map[string]any
		for _, in := range m.carriers[name] {
			e := map[string]any{"Datacenter": "dc1", "ServiceName": name, "ServiceKind": in.Kind,
				"ServiceTaggedAddresses": map[string]any{"consul-virtual": map[string]any{"Address": in.VIP}}}
			if in.Kind == kindProxy {
				e["ServiceProxy"] = map[string]any{"DestinationServiceName": in.Dest}
			} else {
				e["ServiceConnect"] = map[string]any{"Native": true}
			}
			out = append(out, e)
		}
		if out == nil {
			out = []map[string]any{}
		}
		json.NewEncoder(w).Encode(out)
	default:
		http.NotFound(w, r)
	}
}

func sidecar(dest, vip string) []modelInstance {
	return []modelInstance{{Kind: kindProxy, Dest: dest, VIP: vip}}
}

// vipsOf returns the table's answers for the services of want, as
// "service=VIP", and its size.
func vipsOf(t *table.Table, want map[string]string) string {
	out := map[string]string{}
	for n := range want {
		if a, ok := t.Lookup(n + ".virtual.default.ns.default.ap.dc1.dc.consul"); ok {
			out[n] = fmt.Sprint(a)
		}
	}
	return fmt.Sprint(t.Len(), out)
}

// awaitVIPs waits for a table whose entries are want (and others more
// that it does not check).
func awaitVIPs(t *testing.T, got <-chan Sync, want map[string]string, others ...int) {
	t.Helper()
	w := map[string]string{}
	for n, a := range want {
		w[n] = "[" + a + "]"
	}
	n := len(want)
	for _, o := range others {
		n += o
	}
	wantS := fmt.Sprint(n, w)
	last := ""
	deadline := time.After(5 * time.Second)
	for {
		select {
		case sy := <-got:
			if sy.Result != SyncOK {
				continue
			}
			if last = vipsOf(sy.Table, want); last == wantS {
				return
			}
		case <-deadline:
			t.Fatalf("no table %s in 5s; the last was %s", wantS, last)
		}
	}
}

// awaitRequest waits until m has had request r.
func awaitRequest(t *testing.T, m *modelConsul, r string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for m.count(r) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no request %s in 5s: %v", r, m.since(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConsulSourceVIPMovedUnderSameName is the "wrong VIP, kept":
// between two rounds a leaves (Consul frees 240.0.0.2), c registers and
// gets it, a registers again with 240.0.0.4. a is listed before and after,
// so only the extinction index tells: each cached service is read again,
// once per extinction (w too, whose VIP did not move), and never through a
// filtered list of the whole catalog.
func TestConsulSourceVIPMovedUnderSameName(t *testing.T) {
	t.Run("small", func(t *testing.T) { vipMoved(t, false) })
	t.Run("big", func(t *testing.T) { vipMoved(t, true) })
}

func vipMoved(t *testing.T, big bool) {
	m := newModelConsul(map[string][]modelInstance{
		"w-sidecar-proxy": sidecar("w", "240.0.0.1"),
		"a-sidecar-proxy": sidecar("a", "240.0.0.2"),
	})
	if big {
		bigCatalog(m)
	}
	others := 0
	if big {
		others = 200
	}
	got := runSource(t, m, &consulSource{})
	awaitVIPs(t, got, map[string]string{"w": "240.0.0.1", "a": "240.0.0.2"}, others)
	m.set(func(m *modelConsul) {
		m.carriers["c-sidecar-proxy"] = sidecar("c", "240.0.0.2")
		m.carriers["a-sidecar-proxy"] = sidecar("a", "240.0.0.4")
		m.index, m.extinct = 20, 15
	})
	awaitVIPs(t, got, map[string]string{"w": "240.0.0.1", "a": "240.0.0.4", "c": "240.0.0.2"}, others)
	if n := m.count("/v1/catalog/service/w-sidecar-proxy"); n != 2 {
		t.Fatalf("w read %d times, want twice: once new, once after the extinction", n)
	}
	if n := m.count("/v1/catalog/service/c-sidecar-proxy"); n != 1 {
		t.Fatalf("c read %d times, want once: new in the round of the extinction", n)
	}
	// Freed and taken by no one: a's VIP moved, no other service shows it.
	m.set(func(m *modelConsul) {
		m.carriers["a-sidecar-proxy"] = sidecar("a", "240.0.0.5")
		m.index, m.extinct = 30, 25
	})
	awaitVIPs(t, got, map[string]string{"w": "240.0.0.1", "a": "240.0.0.5", "c": "240.0.0.2"}, others)
	for _, r := range m.since(0) {
		if strings.HasPrefix(r, "/v1/catalog/services") && !strings.HasPrefix(r, "/v1/catalog/services?index=") {
			t.Fatalf("a request other than the list and per-service reads: %s", r)
		}
	}
}

// TestConsulSourceVIPMovedReadFailed: a round that found an extinction and
// failed before its reads completed (a 429) leaves the cache unchecked:
// the next round reads it again, although the extinction index it finds
// is the same.
func TestConsulSourceVIPMovedReadFailed(t *testing.T) {
	m := newModelConsul(map[string][]modelInstance{
		"w-sidecar-proxy": sidecar("w", "240.0.0.1"),
		"a-sidecar-proxy": sidecar("a", "240.0.0.2"),
	})
	got := runSource(t, m, &consulSource{})
	awaitVIPs(t, got, map[string]string{"w": "240.0.0.1", "a": "240.0.0.2"})
	m.set(func(m *modelConsul) {
		m.carriers["a-sidecar-proxy"] = sidecar("a", "240.0.0.4")
		m.index, m.extinct = 20, 15
		m.failReads = 1
	})
	awaitSync(t, got, "the failed round", func(sy Sync) bool { return sy.Result == SyncError })
	awaitVIPs(t, got, map[string]string{"w": "240.0.0.1", "a": "240.0.0.4"})
}

// TestConsulSourceUnrelatedChangeNoRead: a change that moved no cached
// VIP (no service went extinct) costs the extinction probe and the next
// list: no read, whatever the cache's size.
func TestConsulSourceUnrelatedChangeNoRead(t *testing.T) {
	for _, big := range []bool{false, true} {
		m := newModelConsul(map[string][]modelInstance{"a-sidecar-proxy": sidecar("a", "240.0.0.2")})
		want := []string{"/v1/catalog/service/" + extinctionProbe, "/v1/catalog/services?index=11"}
		if big {
			bigCatalog(m)
		}
		got := runSource(t, m, &consulSource{})
		awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK })
		awaitRequest(t, m, "/v1/catalog/services?index=10")
		from := m.mark()
		m.set(func(m *modelConsul) { m.index = 11 })
		awaitRequest(t, m, "/v1/catalog/services?index=11")
		if g := m.since(from); fmt.Sprint(g) != fmt.Sprint(want) {
			t.Fatalf("big %v: requests of an unrelated change: %v, want %v", big, g, want)
		}
	}
}

// bigCatalog adds 200 sidecars to m: more than one check request holds.
func bigCatalog(m *modelConsul) {
	for i := range 200 {
		m.carriers[fmt.Sprintf("service-with-a-longer-name-%d-sidecar-proxy", i)] = sidecar(fmt.Sprintf("service-with-a-longer-name-%d", i), fmt.Sprintf("240.0.%d.%d", 1+i/250, 1+i%250))
	}
}

// TestConsulSourceIndexBackwards: an index that goes backwards (a restored
// snapshot) drops the cache: a, listed before and after, is read again.
func TestConsulSourceIndexBackwards(t *testing.T) {
	m := newModelConsul(map[string][]modelInstance{"a-sidecar-proxy": sidecar("a", "240.0.0.2")})
	m.index, m.extinct = 100, 50
	got := runSource(t, m, &consulSource{})
	awaitVIPs(t, got, map[string]string{"a": "240.0.0.2"})
	m.set(func(m *modelConsul) {
		m.carriers["a-sidecar-proxy"] = sidecar("a", "240.0.0.9")
		m.index, m.extinct = 7, 3
	})
	awaitVIPs(t, got, map[string]string{"a": "240.0.0.9"})
}

// TestConsulSourceIndexZeroClamped: an X-Consul-Index of 0 is taken as 1,
// so the next list blocks instead of returning at once.
func TestConsulSourceIndexZeroClamped(t *testing.T) {
	m := newModelConsul(map[string][]modelInstance{"a-sidecar-proxy": sidecar("a", "240.0.0.2")})
	m.index = 0
	got := runSource(t, m, &consulSource{})
	awaitVIPs(t, got, map[string]string{"a": "240.0.0.2"})
	deadline := time.Now().Add(5 * time.Second)
	for m.count("/v1/catalog/services?index=1") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no list with index=1 after an index of 0: %v", m.since(0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := m.count("/v1/catalog/services?index=0"); n != 0 {
		t.Fatalf("%d lists sent index=0", n)
	}
}

// TestConsulSourceFailedRoundKeepsCache: a round that fails (a 429 from
// Consul's rate limiter) keeps the cache: the next round, finding the
// catalog unchanged, reads nothing again.
func TestConsulSourceFailedRoundKeepsCache(t *testing.T) {
	m := newModelConsul(map[string][]modelInstance{"a-sidecar-proxy": sidecar("a", "240.0.0.2"), "b-sidecar-proxy": sidecar("b", "240.0.0.3")})
	got := runSource(t, m, &consulSource{})
	awaitVIPs(t, got, map[string]string{"a": "240.0.0.2", "b": "240.0.0.3"})
	awaitRequest(t, m, "/v1/catalog/services?index=10")
	from := m.mark()
	m.set(func(m *modelConsul) { m.failNext = 1 }) // the blocking list answers 429
	awaitSync(t, got, "the failed round", func(sy Sync) bool { return sy.Result == SyncError })
	awaitSync(t, got, "the recovery", func(sy Sync) bool { return sy.Result == SyncUnchanged })
	for _, r := range m.since(from) {
		if strings.HasPrefix(r, "/v1/catalog/service/") || strings.HasSuffix(r, "?filter") {
			t.Fatalf("the round after a failure read %s: %v", r, m.since(from))
		}
	}
}

// TestConsulSourceFailedRoundStops: the first failed read ends the round:
// the reads not yet sent are not sent.
func TestConsulSourceFailedRoundStops(t *testing.T) {
	m := newModelConsul(map[string][]modelInstance{})
	for i := range 40 {
		m.carriers[fmt.Sprintf("s%d-sidecar-proxy", i)] = sidecar(fmt.Sprintf("s%d", i), fmt.Sprintf("240.0.0.%d", i+1))
	}
	m.failReads = 1
	got := runSource(t, m, &consulSource{})
	awaitSync(t, got, "the failed round", func(sy Sync) bool { return sy.Result == SyncError })
	reads := 0
	for _, r := range m.since(0) {
		if strings.HasPrefix(r, "/v1/catalog/service/s") {
			reads++
		}
	}
	// Without the stop every one of the 40 reads goes out. How many the
	// readers send before the failure reaches them depends on scheduling
	// (2*consulReaders on an idle machine; 19 were seen while a cold
	// machine built the peers beside it), so the bound is "not all".
	if reads >= 40 {
		t.Fatalf("a round whose first read failed sent %d of its 40 reads", reads)
	}
	awaitVIPs(t, got, map[string]string{"s0": "240.0.0.1"}, 39) // and the next round reads them all
}

// TestConsulSourceGatewayReadOnItsEntry: a terminating gateway is read
// again only when its config entry moved: a change elsewhere in the
// catalog costs it nothing, a link (its entry moved, the list did not yet)
// wakes the round and reads it.
func TestConsulSourceGatewayReadOnItsEntry(t *testing.T) {
	m := newModelConsul(map[string][]modelInstance{"a-sidecar-proxy": sidecar("a", "240.0.0.2")})
	m.gateways = map[string]map[string]string{"tgw": {"ext": "240.0.0.9"}}
	m.gwMods, m.cfgIndex = map[string]uint64{"tgw": 5}, 5
	got := runSource(t, m, &consulSource{})
	awaitVIPs(t, got, map[string]string{"a": "240.0.0.2", "ext": "240.0.0.9"})
	awaitRequest(t, m, "/v1/config/terminating-gateway?index=5")
	awaitRequest(t, m, "/v1/catalog/services?index=10")
	from := m.mark()
	m.set(func(m *modelConsul) { m.index = 11 })
	awaitRequest(t, m, "/v1/catalog/services?index=11")
	for _, r := range m.since(from) {
		if strings.Contains(r, "tgw") {
			t.Fatalf("a change elsewhere read the gateway: %v", m.since(from))
		}
	}
	m.set(func(m *modelConsul) {
		m.gateways["tgw"]["ext2"] = "240.0.0.10"
		m.gwMods["tgw"], m.cfgIndex = 12, 12
	})
	awaitVIPs(t, got, map[string]string{"a": "240.0.0.2", "ext": "240.0.0.9", "ext2": "240.0.0.10"})
}
