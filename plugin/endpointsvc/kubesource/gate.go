package kubesource

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Settings of the gate.
const (
	gateProbeEvery   = time.Second      // how often a closed gate asks whether the API server is back
	gateProbeTimeout = time.Second      // bounds one such probe
	gateNotReadyMax  = 30 * time.Second // an API server that answers but never calls itself ready is let through after this
)

// gate sits in a client's transport (rest.Config.Wrap) and keeps client-go
// from backing off while the API server is unreachable. client-go's
// reflectors retry a failed list or watch after a delay that doubles with
// each failure up to 30 s, plus as much again of jitter, so after an outage
// of a minute their next try may come up to a minute after the API server
// is back. The gate closes when a request fails at the connection level
// (no HTTP answer: refused, reset, connection lost, also mid-body, as a
// watch stream breaks) or when the source's probe times out (suspect), and
// while it is closed it holds every request, until the request's context
// ends or the gate opens again. A held request has not failed, so the
// reflectors pile up no backoff: they wait in the gate, and go the moment
// it opens. A request refused at dial (it never left) is held and sent
// once more instead of failing. While requests are held a prober asks the
// API server's /readyz, through the same connections but not through the
// gate, once a second; the gate opens when it answers ready (or answers at
// all but may not be asked: 401, 403, 404), or when it has answered, not
// ready, for gateNotReadyMax in a row. The gate does not make requests of
// its own beyond the probe, and the prober runs only while requests wait:
// held requests end with their contexts (informers' at shutdown), and the
// prober with the last of them, so a client dropped while the API server
// is away leaves no goroutine behind.
type gate struct {
	user  string // whose client: the log's word for it
	next  http.RoundTripper
	probe func(ctx context.Context) (answered, ready bool)
	every time.Duration // probe interval (gateProbeEvery; tests shorten it)
	// notReadyMax lets requests through after the API server answered, not
	// ready, this long in a row (gateNotReadyMax; tests shorten it)
	notReadyMax time.Duration

	mu       sync.Mutex
	isOpen   bool
	opened   chan struct{} // closed when the gate opens; a new one at each closing
	away     chan struct{} // closed when a closed gate's first probe failed; a new one at each closing
	epoch    uint64        // counts openings: the failure of a request sent before the last one is old news
	waiters  int           // requests held now
	stop     context.CancelFunc
	closedAt time.Time
	logged   bool        // the closing was logged (the API server did not answer the first probe)
	onClose  func(error) // told why the gate closed (the source's failure report); nil: nobody
}

// newGate returns an open gate in front of next.
func newGate(user string, next http.RoundTripper, probe func(ctx context.Context) (answered, ready bool)) *gate {
	g := &gate{user: user, next: next, probe: probe, every: gateProbeEvery, notReadyMax: gateNotReadyMax,
		isOpen: true, opened: make(chan struct{}), away: make(chan struct{})}
	close(g.opened)
	return g
}

// RoundTrip implements http.RoundTripper.
func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	resume := resumesWatch(req)
	for retried := false; ; retried = true {
		epoch, err := g.wait(ctx, resume)
		if err != nil {
			return nil, err
		}
		resp, err := g.next.RoundTrip(req)
		if err == nil {
			resp.Body = &gatedBody{ReadCloser: resp.Body, g: g, ctx: ctx, epoch: epoch}
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, err // the caller gave up: no verdict on the API server
		}
		g.fail(epoch, err)
		if retried || !neverSent(err) || (req.Body != nil && req.Body != http.NoBody) {
			return nil, err
		}
	}
}

// neverSent reports a failure to connect: the request did not leave, so
// sending it again cannot repeat it.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// errAway ends a watch that would resume from its resourceVersion while
// the API server is away (see resumesWatch).
var errAway = errors.New("kubernetes API unreachable: not resuming the watch, relisting once it is back")

// resumesWatch reports a watch from a resourceVersion, without initial
// events: a reflector resuming after its watch ended cleanly, as every
// watch does when the API server shuts down. The gate holds it only until
// a probe confirms the API server is away, and then fails it (errAway),
// for the reflector to relist instead. Resuming would fail anyway once a
// restarted API server answers: its watch cache starts at the current
// version, so an older one is "too old", and the reflector relists after
// its retry delay (0.8-1.6 s, more after earlier retries) - after the
// return. Failed while the API server is away, the reflector takes that
// delay now and waits in the gate with its relist (a watch-list or list,
// which are held until the end) that goes the moment the API server is
// back. A watch ended by a broken connection relists anyway.
func resumesWatch(req *http.Request) bool {
	q := req.URL.Query()
	rv := q.Get("resourceVersion")
	return req.Method == http.MethodGet && q.Get("watch") == "true" && rv != "" && rv != "0" && q.Get("sendInitialEvents") != "true"
}

