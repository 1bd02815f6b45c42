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

// TestQueryLimiterKinds: refreshes stop at half the budget, leaving the
// other half to the queries clients wait on; the queries for the other
// holders of local names have a bucket of their own (a tenth), so they
// never spend the refreshes' budget.
func TestQueryLimiterKinds(t *testing.T) {
	l := newQueryLimiter(10)
	now := time.Unix(1000, 0)
	count := func(prefix string, kind int) int {
		n := 0
		for i := 0; i < 20; i++ {
			if ok, _ := l.allowKind(fmt.Sprintf("%s%d.", prefix, i), now, kind); ok {
				n++
			}
		}
		return n
	}
	others, refresh, asked := count("local", queryOthers), count("bg", queryRefresh), count("fg", queryAsked)
	if others != 1 || refresh != 5 || asked != 5 {
		t.Fatalf("of a burst of 10: others %d, refresh %d, asked %d; want 1, 5 and 5", others, refresh, asked)
	}
}

// TestQueryBackoff: a name asked again and again (nobody answers) waits
// 1, 2, 4, 8 … seconds between its queries (RFC 6762 §5.2), up to a
// minute for a name clients ask and an hour in the background; an answer
// starts it over.
func TestQueryBackoff(t *testing.T) {
	l := newQueryLimiter(10000)
	now := time.Unix(1000, 0)
	var gaps []time.Duration
	last := now
	for at := now; at.Sub(now) < 10*time.Minute; at = at.Add(100 * time.Millisecond) {
		if ok, _ := l.allow("gone.", at); ok {
			gaps = append(gaps, at.Sub(last))
			last = at
		}
	}
	want := []time.Duration{0, 1, 2, 4, 8, 16, 32, 60, 60}
	for i, w := range want {
		if i >= len(gaps) || gaps[i].Round(100*time.Millisecond) != w*time.Second {
			t.Fatalf("gaps between the queries of a name nobody answers: %v, want %v s then a minute", gaps, want)
		}
	}
	ok := 0
	for at := now; at.Sub(now) < 3*time.Hour; at = at.Add(time.Second) {
		if y, _ := l.allowKind("local.", at, queryOthers); y {
			ok++
		}
	}
	if ok > 14 { // 1, 2, 4 … 2048 s, then hourly
		t.Fatalf("%d background queries for a local name in three hours", ok)
	}
	l.answered("gone.")
	if y, _ := l.allow("gone.", now.Add(3*time.Hour+time.Second)); !y {
		t.Fatal("an answer did not start the back-off over")
	}
}
