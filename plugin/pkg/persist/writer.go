package persist

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
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
	// DefaultSyncInterval is the least time between two fsyncs of a
	// change log (Writer.SyncInterval).
	DefaultSyncInterval = 10 * time.Second
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
	// ChangeLog makes the writer keep a change log beside the file
	// (log.go): a change offered with OfferChange is appended to the log,
	// and the whole state is written (and a new, empty log started) only
	// when a whole state was offered (Offer), when the writer has not
	// written the snapshot the log follows itself (its first write), when
	// the log would grow past the snapshot's size, and at a clean
	// stop (the end of Run) when the log has records. OnAppend is called
	// after every append with the bytes appended; may be nil.
	ChangeLog bool
	OnAppend  func(bytes int64)
	// SyncInterval is the least time between two fsyncs of the change log
	// (0: DefaultSyncInterval). Every append is written at once, so a
	// process that dies (a crash, an OOM kill: the restarts the snapshot
	// is for) loses none; only a power cut or a kernel crash can lose the
	// appends of the last SyncInterval, and those leave the log a good
	// prefix (its records' CRCs). A whole write is fsynced before its
	// rename, always; a log with unsynced appends is fsynced once
	// SyncInterval has passed, and when Run ends.
	SyncInterval time.Duration

	mu       sync.Mutex
	flushing sync.Mutex            // held by a flush: they run one at a time
	pending  func(io.Writer) error // writes the latest state not written yet; nil: none
	entries  int                   // pending's entry count
	at       time.Time             // when pending was applied
	kick     chan struct{}
	// ChangeLog: adds append the records of the changes offered since the
	// last write, in order (encoded by the flush that appends them: a
	// second's records at once, on one goroutine, and none for changes a
	// whole write supersedes); whole is set by Offer until a whole write,
	// and gen counts the Offers (a flush keeps what was offered while it
	// wrote). buf is the flushes' buffer of framed records, reused.
	adds  []func([]byte) []byte
	buf   []byte
	whole bool
	gen   uint64
	// last is the latest state written (whole or appended), which the
	// compaction at stop writes whole.
	last        func(io.Writer) error
	lastN       int
	lastAt      time.Time
	compactions atomic.Int64

	writes atomic.Int64 // files written (tests count them)
	syncs  atomic.Int64 // fsyncs of the change log (tests count them)
}

// NewWriter returns a writer of path that logs to log.
func NewWriter(path string, log clog.P) *Writer {
	return &Writer{Path: path, Log: log, kick: make(chan struct{}, 1)}
}

// Writes is the number of files written.
func (w *Writer) Writes() int64 { return w.writes.Load() }

// Offer makes the state encode writes, with entries entries and applied at
// at, the state to write next, whole.
func (w *Writer) Offer(encode func(io.Writer) error, entries int, at time.Time) {
	w.mu.Lock()
	w.pending, w.entries, w.at = encode, entries, at
	w.adds, w.whole = nil, true
	w.gen++
	w.mu.Unlock()
	w.wake()
}

// OfferChange makes the state encode writes (entries entries, applied at
// at) the state to write next, reached from the last one offered by the
// change rec: with ChangeLog, rec is appended to the log (framed by the
// writer) instead of the whole state written, unless a compaction is due.
// rec must hold the whole new content of what it changes (replaying it
// twice is harmless) and must not be changed after.
func (w *Writer) OfferChange(rec []byte, encode func(io.Writer) error, entries int, at time.Time) {
	w.AppendChange(func(b []byte) []byte { return append(b, rec...) }, encode, entries, at)
}

// AppendChange is OfferChange with the record appended by add, when a
// flush appends it to the log (not at all when the whole state is
// written first): add runs later, on the writer's goroutine, so what it
// reads must not change after this call.
func (w *Writer) AppendChange(add func([]byte) []byte, encode func(io.Writer) error, entries int, at time.Time) {
	if !w.ChangeLog {
		w.Offer(encode, entries, at)
		return
	}
	w.mu.Lock()
	w.pending, w.entries, w.at = encode, entries, at
	w.adds = append(w.adds, add)
	w.mu.Unlock()
	w.wake()
}

// Compactions is the number of whole writes that reset the change log.
func (w *Writer) Compactions() int64 { return w.compactions.Load() }

func (w *Writer) wake() {
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
	var held, syncDue <-chan time.Time
	defer files.closeLog(w) // fsynced if it has unsynced appends
	for {
		select {
		case <-ctx.Done():
			w.Flush()
			w.compact()
			return
		case <-w.kick:
		case <-held:
		case <-syncDue:
			syncDue = w.syncLog()
			continue
		}
		held = nil
		if wait := max(interval, duty*took) - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				w.Flush()
				w.compact()
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
		if syncDue == nil {
			syncDue = w.syncLog()
		}
	}
}

// syncInterval is w's SyncInterval or its default.
func (w *Writer) syncInterval() time.Duration {
	if w.SyncInterval > 0 {
		return w.SyncInterval
	}
	return DefaultSyncInterval
}

