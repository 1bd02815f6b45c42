package mdns

import (
	"fmt"
	"testing"
	"time"
)

func TestQueryLimiter(t *testing.T) {
	l := newQueryLimiter(5)
	now := time.Unix(1000, 0)
	for i := range 5 {
		if ok, why := l.allow(fmt.Sprintf("n%d.", i), now); !ok {
			t.Fatalf("query %d of the burst refused (%s)", i, why)
		}
	}
	if ok, why := l.allow("n5.", now); ok || why != limitedRate {
		t.Fatalf("query past the burst: %v %q, want refused for rate", ok, why)
	}
	now = now.Add(200 * time.Millisecond) // one token back at 5/s
	if ok, _ := l.allow("n6.", now); !ok {
		t.Fatal("a query after the refill refused")
	}
	if ok, why := l.allow("n6.", now.Add(500*time.Millisecond)); ok || why != limitedName {
		t.Fatalf("the same name again within a second: %v %q, want refused for name", ok, why)
	}
	if ok, _ := l.allow("n6.", now.Add(1100*time.Millisecond)); !ok {
		t.Fatal("the same name a second later refused")
	}
}

// TestQueryLimiterBackground: background queries stop at half the budget;
// the other half stays for the queries clients wait on.
func TestQueryLimiterBackground(t *testing.T) {
	l := newQueryLimiter(10)
	now := time.Unix(1000, 0)
	bg := 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.allowBackground(fmt.Sprintf("bg%d.", i), now); ok {
			bg++
		}
	}
	fg := 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.allow(fmt.Sprintf("fg%d.", i), now); ok {
			fg++
		}
	}
	if bg != 5 || fg != 5 {
		t.Fatalf("background %d, foreground %d of a burst of 10: want 5 and 5", bg, fg)
	}
}
