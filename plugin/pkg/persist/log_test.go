package persist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
)

// randomLog is a log against base with n random records (some empty), and
// the records.
func randomLog(r *rand.Rand, base Base, n int) ([]byte, [][]byte) {
	b := logHeader(base)
	var recs [][]byte
	for range n {
		p := make([]byte, r.Intn(40))
		r.Read(p)
		recs = append(recs, p)
		b = AppendRecord(b, p)
	}
	return b, recs
}

// TestParseLogCut: a log cut at any byte (a crash in the middle of an
// append) reads as exactly the records that end at or before the cut, and
// says where it stopped unless the cut is at a record's end.
func TestParseLogCut(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewSource(seed))
		base := Base{Name: "snap", Size: r.Int63n(1 << 20), CRC: r.Uint32()}
		b, recs := randomLog(r, base, 12)
		_, ends, tail := ParseLog(b, base)
		if tail != nil || len(ends) != len(recs) {
			t.Fatalf("seed %d: whole log: %d records, %v; want %d, nil", seed, len(ends), tail, len(recs))
		}
		hlen := len(logHeader(base))
		for cut := 0; cut <= len(b); cut++ {
			got, _, tail := ParseLog(b[:cut], base)
			want := 0
			for want < len(ends) && ends[want] <= cut {
				want++
			}
			if len(got) != want {
				t.Fatalf("seed %d cut %d: %d records, want %d", seed, cut, len(got), want)
			}
			for i := range got {
				if !bytes.Equal(got[i], recs[i]) {
					t.Fatalf("seed %d cut %d: record %d differs", seed, cut, i)
				}
			}
			atEnd := cut == hlen || (want > 0 && ends[want-1] == cut)
			if atEnd != (tail == nil) {
				t.Fatalf("seed %d cut %d: tail %v, at a record's end %v", seed, cut, tail, atEnd)
			}
		}
	}
}

// TestParseLogCorrupt: a byte changed anywhere in a record stops the reading
// before that record; in the header, no record is read.
func TestParseLogCorrupt(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	base := Base{Name: "snap", Size: 1234, CRC: 0xdeadbeef}
	b, recs := randomLog(r, base, 8)
	_, ends, _ := ParseLog(b, base)
	hlen := len(logHeader(base))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= byte(1 + r.Intn(255))
		got, _, tail := ParseLog(c, base)
		if tail == nil {
			t.Fatalf("byte %d changed: no error", i)
		}
		want := 0 // records wholly before byte i
		for want < len(ends) && ends[want] <= i {
			want++
		}
		if i < hlen {
			want = 0
		}
		if len(got) != want {
			t.Fatalf("byte %d changed: %d records, want the %d before it (%v)", i, len(got), want, tail)
		}
		for j := range got {
			if !bytes.Equal(got[j], recs[j]) {
				t.Fatalf("byte %d changed: record %d differs", i, j)
			}
		}
	}
}

// TestParseLogOtherBase: a log of another snapshot is never replayed.
func TestParseLogOtherBase(t *testing.T) {
	base := Base{Name: "snap", Size: 10, CRC: 1}
	b := AppendRecord(logHeader(base), []byte("x"))
	for _, other := range []Base{{Name: "snap", Size: 11, CRC: 1}, {Name: "snap", Size: 10, CRC: 2}, {Name: "other", Size: 10, CRC: 1}} {
		recs, _, tail := ParseLog(b, other)
		if len(recs) != 0 || !errors.Is(tail, ErrOtherBase) {
			t.Fatalf("log of %v read against %v: %d records, %v", base, other, len(recs), tail)
		}
	}
	if recs, _, tail := ParseLog([]byte("not a log\n"), base); len(recs) != 0 || tail == nil {
		t.Fatalf("not a log: %d records, %v", len(recs), tail)
	}
}

// FuzzParseLog: any bytes parse without panicking, the records returned
// frame back into a prefix of the input, and a clean parse is all of it.
func FuzzParseLog(f *testing.F) {
	base := Base{Name: "snap", Size: 3, CRC: 9}
	good := AppendRecord(AppendRecord(logHeader(base), []byte("one")), nil)
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte(LogFormat + " \"snap\" 3 00000009\n\x00\x00\x00\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, ends, tail := ParseLog(b, base)
		if len(recs) != len(ends) {
			t.Fatalf("%d records, %d ends", len(recs), len(ends))
		}
		if len(recs) == 0 {
			return
		}
		re := logHeader(base)
		for _, r := range recs {
			re = AppendRecord(re, r)
		}
		if !bytes.HasPrefix(b, re) || len(re) != ends[len(ends)-1] {
			t.Fatalf("the records do not frame back into the input's prefix")
		}
		if tail == nil && len(re) != len(b) {
			t.Fatalf("clean parse of %d bytes used %d", len(b), len(re))
		}
	})
}