// syncLog fsyncs w's log if its unsynced appends are due; it returns when
// to call it again (nil: nothing unsynced).
func (w *Writer) syncLog() <-chan time.Time {
	due, err := files.syncLog(w, time.Now())
	if err != nil {
		w.Log.Warningf("Syncing change log %q: %v; writing the whole snapshot next", LogPath(w.Path), err)
		if w.OnError != nil {
			w.OnError(err)
		}
	}
	if due.IsZero() {
		return nil
	}
	return time.After(time.Until(due))
}

// Flush writes the pending state now, if any and if the empty-sync rule
// lets it.
func (w *Writer) Flush() { w.flush() }

// flush writes the pending state. It reports whether it wrote, and when a
// pending empty state is held back, the time the hold ends.
func (w *Writer) flush() (wrote bool, heldUntil time.Time) {
	w.flushing.Lock() // one at a time: a flush owns buf
	defer w.flushing.Unlock()
	w.mu.Lock()
	encode, n, at, adds, whole, gen := w.pending, w.entries, w.at, w.adds, w.whole, w.gen
	w.mu.Unlock()
	if encode == nil {
		return false, time.Time{}
	}
	ok, until, event := files.claim(w.Path, n, at, w.EmptyGrace, time.Now())
	w.hold(event, until)
	if !until.IsZero() {
		return false, until // pending (and its changes) stays, for when the hold ends
	}
	w.mu.Lock()
	if w.gen == gen { // no whole state offered meanwhile: keep the changes offered since
		w.adds = w.adds[len(adds):]
		w.whole = false
	}
	if w.at.Equal(at) {
		w.pending = nil
	}
	w.mu.Unlock()
	defer clear(adds) // out of w.adds now: the changes they read can go
	if !ok {
		return false, time.Time{} // another instance (a reload's successor) wrote a newer state
	}
	if w.ChangeLog && !whole && n > 0 && len(adds) > 0 {
		b := w.buf[:0]
		for _, add := range adds {
			b = appendFramed(b, add)
		}
		if cap(b) <= maxBuf {
			w.buf = b
		}
		size, done, err := files.appendLog(w, at, b, len(adds), time.Now())
		if err != nil {
			w.Log.Warningf("Appending to change log %q: %v; writing the whole snapshot", LogPath(w.Path), err)
			if w.OnError != nil {
				w.OnError(err)
			}
		}
		if done {
			files.wrote(w.Path, n)
			w.written(encode, n, at)
			if w.OnAppend != nil {
				w.OnAppend(size)
			}
			return true, time.Time{}
		}
	}
	if !w.writeWhole(encode, n, at) {
		return false, time.Time{}
	}
	return true, time.Time{}
}

// maxBuf bounds the buffer a writer keeps for its records (a second's
// records under churn are tens of kilobytes).
const maxBuf = 1 << 20

// appendFramed appends the record add appends, framed as AppendRecord
// frames it, to b.
func appendFramed(b []byte, add func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHead)...)
	b = add(b)
	frame(b[start:])
	return b
}

// written notes the state on disk now, for the compaction at stop.
func (w *Writer) written(encode func(io.Writer) error, n int, at time.Time) {
	w.writes.Add(1)
	w.mu.Lock()
	w.last, w.lastN, w.lastAt = encode, n, at
	w.mu.Unlock()
}

// writeWhole writes the claimed state applied at at whole, and with
// ChangeLog starts a new log after it; it reports whether it wrote.
func (w *Writer) writeWhole(encode func(io.Writer) error, n int, at time.Time) bool {
	var size int64
	crc := crc32.New(castagnoli)
	count := func(out io.Writer) error { return encode(countWriter{io.MultiWriter(out, crc), &size}) }
	commit := func(tmp, path string) error {
		return files.commit(path, at, func(s *fileState) error {
			if err := os.Rename(tmp, path); err != nil {
				return err
			}
			s.dropLog() // it follows the snapshot just replaced
			s.owner = nil
			if !w.ChangeLog {
				_ = os.Remove(LogPath(path)) // a log of an earlier run follows another snapshot; gone all the same
				return nil
			}
			base := Base{Name: filepath.Base(path), Size: size, CRC: crc.Sum32()}
			h := logHeader(base)
			if err := WriteFile(LogPath(path), h); err != nil {
				// the old log names the old snapshot: never replayed onto this one
				w.Log.Warningf("Starting change log %q: %v", LogPath(path), err)
				return nil
			}
			s.owner, s.baseSize, s.recBytes, s.logRecs = w, size, 0, 0
			s.synced = time.Now() // WriteFile fsynced the header
			return nil
		})
	}
	if err := writeStream(w.Path, count, commit); err != nil {
		if !errors.Is(err, errSuperseded) {
			w.Log.Warningf("Writing snapshot %q: %v", w.Path, err)
			if w.OnError != nil {
				w.OnError(err)
			}
		}
		return false
	}
	files.wrote(w.Path, n)
	w.written(encode, n, at)
	if w.ChangeLog {
		w.compactions.Add(1)
	}
	if w.OnWrite != nil {
		w.OnWrite(size)
	}
	return true
}

