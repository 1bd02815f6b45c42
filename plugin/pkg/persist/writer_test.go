package persist

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
)

// state returns an encoder of a state of n entries.
func state(n int) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, strconv.Itoa(n)); return err }
}

type holds struct {
	mu sync.Mutex
	ev []bool
}

func (h *holds) add(b bool) { h.mu.Lock(); h.ev = append(h.ev, b); h.mu.Unlock() }

// wait waits up to 2 s for n OnHold calls.
func (h *holds) wait(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if len(h.get()) >= n {
			return
		}
	}
	t.Fatalf("OnHold calls %v, want %d", h.get(), n)
}

func (h *holds) get() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.ev...)
}

func newTestWriter(t *testing.T, grace time.Duration) (*Writer, *holds, func()) {
	t.Helper()
	w := NewWriter(filepath.Join(t.TempDir(), "snap"), clog.NewWithPlugin("test"))
	w.Interval, w.EmptyGrace = 10*time.Millisecond, grace
	h := &holds{}
	w.OnHold = h.add
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	return w, h, func() { cancel(); <-done }
}

// fileIs waits up to 2 s for path to hold want (the writer works on its
// own goroutine).
func fileIs(t *testing.T, path, want string) {
	t.Helper()
	var b []byte
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ = os.ReadFile(path); string(b) == want {
			return
		}
	}
	t.Fatalf("snapshot holds %q, want %q", b, want)
}

// fileStays checks that path still holds want after the writer had time
// to act.
func fileStays(t *testing.T, path, want string) {
	t.Helper()
	settle()
	if b, _ := os.ReadFile(path); string(b) != want {
		t.Fatalf("snapshot holds %q, want it to stay %q", b, want)
	}
}

func settle() { time.Sleep(60 * time.Millisecond) }

// TestEmptyHold: an empty state after a non-empty one is not written until
// it has held for the grace; a non-empty state in between ends the hold;
// once the grace is over the empty state is written.
//
// The grace is seconds, not a fraction of one: the hold must start before
// it ends, and the writer's first flush of the empty state can come late
// when the disk is busy (its fsync of the state before took over 400 ms
// beside a cold build's cache writes, and the hold began already over).
func TestEmptyHold(t *testing.T) {
	const grace = 3 * time.Second
	w, h, stop := newTestWriter(t, grace)
	defer stop()
	w.Offer(state(3), 3, time.Now())
	fileIs(t, w.Path, "3")

	w.Offer(state(0), 0, time.Now())
	h.wait(t, 1)              // the writer took the empty state (a later offer would replace it)
	fileStays(t, w.Path, "3") // held
	w.Offer(state(5), 5, time.Now())
	fileIs(t, w.Path, "5") // the hold ended
	if got := h.get(); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("OnHold calls %v, want [true false]", got)
	}

	start := time.Now()
	w.Offer(state(0), 0, start)
	h.wait(t, 3)
	fileStays(t, w.Path, "5")
	for time.Since(start) < grace+2*time.Second {
		if b, _ := os.ReadFile(w.Path); string(b) == "0" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fileIs(t, w.Path, "0")
	if took := time.Since(start); took < grace {
		t.Fatalf("empty state written after %v, before the %v grace", took, grace)
	}
	if got := h.get(); len(got) != 4 || !got[2] || got[3] {
		t.Fatalf("OnHold calls %v, want [true false true false]", got)
	}
	// empty after empty: written as usual, no hold
	w.Offer(state(0), 0, time.Now())
	settle()
	if len(h.get()) != 4 {
		t.Fatalf("an empty state after an empty one started a hold")
	}
}

// TestEmptyHoldStop: a stop during the hold keeps the non-empty file, and
// the hold outlives the instance (a reload's successor continues it).
func TestEmptyHoldStop(t *testing.T) {
	w, _, stop := newTestWriter(t, time.Hour)
	w.Offer(state(7), 7, time.Now())
	fileIs(t, w.Path, "7")
	w.Offer(state(0), 0, time.Now())
	stop()
	fileIs(t, w.Path, "7")

	w2 := NewWriter(w.Path, clog.NewWithPlugin("test"))
	w2.EmptyGrace = time.Hour
	w2.Offer(state(0), 0, time.Now())
	w2.Flush()
	fileIs(t, w.Path, "7")
}