// wait returns at once while the gate is open, else when it opens or ctx
// ends, with the epoch the request goes out in; a watch that resumes ends
// (errAway) once the API server is known to be away.
func (g *gate) wait(ctx context.Context, resume bool) (uint64, error) {
	g.mu.Lock()
	if g.isOpen {
		defer g.mu.Unlock()
		return g.epoch, nil
	}
	g.waiters++
	if g.stop == nil {
		pctx, stop := context.WithCancel(context.Background())
		g.stop = stop
		go g.prober(pctx)
	}
	opened, away := g.opened, g.away
	if !resume {
		away = nil
	}
	g.mu.Unlock()

	var err error
	select {
	case <-opened:
	case <-ctx.Done():
		err = ctx.Err()
	case <-away:
		err = errAway
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiters--; g.waiters == 0 && g.stop != nil {
		g.stop() // nobody waits: nobody needs to know
		g.stop = nil
	}
	return g.epoch, err
}

// fail closes the gate after a request of epoch failed at the connection
// level; a request older than the last opening says nothing about now.
func (g *gate) fail(epoch uint64, err error) {
	g.mu.Lock()
	if !g.isOpen || epoch != g.epoch {
		g.mu.Unlock()
		return
	}
	g.isOpen, g.opened, g.away, g.closedAt, g.logged = false, make(chan struct{}), make(chan struct{}), time.Now(), false
	onClose := g.onClose
	g.mu.Unlock()
	log.Debugf("Kubernetes API (%s): request failed (%v): holding requests until it answers", g.user, err)
	if onClose != nil {
		onClose(err)
	}
}

// notify has fn told why the gate closes from now on: the requests it
// holds fail no more, and a source that reports failures from its
// informers' errors learns of the outage from the gate instead (at once,
// as before: a start-up with no snapshot waits for the first result, a
// failure included).
func (g *gate) notify(fn func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onClose = fn
}

// suspect closes the gate on another sign that the API server does not
// answer (the source's probe timed out).
func (g *gate) suspect(err error) {
	g.mu.Lock()
	epoch := g.epoch
	g.mu.Unlock()
	g.fail(epoch, err)
}

// open opens the gate and releases the held requests.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.isOpen {
		return
	}
	g.isOpen = true
	g.epoch++
	close(g.opened)
	if g.stop != nil {
		g.stop()
		g.stop = nil
	}
	if g.logged {
		log.Infof("Kubernetes API (%s) answers again after %v: releasing %d held requests", g.user, time.Since(g.closedAt).Round(time.Millisecond), g.waiters)
	}
}

// prober asks the API server whether it is back, once every g.every (at
// once the first time), until it is or ctx ends.
func (g *gate) prober(ctx context.Context) {
	var answering time.Time // the first of the probes answered in a row
	for first := true; ; first = false {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, gateProbeTimeout)
		answered, ready := g.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case !answered:
			answering = time.Time{}
		case answering.IsZero():
			answering = start
		}
		if ready || (answered && time.Since(answering) >= g.notReadyMax) {
			g.open()
			return
		}
		if first {
			g.noteDown()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(g.every))):
		}
	}
}

// noteDown logs the closing once the API server failed a probe too (a
// lone failed request that the first probe contradicts is not logged).
func (g *gate) noteDown() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.isOpen && !g.logged {
		g.logged = true
		close(g.away)
		log.Infof("Kubernetes API (%s) unreachable or not ready: holding its requests until it is (probing /readyz every %v)", g.user, g.every)
	}
}

// gatedBody reports a response body that breaks (a watch stream whose
// connection was lost) as a connection failure. A body closed by its
// reader, ended cleanly (io.EOF) or read after the request's context ended
// says nothing about the API server.
type gatedBody struct {
	io.ReadCloser
	g      *gate
	ctx    context.Context
	epoch  uint64
	closed atomic.Bool
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !b.closed.Load() && b.ctx.Err() == nil {
		b.g.fail(b.epoch, err)
	}
	return n, err
}

func (b *gatedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}