// compact writes the state on disk whole and starts a new, empty log,
// when this writer's log has records (ChangeLog; a clean stop).
func (w *Writer) compact() {
	if !w.ChangeLog {
		return
	}
	w.mu.Lock()
	encode, n, at := w.last, w.lastN, w.lastAt
	w.mu.Unlock()
	if encode == nil || !files.hasRecords(w, at) {
		return
	}
	w.writeWhole(encode, n, at)
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
	// The change log (Writer.ChangeLog): owner is the writer that wrote
	// the snapshot on disk and started the log after it, the only one
	// that may append to it (nil: none may: the next write is whole);
	// baseSize is that snapshot's size, recBytes and logRecs the bytes
	// and number of the log's records (its header apart).
	owner    *Writer
	baseSize int64
	recBytes int64
	logRecs  int
	// log is the owner's log, open for appending from its first append
	// until the log is replaced, an append fails or the owner's Run ends;
	// synced is when it was last fsynced, dirty whether it has appends
	// since.
	log    *os.File
	synced time.Time
	dirty  bool
}

// dropLog closes the open log, unsynced appends and all (it is replaced
// or abandoned).
func (s *fileState) dropLog() {
	if s.log != nil {
		s.log.Close()
	}
	s.log, s.dirty = nil, false
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
func (f *fileStates) commit(path string, at time.Time, rename func(s *fileState) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.get(path)
	if !s.newest.Equal(at) {
		return errSuperseded
	}
	return rename(s)
}

// appendLog appends b, the nrecs framed records of the changes that led
// to the claimed state applied at at, to w's log, when w owns the log and
// it stays within the snapshot's size after (done): a compaction rewrites
// the snapshot whole, so its cost spread over the records appended since
// is at most what writing them cost (half the size: twice), and a
// start-up replays at most one snapshot's worth of records. The log stays
// open between appends, and is fsynced when SyncInterval has passed since
// it last was (Writer.SyncInterval). An append that fails leaves the log
// to no one: its tail may be torn, so the next write is whole.
func (f *fileStates) appendLog(w *Writer, at time.Time, b []byte, nrecs int, now time.Time) (size int64, done bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.get(w.Path)
	if s.owner != w || !s.newest.Equal(at) || s.recBytes+int64(len(b)) > s.baseSize {
		return 0, false, nil
	}
	if s.log == nil {
		if s.log, err = os.OpenFile(LogPath(w.Path), os.O_WRONLY|os.O_APPEND, 0); err != nil {
			s.log, s.owner = nil, nil
			return 0, false, err
		}
	}
	_, err = s.log.Write(b)
	s.dirty = true
	if err == nil && now.Sub(s.synced) >= w.syncInterval() {
		err = s.sync(w, now)
	}
	if err != nil {
		s.dropLog()
		s.owner = nil
		return 0, false, err
	}
	s.recBytes += int64(len(b))
	s.logRecs += nrecs
	return int64(len(b)), true, nil
}

// sync fsyncs the open log (s.log set).
func (s *fileState) sync(w *Writer, now time.Time) error {
	w.syncs.Add(1)
	s.synced, s.dirty = now, false
	return s.log.Sync()
}

// syncLog fsyncs w's log if it has unsynced appends and SyncInterval has
// passed since its last fsync; due is when to ask again (zero: nothing is
// unsynced). A failed fsync leaves the log to no one, as a failed append
// does.
func (f *fileStates) syncLog(w *Writer, now time.Time) (due time.Time, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.get(w.Path)
	if s.owner != w || s.log == nil || !s.dirty {
		return time.Time{}, nil
	}
	if d := s.synced.Add(w.syncInterval()); now.Before(d) {
		return d, nil
	}
	if err := s.sync(w, now); err != nil {
		s.dropLog()
		s.owner = nil
		return time.Time{}, err
	}
	return time.Time{}, nil
}

// closeLog fsyncs w's open log if it has unsynced appends, and closes it
// (Run's end: a successor appends to a log only after writing whole).
func (f *fileStates) closeLog(w *Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.get(w.Path)
	if s.owner != w || s.log == nil {
		return
	}
	if s.dirty {
		if err := s.sync(w, time.Now()); err != nil {
			w.Log.Warningf("Syncing change log %q: %v", LogPath(w.Path), err)
			s.owner = nil
		}
	}
	s.dropLog()
}

// hasRecords reports whether w owns the log, which has records, and the
// state applied at at is the newest on disk.
func (f *fileStates) hasRecords(w *Writer, at time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.get(w.Path)
	return s.owner == w && s.newest.Equal(at) && s.logRecs > 0
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
