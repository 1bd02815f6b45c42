package kubesource

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeAPI is the transport behind a gate and the API server its probe
// asks: down (every dial refused, no probe answered), up, or answering but
// not ready. A body it returns breaks after its first read when breakBody
// is set, as a watch stream does when its connection is lost.
type fakeAPI struct {
	mu        sync.Mutex
	down      bool
	notReady  bool
	breakBody bool
	hang      bool // requests wait for their context
	sent      atomic.Int64
	probes    atomic.Int64
}

var errConnLost = errors.New("http2: client connection lost")

func (f *fakeAPI) set(fn func(f *fakeAPI)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	down, hang, breakBody := f.down, f.hang, f.breakBody
	f.mu.Unlock()
	f.sent.Add(1)
	switch {
	case down:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case hang:
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	var body io.Reader = strings.NewReader("ok")
	if breakBody {
		body = io.MultiReader(body, errReader{errConnLost})
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(body), Request: req}, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func (f *fakeAPI) probe(ctx context.Context) (answered, ready bool) {
	f.probes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false, false
	}
	return true, !f.notReady
}

// testGate is a gate in front of f that probes every 10 ms.
func testGate(f *fakeAPI) *gate {
	g := newGate("test", f, f.probe)
	g.every = 10 * time.Millisecond
	return g
}

type result struct {
	resp *http.Response
	err  error
	at   time.Time
}

// send sends a request through g in the background.
func send(ctx context.Context, g *gate, method string, body io.Reader) <-chan result {
	return sendURL(ctx, g, method, "https://api.test/api/v1/services", body)
}

func sendURL(ctx context.Context, g *gate, method, url string, body io.Reader) <-chan result {
	ch := make(chan result, 1)
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	go func() {
		resp, err := g.RoundTrip(req)
		ch <- result{resp, err, time.Now()}
	}()
	return ch
}

// held fails unless the request stays in the gate for a while.
func held(t *testing.T, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("request not held: %v, %v", r.resp, r.err)
	case <-time.After(100 * time.Millisecond):
	}
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("request still held after 5s")
		return result{}
	}
}

func (g *gate) openNow() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.isOpen
}

// TestGateHoldsRefusedUntilBack: a request refused at dial closes the
// gate and waits in it, probing, with no error for the caller (a reflector
// would back off on one), and goes out again the moment the API server is
// back.
func TestGateHoldsRefusedUntilBack(t *testing.T) {
	f := &fakeAPI{down: true}
	g := testGate(f)
	ch := send(context.Background(), g, http.MethodGet, nil)
	held(t, ch)
	if g.openNow() {
		t.Fatal("gate open after a refused request")
	}
	// probes once per interval, not in a busy loop
	if n := f.probes.Load(); n < 2 || n > 15 {
		t.Errorf("%d probes in 100 ms at a 10 ms interval", n)
	}
	// a second request is held too, and never sent while the gate is closed
	ch2 := send(context.Background(), g, http.MethodGet, nil)
	held(t, ch2)
	if n := f.sent.Load(); n != 1 {
		t.Errorf("%d requests sent to a down API server, want the first only", n)
	}
	up := time.Now()
	f.set(func(f *fakeAPI) { f.down = false })
	for _, c := range []<-chan result{ch, ch2} {
		r := wait(t, c)
		if r.err != nil || r.resp.StatusCode != http.StatusOK {
			t.Fatalf("after the return: %v, %v", r.resp, r.err)
		}
		if d := r.at.Sub(up); d > 500*time.Millisecond {
			t.Errorf("released %v after the API server came back (probe interval 10 ms)", d)
		}
	}
	if n := f.sent.Load(); n != 3 {
		t.Errorf("%d requests sent, want 3 (the refused one once more, the held one)", n)
	}
	r := wait(t, send(context.Background(), g, http.MethodGet, nil))
	if r.err != nil || !g.openNow() {
		t.Errorf("after the return: %v, gate open %v", r.err, g.openNow())
	}
}

