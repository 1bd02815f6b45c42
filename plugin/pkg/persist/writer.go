package persist

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
)

// Defaults of a Writer.
const (
	// DefaultInterval is the least time between two writes of one file:
	// under churn it is rewritten at most this often, always with the
	// latest state.
	DefaultInterval = time.Second
	// DefaultEmptyGrace is how long an empty state must hold before it
	// replaces a non-empty snapshot (the empty-sync rule, below).
	DefaultEmptyGrace = 5 * time.Minute
	// duty widens the interval for a state so large that one write takes
	// longer than 1/duty of it: writing never takes more than that share
	// of the time (of a core, at most).
	duty = 25
)

// Writer writes a plugin's served state to its snapshot file off the sync
// path: Offer hands it the latest state (never blocking, never holding the
// caller's lock while encoding or syncing to disk), Run writes at most once
// per Interval and, when its context ends, writes what is still pending, so
// a clean stop keeps the final state.
//
// The empty-sync rule, the same for every source of every plugin: a source
// that returns no entries after a non-empty state is believed and served
// (the plugin swaps the empty table in), but the snapshot file keeps the
// last non-empty state until the empty result has held for EmptyGrace. A
// control plane that answers nothing by mistake for a while (a token that
// lost its policy, an orchestrator's own restart) then cannot wipe the
// state a restart during the following outage would need. One log line and
// OnHold say when the hold starts and when it ends.
type Writer struct {
	Path       string
	Interval   time.Duration // 0: DefaultInterval
	EmptyGrace time.Duration // 0: an empty state is written like any other
	Log        clog.P
	// OnWrite is called after every file written with its size; OnError
	// after a write that failed (the file keeps its last good state);
	// OnHold when the file starts (true) or stops (false) keeping a
	// non-empty state against an empty one. Any may be nil.
	OnWrite func(bytes int64)
	OnError func(err error)
	OnHold  func(held bool)

	mu      sync.Mutex
	pending func(io.Writer) error // writes the latest state not written yet; nil: none
	entries int                   // pending's entry count
	at      time.Time             // when pending was applied
	kick    chan struct{}

	writes atomic.Int64 // files written (tests count them)
}

// NewWriter returns a writer of path that logs to log.
func NewWriter(path string, log clog.P) *Writer {
	return &Writer{Path: path, Log: log, kick: make(chan struct{}, 1)}
}

// Writes is the number of files written.
func (w *Writer) Writes() int64 { return w.writes.Load() }

// Offer makes the state encode writes, with entries entries and applied at
// at, the state to write next.
func (w *Writer) Offer(encode func(io.Writer) error, entries int, at time.Time) {
	w.mu.Lock()
	w.pending, w.entries, w.at = encode, entries, at
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run writes offered states until ctx is done, then the pending one.
func (w *Writer) Run(ctx context.Context) {
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	var last time.Time
	var took time.Duration // the last write
	var held <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			w.Flush()
			return
		case <-w.kick:
		case <-held:
		}
		held = nil
		if wait := max(interval, duty*took) - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				w.Flush()
				return
			case <-t.C:
			}
		}
		start := time.Now()
		wrote, until := w.flush()
		if wrote {
			last, took = time.Now(), time.Since(start)
		}
		if !until.IsZero() {
			held = time.After(time.Until(until))
		}
	}
}

// Flush writes the pending state now, if any and if the empty-sync rule
// lets it.
func (w *Writer) Flush() { w.flush() }

// flush writes the pending state. It reports whether it wrote, and when a
// pending empty state is held back, the time the hold ends.
func (w *Writer) flush() (wrote bool, heldUntil time.Time) {
	w.mu.Lock()
	encode, n, at := w.pending, w.entries, w.at
	w.mu.Unlock()
	if encode == nil {
		return false, time.Time{}
	}
	ok, until, event := files.claim(w.Path, n, at, w.EmptyGrace, time.Now())
	w.hold(event, until)
	if !until.IsZero() {
		return false, until // pending stays, for when the hold ends
	}
	w.mu.Lock()
	if w.at.Equal(at) {
		w.pending = nil
	}
	w.mu.Unlock()
	if !ok {
		return false, time.Time{} // another instance (a reload's successor) wrote a newer state
	}
	var size int64
	count := func(out io.Writer) error { return encode(countWriter{out, &size}) }
	commit := func(tmp, path string) error {
		return files.commit(path, at, func() error { return os.Rename(tmp, path) })
	}
	if err := writeStream(w.Path, count, commit); err != nil {
		if !errors.Is(err, errSuperseded) {
			w.Log.Warningf("Writing snapshot %q: %v", w.Path, err)
			if w.OnError != nil {
				w.OnError(err)
			}
		}
		return false, time.Time{}
	}
	files.wrote(w.Path, n)
	w.writes.Add(1)
	if w.OnWrite != nil {
		w.OnWrite(size)
	}
	return true, time.Time{}
}

