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
