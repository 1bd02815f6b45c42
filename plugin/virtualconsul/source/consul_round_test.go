package source

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// roundFake is an agent whose answers a test sets per path: the body of
// the services list and of each service read, the headers of the list,
// and /v1/agent/self's datacenter. It records the token of every request.
type roundFake struct {
	mu       sync.Mutex
	index    int
	dc       string            // /v1/agent/self's Config.Datacenter; "" answers 403
	reads    map[string]string // service name → its read's body
	filtered bool              // X-Consul-Results-Filtered-By-ACLs on the list
	noLeader bool              // X-Consul-KnownLeader: false on the list
	tokens   []string          // path + " " + X-Consul-Token of every request
}

func (f *roundFake) set(mod func(*roundFake)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mod(f)
	f.index++
}

func (f *roundFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens = append(f.tokens, r.URL.Path+" "+r.Header.Get("X-Consul-Token"))
	w.Header().Set("X-Consul-LastContact", "0")
	w.Header().Set("X-Consul-KnownLeader", fmt.Sprint(!f.noLeader))
	w.Header().Set("X-Consul-Index", fmt.Sprint(f.index+1))
	switch name, isSvc := strings.CutPrefix(r.URL.Path, "/v1/catalog/service/"); {
	case r.URL.Path == "/v1/agent/self" && f.dc == "":
		http.Error(w, "Permission denied", http.StatusForbidden)
	case r.URL.Path == "/v1/agent/self":
		fmt.Fprintf(w, `{"Config": {"Datacenter": %q}}`, f.dc)
	case r.URL.Path == "/v1/agent/version":
		fmt.Fprint(w, `{}`)
	case r.URL.Path == "/v1/catalog/services":
		if f.filtered {
			w.Header().Set("X-Consul-Results-Filtered-By-ACLs", "true")
		}
		var parts []string
		for n := range f.reads {
			parts = append(parts, fmt.Sprintf("%q: []", n))
		}
		fmt.Fprint(w, "{"+strings.Join(parts, ",")+"}")
	case isSvc && name == extinctionProbe: // no service ever went extinct
		w.Header().Set("X-Consul-Index", "1")
		fmt.Fprint(w, `[]`)
	case isSvc && f.reads[name] != "":
		fmt.Fprint(w, f.reads[name])
	case isSvc:
		fmt.Fprint(w, `[]`)
	default:
		http.NotFound(w, r)
	}
}

// runSource runs a consul source on f until the test ends and returns its
// reports.
func runSource(t *testing.T, f http.Handler, s *consulSource) <-chan Sync {
	t.Helper()
	srv := httptest.NewServer(f)
	s.address = srv.URL
	got := make(chan Sync, 256)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, func(sy Sync) { got <- sy }) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return got
}

// awaitSync returns the first report that ok accepts, within 5s.
func awaitSync(t *testing.T, got <-chan Sync, what string, ok func(Sync) bool) Sync {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case sy := <-got:
			if ok(sy) {
				return sy
			}
		case <-deadline:
			t.Fatalf("no %s in 5s", what)
		}
	}
}

// proxyRead is the read of an agent's sidecar of dest: it fronts an
// instance of dest (DestinationServiceID).
func proxyRead(dc, dest, vip string) string {
	return fmt.Sprintf(`[{"Datacenter": %q, "ServiceKind": "connect-proxy", "ServiceProxy": {"DestinationServiceName": %q, "DestinationServiceID": %[2]q},
		"ServiceTaggedAddresses": {"consul-virtual": {"Address": %q}}}]`, dc, dest, vip)
}

