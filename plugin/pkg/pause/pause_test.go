package pause

import (
	"context"
	"testing"
	"time"
)

func TestDouble(t *testing.T) {
	lo, hi := 250*time.Millisecond, 2*time.Second
	var got []time.Duration
	for d := time.Duration(0); len(got) < 6; {
		d = Double(d, lo, hi)
		got = append(got, d)
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Double sequence %v, want %v", got, want)
		}
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a full sleep reported cancellation")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("a cancelled sleep reported a full wait")
	}
	if time.Since(start) > time.Second {
		t.Fatal("a cancelled sleep did not return at once")
	}
}

func TestJitterSpread(t *testing.T) {
	d := time.Second
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		j := Jitter(d)
		if j < d/2 || j >= 2*d {
			t.Fatalf("Jitter(%v) = %v, outside [%v, %v)", d, j, d/2, 2*d)
		}
		lo, hi = min(lo, j), max(hi, j)
		if s := Spread(d); s < 0 || s >= d {
			t.Fatalf("Spread(%v) = %v, outside [0, %v)", d, s, d)
		}
	}
	if hi-lo < d { // 1000 draws over 1.5 s: a range under 1 s is ~impossible
		t.Fatalf("1000 Jitter(%v) span only %v..%v", d, lo, hi)
	}
	if Jitter(0) != 0 || Spread(0) != 0 {
		t.Fatal("Jitter(0) or Spread(0) is not 0")
	}
}
