package records

import (
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

var log = clog.NewWithPlugin("mdnsfallback")

// snapshotFile is the on-disk form of the database.
type snapshotFile struct {
	Version int      `json:"version"`
	Records []Record `json:"records"`
}

// EncodeSnapshot is the snapshot file of recs.
func EncodeSnapshot(recs []Record) ([]byte, error) {
	return json.MarshalIndent(snapshotFile{Version: 1, Records: recs}, "", " ")
}

// DecodeSnapshot reads a snapshot file.
func DecodeSnapshot(b []byte) ([]Record, error) {
	var s snapshotFile
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("unknown snapshot version %d", s.Version)
	}
	return s.Records, nil
}

// snapshotPause is the least time between two snapshot writes; changes in
// between are coalesced into the next write.
const snapshotPause = 200 * time.Millisecond

// Writer writes the database to its snapshot file off the request
// path, after every change, coalescing bursts.
type Writer struct {
	path  string
	db    *DB
	dirty atomic.Bool
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// NewWriter returns a writer of db to path; Start runs it.
func NewWriter(path string, db *DB) *Writer {
	return &Writer{path: path, db: db, kick: make(chan struct{}, 1)}
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
		return nil
	}
	b, err := EncodeSnapshot(s.db.Records(""))
	if err == nil {
		err = persist.WriteFile(s.path, b)
	}
	if err != nil {
		s.dirty.Store(true)
		log.Errorf("Writing snapshot (retried): %v", err)
	}
	return err
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
	if skipped := s.db.Replace(recs); skipped > 0 {
		log.Warningf("Snapshot %s: skipped %d invalid records", s.path, skipped)
	}
	return s.db.Len(), nil
}