// hold logs a change of the empty hold and tells OnHold.
func (w *Writer) hold(e holdEvent, until time.Time) {
	switch e.kind {
	case holdNone:
		return
	case holdStart:
		w.Log.Warningf("The source returned no entries: serving none, but snapshot %q keeps the last %d until the empty result has held for %v (until %s)",
			w.Path, e.kept, w.EmptyGrace, until.UTC().Format(time.RFC3339))
	case holdEnd:
		w.Log.Infof("The source returned entries again; snapshot %q follows it", w.Path)
	case holdExpired:
		w.Log.Warningf("The source has returned no entries for %v: snapshot %q now written empty", w.EmptyGrace, w.Path)
	}
	if w.OnHold != nil {
		w.OnHold(e.kind == holdStart)
	}
}

// Loaded records that the snapshot at path held entries entries when a
// plugin read it at start (0 when missing or unreadable), so that the
// empty-sync rule knows what the file protects.
func Loaded(path string, entries int) { files.loaded(path, entries) }

// files is the process-wide state of each snapshot path, shared by the
// instances a reload replaces and starts.
var files = &fileStates{m: map[string]*fileState{}}

type fileStates struct {
	mu sync.Mutex
	m  map[string]*fileState
}

type fileState struct {
	newest     time.Time // when the newest state written was applied
	entries    int       // entries of the state on disk
	emptySince time.Time // when the current run of empty states began; zero when none
}

type holdKind int

const (
	holdNone holdKind = iota
	holdStart
	holdEnd
	holdExpired
)

type holdEvent struct {
	kind holdKind
	kept int
}

func (f *fileStates) get(path string) *fileState {
	s := f.m[path]
	if s == nil {
		s = &fileState{}
		f.m[path] = s
	}
	return s
}

func (f *fileStates) loaded(path string, entries int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.get(path).entries = entries
}

// claim decides whether a state of n entries applied at at may be written
// to path now: ok is false when a newer state was written already; until is
// set when the empty-sync rule holds the state back until then.
func (f *fileStates) claim(path string, n int, at time.Time, grace time.Duration, now time.Time) (ok bool, until time.Time, e holdEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.get(path)
	if !s.newest.IsZero() && !at.After(s.newest) {
		return false, time.Time{}, e
	}
	switch {
	case n > 0 && !s.emptySince.IsZero():
		s.emptySince = time.Time{}
		e = holdEvent{kind: holdEnd}
	case n == 0 && s.entries > 0 && grace > 0:
		if s.emptySince.IsZero() {
			s.emptySince = at
			e = holdEvent{kind: holdStart, kept: s.entries}
		}
		if u := s.emptySince.Add(grace); now.Before(u) {
			return false, u, e
		}
		s.emptySince = time.Time{}
		e = holdEvent{kind: holdExpired, kept: s.entries}
	}
	s.newest = at
	return true, time.Time{}, e
}

// errSuperseded: a newer state was claimed while this one was written; its
// temporary file is dropped, never renamed over the newer one.
var errSuperseded = errors.New("superseded by a newer state")

// commit renames a written state applied at at over path (by rename) if no
// writer of path claimed a newer state meanwhile, in one step with that
// check across every instance of the path: two writers around a reload
// cannot rename out of order and leave the older state on disk.
func (f *fileStates) commit(path string, at time.Time, rename func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.get(path).newest.Equal(at) {
		return errSuperseded
	}
	return rename()
}

// wrote records a claimed state as on disk.
func (f *fileStates) wrote(path string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.get(path).entries = n
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