// TestGateBodyIsNotResent: a request with a body is not sent twice; its
// refusal closes the gate all the same.
func TestGateBodyIsNotResent(t *testing.T) {
	f := &fakeAPI{down: true}
	g := testGate(f)
	r := wait(t, send(context.Background(), g, http.MethodPost, strings.NewReader("{}")))
	if !errors.Is(r.err, syscall.ECONNREFUSED) {
		t.Fatalf("POST to a down API server: %v, want connection refused", r.err)
	}
	if g.openNow() || f.sent.Load() != 1 {
		t.Errorf("gate open %v, %d sent; want closed, 1", g.openNow(), f.sent.Load())
	}
}

// TestGateBrokenBodyCloses: a response body that breaks (a watch stream
// whose connection is lost) closes the gate; one that ends cleanly, or
// that its reader closed, does not.
func TestGateBrokenBodyCloses(t *testing.T) {
	f := &fakeAPI{}
	g := testGate(f)
	r := wait(t, send(context.Background(), g, http.MethodGet, nil))
	if _, err := io.ReadAll(r.resp.Body); err != nil || !g.openNow() {
		t.Fatalf("clean body: %v, gate open %v", err, g.openNow())
	}

	f.set(func(f *fakeAPI) { f.breakBody = true })
	r = wait(t, send(context.Background(), g, http.MethodGet, nil))
	r.resp.Body.Close() // closed by its reader: the error that follows is its own
	if _, err := io.ReadAll(r.resp.Body); err == nil || !g.openNow() {
		t.Fatalf("closed body: %v, gate open %v", err, g.openNow())
	}

	r = wait(t, send(context.Background(), g, http.MethodGet, nil))
	f.set(func(f *fakeAPI) { f.down = true }) // the connection is gone: probes fail
	if _, err := io.ReadAll(r.resp.Body); !errors.Is(err, errConnLost) {
		t.Fatalf("broken body: %v", err)
	}
	if g.openNow() {
		t.Fatal("gate open after a watch stream broke")
	}
	ch := send(context.Background(), g, http.MethodGet, nil)
	held(t, ch)
	f.set(func(f *fakeAPI) { f.down, f.breakBody = false, false })
	if r := wait(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
}

// TestGateHeldEndsWithContext: a held request ends when its context does
// (an informer's at shutdown), and the probes end with the last one.
func TestGateHeldEndsWithContext(t *testing.T) {
	f := &fakeAPI{down: true}
	g := testGate(f)
	ctx, cancel := context.WithCancel(context.Background())
	ch := send(ctx, g, http.MethodGet, nil)
	held(t, ch)
	cancel()
	if r := wait(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("held request after its context ended: %v", r.err)
	}
	time.Sleep(20 * time.Millisecond)
	n := f.probes.Load()
	time.Sleep(100 * time.Millisecond)
	if m := f.probes.Load(); m != n {
		t.Errorf("%d probes after the last held request left", m-n)
	}
	// the gate stays closed; the next request probes at once
	f.set(func(f *fakeAPI) { f.down = false })
	start := time.Now()
	if r := wait(t, send(context.Background(), g, http.MethodGet, nil)); r.err != nil || time.Since(start) > 500*time.Millisecond {
		t.Errorf("a request to a closed gate of an API server that is back: %v after %v", r.err, time.Since(start))
	}
}

// TestGateNoVerdict: a request whose own context ended (a caller's
// timeout) does not close the gate, nor does the failure of a request sent
// before the gate last opened.
func TestGateNoVerdict(t *testing.T) {
	f := &fakeAPI{hang: true}
	g := testGate(f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if r := wait(t, send(ctx, g, http.MethodGet, nil)); !errors.Is(r.err, context.DeadlineExceeded) || !g.openNow() {
		t.Fatalf("caller's timeout: %v, gate open %v", r.err, g.openNow())
	}

	f.set(func(f *fakeAPI) { f.hang = false })
	old, _ := g.wait(context.Background(), false)
	g.fail(old, errConnLost)
	if r := wait(t, send(context.Background(), g, http.MethodGet, nil)); r.err != nil {
		t.Fatal(r.err)
	}
	g.fail(old, errConnLost) // a request of the last epoch fails late
	if !g.openNow() {
		t.Error("an old request's failure closed the gate")
	}
}

// TestGateSuspect: the source's probe timing out closes the gate.
func TestGateSuspect(t *testing.T) {
	f := &fakeAPI{down: true}
	g := testGate(f)
	g.suspect(context.DeadlineExceeded)
	ch := send(context.Background(), g, http.MethodGet, nil)
	held(t, ch)
	if n := f.sent.Load(); n != 0 {
		t.Errorf("%d requests sent through a closed gate", n)
	}
	f.set(func(f *fakeAPI) { f.down = false })
	if r := wait(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
}

// TestGateNotReady: an API server that answers but is not ready yet keeps
// the gate closed (a restarting one refuses requests until its authorizer
// synced), but not for ever: after notReadyMax of answers in a row the
// requests go.
func TestGateNotReady(t *testing.T) {
	f := &fakeAPI{down: true}
	g := testGate(f)
	g.notReadyMax = 300 * time.Millisecond
	ch := send(context.Background(), g, http.MethodGet, nil)
	held(t, ch)
	f.set(func(f *fakeAPI) { f.down, f.notReady = false, true })
	answering := time.Now()
	held(t, ch)
	r := wait(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(answering); d < 250*time.Millisecond || d > time.Second {
		t.Errorf("released %v after the API server answered not ready, want after ~300ms", d)
	}

	// ready comes first
	f.set(func(f *fakeAPI) { f.down, f.notReady = true, false })
	g.notReadyMax = time.Hour
	ch = send(context.Background(), g, http.MethodGet, nil)
	held(t, ch)
	f.set(func(f *fakeAPI) { f.down, f.notReady = false, true })
	held(t, ch)
	f.set(func(f *fakeAPI) { f.notReady = false })
	if r := wait(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
}

// TestGateResumingWatch: a watch that would resume from its
// resourceVersion is held only until the API server is known to be away
// (the first probe failed), then fails, so that the reflector takes its
// relist delay during the outage; its relist (a watch-list or a list) and
// a watch of the latest version are held to the end. With the gate open,
// or closed and the API server not found away yet, it goes as it is.
func TestGateResumingWatch(t *testing.T) {
	const api = "https://api.test/api/v1/services?allowWatchBookmarks=true&watch=true"
	resume := api + "&resourceVersion=65&timeoutSeconds=382"
	relist := api + "&resourceVersion=65&resourceVersionMatch=NotOlderThan&sendInitialEvents=true"
	latest := api + "&resourceVersion=0"
	f := &fakeAPI{}
	g := testGate(f)
	if r := wait(t, sendURL(context.Background(), g, http.MethodGet, resume, nil)); r.err != nil {
		t.Fatalf("resuming watch through an open gate: %v", r.err)
	}

	f.set(func(f *fakeAPI) { f.down = true })
	g.suspect(errConnLost) // closed; the first probe has not run yet
	chs := map[string]<-chan result{}
	for _, u := range []string{relist, latest, resume} {
		chs[u] = sendURL(context.Background(), g, http.MethodGet, u, nil)
	}
	if r := wait(t, chs[resume]); !errors.Is(r.err, errAway) {
		t.Fatalf("resuming watch while the API server is away: %v, want errAway", r.err)
	}
	// once away, a resuming watch fails at once
	start := time.Now()
	if r := wait(t, sendURL(context.Background(), g, http.MethodGet, resume, nil)); !errors.Is(r.err, errAway) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("resuming watch: %v after %v, want errAway at once", r.err, time.Since(start))
	}
	held(t, chs[relist])
	held(t, chs[latest])
	f.set(func(f *fakeAPI) { f.down = false })
	for _, u := range []string{relist, latest} {
		if r := wait(t, chs[u]); r.err != nil {
			t.Errorf("%s after the return: %v", u, r.err)
		}
	}
	if n := f.sent.Load(); n != 3 {
		t.Errorf("%d requests sent, want 3 (the first watch, the relist, the latest)", n)
	}
}