// logWriter is a ChangeLog writer of a file in a fresh directory whose
// state is a list of numbers, written whole as their text; its change
// records are the numbers added.
type logWriter struct {
	*Writer
	state []int
}

func newLogWriter(t *testing.T) *logWriter {
	w := NewWriter(filepath.Join(t.TempDir(), "snap"), clog.NewWithPlugin("test"))
	w.ChangeLog = true
	w.Interval = time.Millisecond
	return &logWriter{Writer: w}
}

func (lw *logWriter) encode() func(io.Writer) error {
	s := fmt.Sprint(lw.state)
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func (lw *logWriter) whole(n ...int) {
	lw.state = append(lw.state[:0], n...)
	lw.Offer(lw.encode(), len(lw.state), time.Now())
	lw.Flush()
}

func (lw *logWriter) add(n int) {
	lw.state = append(lw.state, n)
	lw.OfferChange([]byte(fmt.Sprint(n)), lw.encode(), len(lw.state), time.Now())
	lw.Flush()
}

// replayed is the state on disk: the snapshot, with the log's numbers.
func (lw *logWriter) replayed(t *testing.T) string {
	s, err := ReadWithLog(lw.Path)
	if err != nil || s.LogTail != nil {
		t.Fatalf("reading: %v, %v", err, s.LogTail)
	}
	out := string(s.Base)
	for _, r := range s.Records {
		out += "+" + string(r)
	}
	return out
}

// TestChangeLogAppends: a change appends its record to the log (the file
// grows by the record and its 8-byte frame) and leaves the snapshot file
// as it was; once the log would pass the snapshot's size the whole
// state is written and the log starts again empty.
func TestChangeLogAppends(t *testing.T) {
	lw := newLogWriter(t)
	big := make([]int, 100)
	for i := range big {
		big[i] = 1000 + i
	}
	lw.whole(big...)
	base, _ := os.Stat(lw.Path)
	lg, err := os.Stat(LogPath(lw.Path))
	if err != nil {
		t.Fatalf("no log after the first write: %v", err)
	}
	size := lg.Size()
	if lw.Writes() != 1 || lw.Compactions() != 1 {
		t.Fatalf("%d writes, %d compactions; want 1, 1", lw.Writes(), lw.Compactions())
	}
	var added []string
	for i := 0; ; i++ {
		lw.add(i)
		added = append(added, fmt.Sprint(i))
		if lw.Compactions() > 1 {
			break
		}
		fi, _ := os.Stat(LogPath(lw.Path))
		if grew := fi.Size() - size; grew != int64(8+len(added[i])) {
			t.Fatalf("change %d: the log grew by %d bytes, want %d", i, grew, 8+len(added[i]))
		}
		size = fi.Size()
		now, _ := os.Stat(lw.Path)
		if !os.SameFile(now, base) || now.ModTime() != base.ModTime() || now.Size() != base.Size() {
			t.Fatalf("change %d: the snapshot file was rewritten", i)
		}
		if fi.Size()-int64(len(logHeader(BaseOf(lw.Path, make([]byte, base.Size()))))) > base.Size() {
			t.Fatalf("log of %d bytes past the snapshot's %d", fi.Size(), base.Size())
		}
		if got, want := lw.replayed(t), fmt.Sprint(big)+"+"+joinPlus(added); got != want {
			t.Fatalf("change %d: on disk %q, want %q", i, got, want)
		}
	}
	if got, want := lw.replayed(t), fmt.Sprint(lw.state); got != want {
		t.Fatalf("after the compaction: on disk %q, want the whole state %q", got, want)
	}
}

func joinPlus(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "+"
		}
		out += x
	}
	return out
}

