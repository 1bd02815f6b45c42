package records

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

var log = clog.NewWithPlugin("mdnsfallback")

// snapshotFile is the on-disk form of the database. Aside (records
// outside the zones, kept for when they hold them again) is new in a
// version-1 file: a reader that does not know it ignores it.
type snapshotFile struct {
	Version int      `json:"version"`
	Records []Record `json:"records"`
	Aside   []Record `json:"aside,omitempty"`
}

// EncodeSnapshot is the snapshot file of recs and the records aside.
func EncodeSnapshot(recs, aside []Record) ([]byte, error) {
	return json.MarshalIndent(snapshotFile{Version: 1, Records: recs, Aside: aside}, "", " ")
}

// DecodeSnapshot reads a snapshot file: its records, then those aside.
func DecodeSnapshot(b []byte) ([]Record, error) {
	var s snapshotFile
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("unknown snapshot version %d", s.Version)
	}
	return append(s.Records, s.Aside...), nil
}

// snapshotPause is the least time between two snapshot writes; changes in
// between are coalesced into the next write.
const snapshotPause = 200 * time.Millisecond

// Writer writes the database to its snapshot file off the request
// path, after every change, coalescing bursts.
//
// Sync waits until a generation of the database is on disk: the writer
// writes at once (no pause) while somebody waits, and one write carries
// every change made before it (a group commit).
type Writer struct {
	path    string
	db      *DB
	dirty   atomic.Bool
	waiting atomic.Int32 // Sync calls waiting
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	written uint64        // the generation last written
	failed  uint64        // the generation of the last failed write
	lastErr error         // its error
	wrote   chan struct{} // closed (and replaced) after every write attempt
}

// NewWriter returns a writer of db to path; Start runs it.
func NewWriter(path string, db *DB) *Writer {
	return &Writer{path: path, db: db, kick: make(chan struct{}, 1), wrote: make(chan struct{})}
}

// Sync waits until generation gen of the database (or a later one) is
// written to disk, and returns nil; or the error of the write that should
// have carried it (the writer retries it), or ctx's.
func (s *Writer) Sync(ctx context.Context, gen uint64) error {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	s.Notify()
	for {
		s.mu.Lock()
		written, failed, err, wrote := s.written, s.failed, s.lastErr, s.wrote
		s.mu.Unlock()
		switch {
		case written >= gen:
			return nil
		case failed >= gen:
			return err
		}
		select {
		case <-wrote:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Notify marks the database changed.
func (s *Writer) Notify() {
	s.dirty.Store(true)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Start runs the writer until Close.
func (s *Writer) Start() {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
}

// Retries of a failed write (a full disk, a read-only mount): from
// snapshotRetryMin doubling to snapshotRetryMax, until one succeeds,
// whether or not the database changes meanwhile.
const (
	snapshotRetryMin = time.Second
	snapshotRetryMax = 30 * time.Second
)

func (s *Writer) run() {
	defer close(s.done)
	var retry <-chan time.Time
	backoff := time.Duration(0)
	for {
		select {
		case <-s.kick:
		case <-retry:
			s.dirty.Store(true)
		case <-s.stop:
			s.write()
			return
		}
		if err := s.write(); err != nil {
			backoff = min(max(2*backoff, snapshotRetryMin), snapshotRetryMax)
			retry = time.After(backoff)
		} else {
			backoff, retry = 0, nil
		}
		if s.waiting.Load() > 0 {
			continue // somebody waits for the disk: no pause
		}
		select {
		case <-time.After(snapshotPause):
		case <-s.stop:
			s.write()
			return
		}
	}
}

// Close writes what is pending and stops the writer.
func (s *Writer) Close() {
	if s.stop == nil {
		return
	}
	close(s.stop)
	<-s.done
	s.stop = nil
}

// write writes the database when it changed; a failure keeps it dirty and
// is returned (the run loop retries it).
func (s *Writer) write() error {
	if !s.dirty.Swap(false) {
		return nil // every change notified is written (a waiter notifies before it waits)
	}
	recs, aside, gen := s.db.All()
	b, err := EncodeSnapshot(recs, aside)
	if err == nil {
		err = persist.WriteFile(s.path, b)
	}
	if err != nil {
		s.dirty.Store(true)
		log.Errorf("Writing snapshot (retried): %v", err)
	}
	s.done1(gen, err)
	return err
}

// done1 records a write attempt of generation gen and wakes the waiters.
func (s *Writer) done1(gen uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed, s.lastErr = max(s.failed, gen), err
	} else if s.lastErr == nil || gen >= s.failed {
		s.written = max(s.written, gen)
		s.lastErr = nil
	}
	close(s.wrote)
	s.wrote = make(chan struct{})
}

// Load reads the snapshot into the database; a missing file is no error.
func (s *Writer) Load() (int, error) {
	b, err := persist.ReadFile(s.path)
	if err != nil || b == nil {
		return 0, err
	}
	recs, err := DecodeSnapshot(b)
	if err != nil {
		// Keep the unreadable file for inspection instead of overwriting it
		// with the next change.
		bad := s.path + ".bad"
		if rerr := os.Rename(s.path, bad); rerr == nil {
			return 0, fmt.Errorf("snapshot %s: %w (moved to %s)", s.path, err, bad)
		}
		return 0, fmt.Errorf("snapshot %s: %w", s.path, err)
	}
	aside, skipped := s.db.Replace(recs)
	if skipped > 0 {
		log.Warningf("Snapshot %s: skipped %d invalid records", s.path, skipped)
	}
	if aside > 0 {
		log.Warningf("Snapshot %s: %d records kept aside (outside the zones, or past max_records): they come back when the zones hold them", s.path, aside)
	}
	s.mu.Lock()
	s.written = s.db.Generation() // what was loaded is on disk
	s.mu.Unlock()
	return s.db.Len(), nil
}