// TestConsulSourceUntrusted: a list the token saw only in part
// (X-Consul-Results-Filtered-By-ACLs) or from servers without a leader is
// a failing round with its reason, never a table; the next whole answer
// syncs again.
func TestConsulSourceUntrusted(t *testing.T) {
	f := &roundFake{dc: "dc1", reads: map[string]string{"web-sidecar-proxy": proxyRead("dc1", "web", "240.0.0.1")}}
	got := runSource(t, f, &consulSource{})
	awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK && sy.Table.Len() == 1 })
	f.set(func(f *roundFake) { f.filtered, f.reads = true, map[string]string{} })
	sy := awaitSync(t, got, "failing round", func(sy Sync) bool { return sy.Result != SyncUnchanged })
	if sy.Result != SyncError || sy.Reason != reasonACLFiltered {
		t.Fatalf("filtered list: %s %q (%v), want error acl_filtered", sy.Result, sy.Reason, sy.Err)
	}
	f.set(func(f *roundFake) { f.filtered, f.noLeader = false, true })
	awaitSync(t, got, "no_leader round", func(sy Sync) bool { return sy.Result == SyncError && sy.Reason == reasonNoLeader })
	f.set(func(f *roundFake) { f.noLeader = false })
	sy = awaitSync(t, got, "recovery", func(sy Sync) bool { return sy.Result != SyncError })
	if sy.Result != SyncOK || sy.Table.Len() != 0 {
		t.Fatalf("after recovery: %s, want the (now empty) whole catalog", sy.Result)
	}
}

// TestConsulSourceTokenEveryRound: the token file is read every round: a
// rotated token is sent from the next round on, without a failure first.
func TestConsulSourceTokenEveryRound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	os.WriteFile(path, []byte("one\n"), 0o600)
	f := &roundFake{dc: "dc1", reads: map[string]string{"web-sidecar-proxy": proxyRead("dc1", "web", "240.0.0.1")}}
	got := runSource(t, f, &consulSource{tokenFile: path})
	awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK })
	os.WriteFile(path, []byte("two\n"), 0o600)
	f.set(func(f *roundFake) { f.reads["api-sidecar-proxy"] = proxyRead("dc1", "api", "240.0.0.2") })
	awaitSync(t, got, "second table", func(sy Sync) bool { return sy.Result == SyncOK && sy.Table.Len() == 2 })
	f.mu.Lock()
	defer f.mu.Unlock()
	last := f.tokens[len(f.tokens)-1]
	if !strings.HasSuffix(last, " two") || !strings.HasSuffix(f.tokens[0], " one") {
		t.Fatalf("tokens sent %v: want one, then two after the rotation", f.tokens)
	}
}

// TestConsulSourceAgentDatacenter: the table carries the agent's own
// datacenter (/v1/agent/self), or without agent:read the catalog entries'.
func TestConsulSourceAgentDatacenter(t *testing.T) {
	for _, dc := range []string{"DC2", ""} {
		f := &roundFake{dc: dc, reads: map[string]string{"web-sidecar-proxy": proxyRead("dc2", "web", "240.0.0.1")}}
		got := runSource(t, f, &consulSource{})
		sy := awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK })
		if sy.Table.Datacenter() != "dc2" {
			t.Fatalf("agent/self %q: table datacenter %q, want dc2", dc, sy.Table.Datacenter())
		}
	}
}

// TestConsulSourceEmptyReadPending: a listed proxy whose read is empty (a
// stale read between its deregistration and registration) is read again
// although the list never changes again, and its VIP reaches the table.
func TestConsulSourceEmptyReadPending(t *testing.T) {
	f := &roundFake{dc: "dc1", reads: map[string]string{"web-sidecar-proxy": `[]`}}
	got := runSource(t, f, &consulSource{})
	if sy := awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK }); sy.Table.Len() != 0 {
		t.Fatalf("first table: %d entries", sy.Table.Len())
	}
	f.mu.Lock()
	f.reads["web-sidecar-proxy"] = proxyRead("dc1", "web", "240.0.0.1") // the index does not move
	f.mu.Unlock()
	awaitSync(t, got, "the re-read VIP", func(sy Sync) bool { return sy.Result == SyncOK && sy.Table.Len() == 1 })
}

