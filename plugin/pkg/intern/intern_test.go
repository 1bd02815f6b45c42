package intern

import (
	"fmt"
	"sync"
	"testing"
	"unique"
	"unsafe"
)

// TestHandleIsUniques: a Table's handle equals unique.Make's for the same
// name, also for a name given as a view of bytes overwritten afterwards.
func TestHandleIsUniques(t *testing.T) {
	var tb Table
	b := []byte("node-1")
	h := tb.Handle(unsafe.String(&b[0], len(b)))
	copy(b, "xxxxxx")
	if h != unique.Make("node-1") || h.Value() != "node-1" {
		t.Fatalf("handle %q, want unique's node-1", h.Value())
	}
	if tb.Handle("node-1") != h {
		t.Fatal("second handle differs")
	}
	if got := tb.String("ns"); got != "ns" || unsafe.StringData(got) != unsafe.StringData(unique.Make("ns").Value()) {
		t.Fatal("String is not the canonical copy")
	}
}

// TestBounded: past Max names the table starts again, and still answers
// with unique's handles.
func TestBounded(t *testing.T) {
	tb := Table{Max: 8}
	for i := range 100 {
		n := fmt.Sprintf("n-%d", i)
		if tb.Handle(n) != unique.Make(n) {
			t.Fatalf("%s: not unique's handle", n)
		}
		if len(tb.m) > 8 {
			t.Fatalf("%d names held, want <= 8", len(tb.m))
		}
	}
}

// TestConcurrent runs handles from several goroutines (go test -race).
func TestConcurrent(t *testing.T) {
	tb := Table{Max: 16}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				n := fmt.Sprintf("n-%d", (i*7+g)%40)
				if tb.Handle(n).Value() != n {
					t.Errorf("%s: wrong value", n)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkHandle(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	b.Run("table", func(b *testing.B) {
		var tb Table
		for i := 0; b.Loop(); i++ {
			_ = tb.Handle(names[i%100])
		}
	})
	b.Run("unique", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = unique.Make(names[i%100])
		}
	})
}
