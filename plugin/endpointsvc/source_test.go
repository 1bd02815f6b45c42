package endpointsvc

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pkgtls "github.com/coredns/coredns/plugin/pkg/tls"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
)

// decodeOrch is schema orch's state document.
func decodeOrch(b []byte) (feed.State, error) { return orch.DecodeState(b) }

// recSink records what a source reports.
type recSink struct {
	mu     sync.Mutex
	events []string
	last   feed.State
}

func (r *recSink) Update(st feed.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events, r.last = append(r.events, fmt.Sprintf("update:%d", st.Len())), st
}
func (r *recSink) Unchanged()         { r.add("unchanged") }
func (r *recSink) Patch(p feed.Patch) { r.add(fmt.Sprintf("patch:%d", p.Len())) }
func (r *recSink) Failed(err error) {
	r.add("error:" + err.Error())
}
func (r *recSink) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}
func (r *recSink) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func expectEvent(t *testing.T, got []string, want string) {
	t.Helper()
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Fatalf("events %q, want one starting with %q", got, want)
	}
}

func TestFileSource(t *testing.T) {
	good, _ := os.ReadFile(stateFile)
	p := filepath.Join(t.TempDir(), "state.json")
	f := &fileSource{path: p, interval: time.Second, decode: decodeOrch}
	s := &recSink{}

	f.check(s)
	expectEvent(t, s.take(), "error:stat")
	os.WriteFile(p, good, 0o644)
	f.check(s)
	expectEvent(t, s.take(), "update:6")
	f.check(s)
	expectEvent(t, s.take(), "unchanged")
	// same content, new mtime: not rebuilt
	os.Chtimes(p, time.Now().Add(time.Hour), time.Now().Add(time.Hour))
	f.check(s)
	expectEvent(t, s.take(), "unchanged")
	// invalid: rejected whole, error names the part, reported again on the next tick
	os.WriteFile(p, []byte(strings.Replace(string(good), `"status": "down"`, `"status": "gone"`, 1)), 0o644)
	f.check(s)
	expectEvent(t, s.take(), "error:"+p+`: state: nodes[4] (id "n-5"): unknown status "gone"`)
	f.check(s)
	expectEvent(t, s.take(), "error:")
	// the old good content again applies again
	os.WriteFile(p, good, 0o644)
	os.Chtimes(p, time.Now().Add(2*time.Hour), time.Now().Add(2*time.Hour))
	f.check(s)
	expectEvent(t, s.take(), "update:6")
}

// orchServer is a test orchestrator API whose behaviour the test switches.
type orchServer struct {
	mu       sync.Mutex
	body     string
	etag     string
	mode     string // "", "500", "slow", "garbage", "big"
	requests []*http.Request
}

func (o *orchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	body, etag, mode := o.body, o.etag, o.mode
	o.requests = append(o.requests, r)
	o.mu.Unlock()
	switch mode {
	case "500":
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	case "slow":
		time.Sleep(300 * time.Millisecond)
	case "garbage":
		w.Write([]byte(`{"services": [ {"id": `))
		return
	case "big":
		w.Write([]byte(strings.Repeat(" ", 2048) + body))
		return
	}
	if etag != "" {
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
	}
	w.Write([]byte(body))
}

func (o *orchServer) set(f func(o *orchServer)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

func (o *orchServer) lastRequest() *http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[len(o.requests)-1]
}

func TestOrchSource(t *testing.T) {
	good, _ := os.ReadFile(stateFile)
	srv := &orchServer{body: string(good), etag: `"v1"`}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	o := &orchSource{url: ts.URL + "/state", interval: time.Second, timeout: 100 * time.Millisecond, maxBackoff: time.Minute, maxBody: int64(len(good) + 100), tokenFile: tok, decode: decodeOrch,
		client: &http.Client{Timeout: 100 * time.Millisecond}}
	s := &recSink{}
	ctx := context.Background()
	poll := func(want string) {
		t.Helper()
		if err := o.poll(ctx, s); err != nil {
			s.Failed(err)
		}
		expectEvent(t, s.take(), want)
	}

	poll("update:6")
	if got := srv.lastRequest().Header.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("Authorization %q", got)
	}
	poll("unchanged")
	if got := srv.lastRequest().Header.Get("If-None-Match"); got != `"v1"` {
		t.Errorf("If-None-Match %q", got)
	}
	srv.set(func(o *orchServer) { o.mode = "500" })
	poll("error:GET " + ts.URL + "/state: 500 Internal Server Error")
	srv.set(func(o *orchServer) { o.mode = "slow" })
	poll("error:")
	srv.set(func(o *orchServer) { o.mode = "garbage" })
	poll("error:GET " + ts.URL + "/state: state: unexpected EOF")
	srv.set(func(o *orchServer) { o.mode = "big" })
	poll("error:GET " + ts.URL + "/state: body larger than")
	// recovered; same content under a new ETag is not rebuilt
	srv.set(func(o *orchServer) { o.mode, o.etag = "", `"v2"` })
	poll("unchanged")
	// new content
	srv.set(func(o *orchServer) {
		o.body, o.etag = strings.Replace(o.body, `"name": "idle"`, `"name": "idle2"`, 1), `"v3"`
	})
	poll("update:6")
	if s := srv.lastRequest().Header.Get("If-None-Match"); s != `"v2"` {
		t.Errorf("If-None-Match %q, want the last ETag", s)
	}
	os.Remove(tok)
	poll("error:token_file")
}

func TestOrchSourceTLS(t *testing.T) {
	good, _ := os.ReadFile(stateFile)
	ts := httptest.NewTLSServer(&orchServer{body: string(good)})
	defer ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	cfg, err := pkgtls.NewTLSConfigFromArgs(ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  *tls.Config
		want string
	}{{nil, "error:"}, {cfg, "update:6"}} {
		o := &orchSource{url: ts.URL, interval: time.Hour, timeout: time.Second, maxBackoff: time.Hour, maxBody: 1 << 20, tlsConfig: tc.cfg, decode: decodeOrch}
		s := &recSink{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { o.Run(ctx, s); close(done) }()
		deadline := time.Now().Add(3 * time.Second)
		var ev []string
		for len(ev) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			ev = s.take()
		}
		cancel()
		<-done
		expectEvent(t, ev, tc.want)
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		interval, max time.Duration
		failures      int
		want          time.Duration
	}{
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 1, 2 * time.Second},
		{time.Second, time.Minute, 3, 8 * time.Second},
		{time.Second, time.Minute, 10, time.Minute},
		{time.Second, time.Minute, 1000, time.Minute},
		{10 * time.Second, time.Second, 5, 10 * time.Second}, // cap below the interval: the interval
	} {
		if got := backoff(tc.interval, tc.max, tc.failures); got != tc.want {
			t.Errorf("backoff(%v, %v, %d) = %v, want %v", tc.interval, tc.max, tc.failures, got, tc.want)
		}
	}
}
