package endpointsvc

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// snapshotInterval is the least time between two snapshot writes: under
// churn the file is rewritten at most this often, always with the latest
// state. snapshotDuty widens it for a state so large that one write takes
// longer than 1/snapshotDuty of it: writing never takes more than that
// share of the time (of a core, at most).
const (
	snapshotInterval = time.Second
	snapshotDuty     = 25
)

// snapshotWriter writes the served state to the snapshot file off the
// sync path: offer hands it the latest state (never blocking, never
// holding the plugin's lock while encoding or syncing to disk), run writes
// at most once per snapshotInterval and, when its context ends, writes what
// is still pending (a clean stop keeps the final state).
type snapshotWriter struct {
	path string
	zone string // labels the metrics

	mu      sync.Mutex
	pending func(io.Writer) error // writes the latest state not written yet; nil: none
	at      time.Time             // when pending was applied
	kick    chan struct{}

	writes atomic.Int64 // files written (tests count them)
}

func newSnapshotWriter(path, zone string) *snapshotWriter {
	return &snapshotWriter{path: path, zone: zone, kick: make(chan struct{}, 1)}
}

// offer makes the state encode writes, applied at at, the state to write
// next.
func (w *snapshotWriter) offer(encode func(io.Writer) error, at time.Time) {
	w.mu.Lock()
	w.pending, w.at = encode, at
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run writes offered states until ctx is done, then the pending one.
func (w *snapshotWriter) run(ctx context.Context) {
	var last time.Time
	var took time.Duration // the last write
	for {
		select {
		case <-ctx.Done():
			w.flush()
			return
		case <-w.kick:
		}
		if wait := max(snapshotInterval, snapshotDuty*took) - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				w.flush()
				return
			case <-t.C:
			}
		}
		start := time.Now()
		w.flush()
		last, took = time.Now(), time.Since(start)
	}
}

// flush writes the pending state, if any.
func (w *snapshotWriter) flush() {
	w.mu.Lock()
	encode, at := w.pending, w.at
	w.pending = nil
	w.mu.Unlock()
	if encode == nil {
		return
	}
	if !snapshotNewest.claim(w.path, at) {
		return // another instance (a reload's successor) wrote a newer state
	}
	var n int64
	count := func(out io.Writer) error { return encode(countWriter{out, &n}) }
	if err := persist.WriteStream(w.path, count); err != nil {
		log.Warningf("Writing snapshot %q: %v", w.path, err)
		return
	}
	w.writes.Add(1)
	snapshotWrites.WithLabelValues(w.zone).Inc()
	snapshotBytes.WithLabelValues(w.zone).Add(float64(n))
}

// snapshotNewest remembers, per snapshot path, the time of the newest state
// written, so that an instance shutting down after a reload does not write
// its older pending state over its successor's.
var snapshotNewest = &newestWrites{at: map[string]time.Time{}}

type newestWrites struct {
	mu sync.Mutex
	at map[string]time.Time
}

// claim reports whether a state applied at at is newer than the last one
// written to path, and if so records it.
func (n *newestWrites) claim(path string, at time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if prev, ok := n.at[path]; ok && !at.After(prev) {
		return false
	}
	n.at[path] = at
	return true
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n *int64
}

func (c countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	*c.n += int64(n)
	return n, err
}