// TestChangeLogCompactOnStop: a clean stop writes the state whole and
// leaves an empty log; a whole state offered writes whole too.
func TestChangeLogCompactOnStop(t *testing.T) {
	lw := newLogWriter(t)
	lw.whole(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	lw.add(20)
	lw.add(21)
	if got := lw.replayed(t); got != "[1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19]+20+21" { // 20 record bytes, under half of 49
		t.Fatalf("before the stop: %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { lw.Run(ctx); close(done) }()
	cancel()
	<-done
	if got, want := lw.replayed(t), fmt.Sprint(lw.state); got != want {
		t.Fatalf("after a clean stop: %q, want %q whole", got, want)
	}
	lw.add(22)
	lw.whole(5)
	if got := lw.replayed(t); got != "[5]" {
		t.Fatalf("after a whole state: %q", got)
	}
}

// TestChangeLogOtherWriter: a second writer of the path (a reload's
// successor) writes whole before it appends, and the first can no longer
// append to the log the second started.
func TestChangeLogOtherWriter(t *testing.T) {
	a := newLogWriter(t)
	a.whole(1, 2, 3, 4, 5, 6, 7, 8, 9)
	a.add(10)
	b := &logWriter{Writer: NewWriter(a.Path, a.Log)}
	b.ChangeLog, b.state = true, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	b.add(11) // b has not written: whole
	if got := b.replayed(t); got != "[1 2 3 4 5 6 7 8 9 10 11]" {
		t.Fatalf("the successor's first write: %q, want whole", got)
	}
	a.add(99) // the other instance: its change must not land in b's log (its state is newer: written whole)
	if got, want := b.replayed(t), fmt.Sprint(a.state); got != want {
		t.Fatalf("after the other writer's change: %q, want %q whole", got, want)
	}
}

// TestChangeLogConcurrentOffers offers changes (and now and then a whole
// state) from one goroutine while Run and another goroutine flush, for a
// few seeds: the records a flush appends, the ones offered while it
// writes (kept for the next), and the batch arrays reused between them
// must land on disk whole, framed, in order - the state on disk is the
// last one offered.
func TestChangeLogConcurrentOffers(t *testing.T) {
	for seed := range int64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			lw := newLogWriter(t)
			lw.whole(1, 2, 3)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { lw.Run(ctx); close(done) }()
			offering := make(chan struct{})
			flushed := make(chan struct{})
			go func() { // flushes beside Run's, which the duty rule spaces out
				defer close(flushed)
				for {
					select {
					case <-offering:
						return
					default:
						lw.Flush()
					}
				}
			}()
			for range 3000 {
				n := rng.Intn(1 << uint(rng.Intn(30)+1)) // records of 1 to 10 digits
				switch {
				case rng.Intn(100) == 0:
					lw.state = append(lw.state[:0], n)
					lw.Offer(lw.encode(), len(lw.state), time.Now())
				default:
					lw.state = append(lw.state, n)
					lw.OfferChange([]byte(fmt.Sprint(n)), lw.encode(), len(lw.state), time.Now())
				}
				if rng.Intn(20) == 0 {
					time.Sleep(time.Duration(rng.Intn(1500)) * time.Microsecond)
				}
			}
			close(offering)
			<-flushed
			lw.Flush()
			if got, want := sumState(t, lw.replayed(t)), fmt.Sprint(lw.state); got != want {
				t.Fatalf("on disk %q, want %q", got, want)
			}
			cancel()
			<-done
		})
	}
}

// sumState turns replayed's "[a b]+c+d" into the state "[a b c d]".
func sumState(t *testing.T, s string) string {
	base, recs, _ := strings.Cut(s, "+")
	out := strings.TrimSuffix(base, "]")
	for _, r := range strings.Split(recs, "+") {
		if r == "" {
			continue
		}
		if out != "[" {
			out += " "
		}
		out += r
	}
	return out + "]"
}

// TestChangeLogSyncInterval: appends are written at once (on disk for a
// reader at every step) but fsynced at most once per SyncInterval; Run
// fsyncs the appends left unsynced once it has passed, with no append to
// carry it.
func TestChangeLogSyncInterval(t *testing.T) {
	lw := newLogWriter(t)
	lw.SyncInterval = time.Hour
	base := make([]int, 100) // room for the records below
	for i := range base {
		base[i] = 100 + i
	}
	lw.whole(base...)
	for i := range 5 {
		lw.add(20 + i)
	}
	if got := lw.replayed(t); got != fmt.Sprint(base)+"+20+21+22+23+24" {
		t.Fatalf("appends not on disk at once: %q", got)
	}
	if n := lw.syncs.Load(); n != 0 {
		t.Fatalf("%d fsyncs of the log within its SyncInterval, want 0", n)
	}
	lw.SyncInterval = time.Nanosecond
	lw.add(25)
	lw.add(26)
	if n := lw.syncs.Load(); n != 2 {
		t.Fatalf("%d fsyncs with a SyncInterval past at each append, want 2", n)
	}

	lw.SyncInterval = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { lw.Run(ctx); close(done) }()
	lw.add(27) // within the interval of the last fsync: left for Run's timer
	deadline := time.Now().Add(5 * time.Second)
	for dirty(lw.Writer) {
		if time.Now().After(deadline) {
			t.Fatal("Run left the log's last append unsynced past its SyncInterval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := lw.syncs.Load(); n != 3 {
		t.Fatalf("%d fsyncs, want 3", n)
	}
	cancel()
	<-done
}

func dirty(w *Writer) bool {
	files.mu.Lock()
	defer files.mu.Unlock()
	return files.get(w.Path).dirty
}
