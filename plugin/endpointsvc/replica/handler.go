package replica

import (
	"context"
	"crypto/tls"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coredns/coredns/plugin/pkg/reuseport"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// ServeHTTP serves the stream: GET Path?v=V&epoch=E&gen=G&digest=D&buckets=B
// (each optional). Without a table yet it answers 503, so the follower tries
// again.
func (l *Leader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if code, msg := l.authorize(r); code != 0 {
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="replicate"`)
		}
		http.Error(w, msg, code)
		return
	}
	q, err := parseQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if l.Gen() == 0 {
		http.Error(w, "no table yet", http.StatusServiceUnavailable)
		return
	}
	if !l.serving() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the table is the snapshot's, the source has not answered yet: try again", http.StatusServiceUnavailable)
		return
	}
	s := l.next(q.epoch, q.gen, q.digest, q.buckets, true)
	if s.full && !l.acquire(r.Context(), l.WholeWait) {
		l.Stats.Busy.Add(1)
		busyRefused.WithLabelValues(l.zone).Inc()
		w.Header().Set("Retry-After", strconv.Itoa(1+mrand.IntN(5))) // spread the retries
		http.Error(w, "busy sending whole states: try again", http.StatusServiceUnavailable)
		return
	}
	if conn, base, ok := takeOver(w, r, l.WriteTimeout); ok {
		go l.streamConn(base, conn, q, s) // the handler returns: net/http's state for the connection goes (takeover.go)
		return
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	l.stream(r.Context(), httpWriter{w, http.NewResponseController(w)}, q, s)
}

// acquire takes a whole-send slot, waiting at most wait (< 0: until ctx
// ends); release gives it back.
func (l *Leader) acquire(ctx context.Context, wait time.Duration) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	var timeout <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case l.slots <- struct{}{}:
		return true
	case <-timeout:
	case <-ctx.Done():
	}
	return false
}

func (l *Leader) release() { <-l.slots }

// query is what a follower asks for: the stream's version (the older of
// the follower's and Version) and where its table stands (digest: version
// 3, the content of its state, which any replica may recognise).
type query struct {
	v       int
	epoch   string
	gen     uint64
	digest  digest
	buckets *[Buckets]uint64 // version 4: the follower's bucket digests' first lanes; nil none
}

// parseQuery reads ?v=&epoch=&gen=&digest=&buckets=; a version newer than
// Version is answered with Version, and one not given is 1; a digest is
// read from version 3 on, buckets (with a position) from version 4 on.
func parseQuery(r *http.Request) (query, error) {
	vals := r.URL.Query()
	q := query{v: 1, epoch: vals.Get("epoch")}
	if v := vals.Get("v"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return q, errorf("bad v %q", v)
		}
		q.v = min(n, Version)
	}
	if g := vals.Get("gen"); g != "" {
		n, err := strconv.ParseUint(g, 10, 64)
		if err != nil {
			return q, errorf("bad gen %q", g)
		}
		q.gen = n
	}
	if d := vals.Get("digest"); d != "" && q.v >= 3 {
		var ok bool
		if q.digest, ok = parseDigest(d); !ok {
			return q, errorf("bad digest %q", d)
		}
	}
	if bs := vals.Get("buckets"); bs != "" && q.v >= 4 && q.epoch != "" {
		var ok bool
		if q.buckets, ok = parseLanes(bs); !ok {
			return q, errorf("bad buckets: want %d characters of base64url", bucketsParamLen)
		}
	}
	return q, nil
}

// authorize checks the bearer token when the leader has a token file:
// 0 when the request may stream, else the status and message to answer.
func (l *Leader) authorize(r *http.Request) (int, string) {
	if l.token == nil {
		return 0, ""
	}
	ok, err := l.token.Check(r.Header.Get("Authorization"))
	if err != nil {
		log.Errorf("Replication token: %v", err)
		return http.StatusServiceUnavailable, "no token to check"
	}
	if !ok {
		return http.StatusUnauthorized, "bad or missing bearer token"
	}
	return 0, ""
}

// stream writes the first state (s, whose whole-send slot, if whole, is
// held), then every change, and a heartbeat when nothing changed for a
// while, until the follower goes or ctx ends.
func (l *Leader) stream(ctx context.Context, w writer, q query, s step) {
	epoch, gen := q.epoch, q.gen
	l.Stats.Streams.Add(1)
	streamsGauge.WithLabelValues(l.zone).Inc()
	defer func() {
		l.Stats.Streams.Add(-1)
		streamsGauge.WithLabelValues(l.zone).Dec()
	}()
	hb := time.NewTimer(l.Idle)
	defer hb.Stop()
	var head, tail []byte
	var sent time.Time // when the last state or change was written
	for first := true; ; first = false {
		if !first {
			s = l.next(epoch, gen, zeroDigest, nil, false)
			if s.full && !l.acquire(ctx, -1) { // a whole state again: the follower fell out of the log
				return
			}
		}
		if s.body != nil {
			head = head[:0]
			switch {
			case first && s.buckets != nil:
				head = appendBucketHeader(head, s.epoch, s.to, q.v, l.age(), s.buckets)
			case first || s.full:
				head = appendHeader(head, s.epoch, s.to, s.full, q.v, l.age(), s.from)
			}
			tail = appendSynced(tail[:0], s.body.gen, q.v, s.body.d, s.body.prog)
			err := l.send(w, head, s.body.b, tail)
			if s.full {
				l.release()
			}
			if err != nil {
				return
			}
			s.body = nil // a whole state is dropped once every stream has written it
			l.count(first, s.full, s.moved, s.buckets != nil)
			epoch, gen = s.epoch, s.to
			sent = time.Now()
			hb.Reset(l.Idle)
			if s.to < s.latest {
				continue // a reused whole state: the changes since it now
			}
		}
		wake, poke := s.wake, l.poked() // and not the body: a whole state is dropped once every stream has written it
		for waiting := true; waiting; {
			beat := false
			select {
			case <-ctx.Done():
				return
			case <-wake:
				waiting = false
			case <-poke: // the leader's staleness changed: say so now (v2)
				poke = l.poked()
				beat = q.v >= 2
			case <-hb.C:
				beat = true
			}
			if beat {
				if l.send(w, appendHeartbeat(head[:0], gen, q.v, l.age())) != nil {
					return
				}
				hb.Reset(l.Idle)
			}
		}
		// At most one change line per Pace: the changes that come
		// meanwhile go out together in the next.
		if d := l.Pace - time.Since(sent); d > 0 && !pause.Sleep(ctx, d) {
			return
		}
	}
}

// send writes parts in chunks of ChunkSize, each within l.WriteTimeout,
// and flushes them: a follower that stops reading is dropped after one
// WriteTimeout, whatever the size of the state.
func (l *Leader) send(w writer, parts ...[]byte) error {
	for _, b := range parts {
		for len(b) > 0 {
			n := min(len(b), ChunkSize)
			_ = w.SetWriteDeadline(time.Now().Add(l.WriteTimeout))
			n, err := w.Write(b[:n])
			l.Stats.Bytes.Add(int64(n))
			sentBytes.WithLabelValues(l.zone).Add(float64(n))
			if err != nil {
				return err
			}
			b = b[n:]
		}
	}
	_ = w.SetWriteDeadline(time.Now().Add(l.WriteTimeout))
	return w.Flush()
}

// count records a state sent: a stream's first (whole, the differing
// buckets, or resumed; moved: from another epoch's state, by its digest), a whole one again (the
// follower fell out of the log), or a change.
func (l *Leader) count(first, full, moved, bucketed bool) {
	kind := "change"
	switch {
	case full:
		kind = "full"
		l.Stats.Full.Add(1)
	case first && bucketed:
		kind = "buckets"
		l.Stats.Bucketed.Add(1)
	case first:
		kind = "resume"
		l.Stats.Resumed.Add(1)
		if moved {
			l.Stats.Moved.Add(1)
		}
	default:
		l.Stats.Changes.Add(1)
	}
	statesSent.WithLabelValues(l.zone, kind).Inc()
}

// Server is the stream's HTTP listener (`replicate ADDR`). It listens
// with SO_REUSEPORT, as CoreDNS's own listeners do, so that the instance
// a reload starts listens before this one stops.
type Server struct {
	addr    string
	handler http.Handler
	// TLS, when set before Start, makes it serve HTTPS with these files
	// (read again when they change).
	TLS *TLSFiles

	mu     sync.Mutex
	srv    *http.Server
	ln     net.Listener // closed by Stop itself: Shutdown/Close miss one Serve has not taken up yet
	bound  string       // the address listened on, once started
	cancel context.CancelFunc
}

// NewServer returns a listener of handler on addr; it listens from Start
// to Stop.
func NewServer(addr string, handler http.Handler) *Server {
	return &Server{addr: addr, handler: handler}
}

// Start listens and serves in the background.
func (s *Server) Start() error {
	var cfg *tls.Config
	if s.TLS != nil {
		if _, err := s.TLS.Server(); err != nil { // the files load now, or start-up fails
			return errorf("replicate %s: %w", s.addr, err)
		}
		files := s.TLS
		cfg = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return files.Server() }}
	}
	ln, err := reuseport.Listen("tcp", s.addr)
	if err != nil {
		return errorf("listen on %s: %w", s.addr, err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return context.WithValue(ctx, baseKey{}, ctx) }, // streams taken over end with it
	}
	s.mu.Lock()
	s.srv, s.ln, s.cancel, s.bound = srv, ln, cancel, ln.Addr().String()
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// Addr is the address it listens on, once started ("127.0.0.1:9155").
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Stop ends every stream and closes the listener; it may be called again.
func (s *Server) Stop() {
	s.mu.Lock()
	srv, ln, cancel := s.srv, s.ln, s.cancel
	s.srv, s.ln, s.cancel = nil, nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	cancel()
	_ = srv.Close()
	_ = ln.Close()
}