// TestConsulSourceRetainsWhileInstances: as Consul frees a VIP only when
// its service's last instance leaves, an entry whose sidecar left is kept
// while the service has an instance, and dropped once it has none.
func TestConsulSourceRetainsWhileInstances(t *testing.T) {
	f := &roundFake{dc: "dc1", reads: map[string]string{
		"web-sidecar-proxy": proxyRead("dc1", "web", "240.0.0.1"),
		"web":               `[{"ServiceID": "web", "ServiceName": "web"}]`,
	}}
	got := runSource(t, f, &consulSource{})
	awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK && sy.Table.Len() == 1 })
	f.set(func(f *roundFake) { delete(f.reads, "web-sidecar-proxy") })
	awaitSync(t, got, "a round after the sidecar left", func(sy Sync) bool { return sy.Result == SyncUnchanged })
	f.set(func(f *roundFake) { f.reads["api"] = `[{"ServiceID": "api"}]` }) // the catalog moves: checked again
	awaitSync(t, got, "another round", func(sy Sync) bool { return sy.Result == SyncUnchanged })
	f.set(func(f *roundFake) { delete(f.reads, "web") })
	sy := awaitSync(t, got, "the VIP freed", func(sy Sync) bool { return sy.Result == SyncOK })
	if sy.Table.Len() != 0 {
		t.Fatalf("after web's last instance left: %d entries, want 0", sy.Table.Len())
	}
}

// TestConsulSourceSeedRetains: after a restart, an entry of the table
// already serving (the snapshot) that no catalog entry carries any more is
// kept while its service has an instance, as it was before the restart;
// one whose service has none is dropped.
func TestConsulSourceSeedRetains(t *testing.T) {
	f := &roundFake{dc: "dc1", reads: map[string]string{"web": `[{"ServiceID": "web", "ServiceName": "web"}]`}}
	s := &consulSource{}
	seed, err := table.Build([]table.Entry{
		{Name: "web.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.1"}},
		{Name: "gone.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Seed(seed)
	got := runSource(t, f, s)
	sy := awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK })
	if a, ok := sy.Table.Lookup("web.virtual.default.ns.default.ap.dc1.dc.consul"); !ok || sy.Table.Len() != 1 || a[0].String() != "240.0.0.1" {
		t.Fatalf("first table after a restart: %d entries, web %v: want web's VIP kept alone", sy.Table.Len(), a)
	}
}

// TestConsulSourceRetainedVIPTaken: an entry kept without a carrier is
// dropped once another service carries its VIP (Consul freed it and gave
// it away).
func TestConsulSourceRetainedVIPTaken(t *testing.T) {
	f := &roundFake{dc: "dc1", reads: map[string]string{
		"web-sidecar-proxy": proxyRead("dc1", "web", "240.0.0.1"),
		"web":               `[{"ServiceID": "web", "ServiceName": "web"}]`,
	}}
	got := runSource(t, f, &consulSource{})
	awaitSync(t, got, "first table", func(sy Sync) bool { return sy.Result == SyncOK && sy.Table.Len() == 1 })
	f.set(func(f *roundFake) { delete(f.reads, "web-sidecar-proxy") })
	awaitSync(t, got, "a round after the sidecar left", func(sy Sync) bool { return sy.Result == SyncUnchanged })
	f.set(func(f *roundFake) { f.reads["api-sidecar-proxy"] = proxyRead("dc1", "api", "240.0.0.1") })
	sy := awaitSync(t, got, "the VIP given away", func(sy Sync) bool { return sy.Result == SyncOK })
	if _, ok := sy.Table.Lookup("web.virtual.default.ns.default.ap.dc1.dc.consul"); ok || sy.Table.Len() != 1 {
		t.Fatalf("web kept 240.0.0.1 after api took it: %d entries", sy.Table.Len())
	}
}