// TestEmptyHoldLoaded: a snapshot read at start is protected like one
// written; a missing one (Loaded with 0) is not, and a zero grace writes
// the empty state at once.
func TestEmptyHoldLoaded(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "loaded")
	if err := WriteFile(p, []byte("9")); err != nil {
		t.Fatal(err)
	}
	Loaded(p, 9)
	w := NewWriter(p, clog.NewWithPlugin("test"))
	w.EmptyGrace = time.Hour
	w.Offer(state(0), 0, time.Now())
	w.Flush()
	fileIs(t, p, "9")

	q := filepath.Join(dir, "missing")
	Loaded(q, 0)
	w = NewWriter(q, clog.NewWithPlugin("test"))
	w.EmptyGrace = time.Hour
	w.Offer(state(0), 0, time.Now())
	w.Flush()
	fileIs(t, q, "0")

	r := filepath.Join(dir, "nograce")
	w = NewWriter(r, clog.NewWithPlugin("test"))
	w.Offer(state(2), 2, time.Now())
	w.Flush()
	w.Offer(state(0), 0, time.Now())
	w.Flush()
	fileIs(t, r, "0")
}

// TestWriterNewestWins: an older state offered after a newer one was
// written (an instance stopping after its successor wrote) is not written.
func TestWriterNewestWins(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap")
	old := time.Now()
	a, b := NewWriter(p, clog.NewWithPlugin("test")), NewWriter(p, clog.NewWithPlugin("test"))
	b.Offer(state(2), 2, old.Add(time.Second))
	b.Flush()
	a.Offer(state(1), 1, old)
	a.Flush()
	fileIs(t, p, "2")
	if a.Writes() != 0 || b.Writes() != 1 {
		t.Fatalf("writes %d and %d, want 0 and 1", a.Writes(), b.Writes())
	}
}

// TestWritersRenameInOrder: two writers of one path around a reload, the
// older state's encoding still running when the newer one is written: the
// older is dropped at its rename, never renamed over the newer.
func TestWritersRenameInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap")
	old, cur := NewWriter(path, clog.NewWithPlugin("test")), NewWriter(path, clog.NewWithPlugin("test"))
	release := make(chan struct{})
	started := make(chan struct{})
	t0 := time.Now()
	old.Offer(func(w io.Writer) error {
		close(started)
		<-release // the old instance's encoding of a large table, still running
		return state(1)(w)
	}, 1, t0)
	done := make(chan struct{})
	go func() { defer close(done); old.Flush() }()
	<-started
	cur.Offer(state(2), 2, t0.Add(time.Millisecond))
	cur.Flush()
	close(release)
	<-done
	if b, _ := os.ReadFile(path); string(b) != "2" {
		t.Fatalf("snapshot holds %q, want the newer state 2", b)
	}
	if old.Writes() != 0 || cur.Writes() != 1 {
		t.Fatalf("writes: old %d, new %d, want 0 and 1", old.Writes(), cur.Writes())
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".snap.tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

// TestWriterOnError: a write that fails (the directory is gone) calls
// OnError and not OnWrite; the next state, once the directory is back, is
// written.
func TestWriterOnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(filepath.Join(dir, "snap"), clog.NewWithPlugin("test"))
	var mu sync.Mutex
	var errs, writes int
	w.OnError = func(error) { mu.Lock(); errs++; mu.Unlock() }
	w.OnWrite = func(int64) { mu.Lock(); writes++; mu.Unlock() }
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return errs, writes }
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	w.Offer(state(1), 1, time.Now())
	w.Flush()
	if e, n := counts(); e != 1 || n != 0 {
		t.Fatalf("after a failed write: %d errors, %d writes; want 1, 0", e, n)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.Offer(state(2), 2, time.Now())
	w.Flush()
	if e, n := counts(); e != 1 || n != 1 {
		t.Fatalf("after the directory is back: %d errors, %d writes; want 1, 1", e, n)
	}
	fileIs(t, filepath.Join(dir, "snap"), "2")
}
