package mdns

import (
	"sync"
	"time"
)

// DefaultQueryRate bounds the mDNS queries meshdns multicasts, per second
// over all names (each query is one packet per interface).
const DefaultQueryRate = 50

// Why a query was not sent (the reason label of mdns_queries_limited_total).
const (
	limitedRate = "rate" // the overall budget is spent
	limitedName = "name" // the name was asked less than a second ago
)

// queryLimiter bounds the mDNS queries that DNS requests set off, so that
// random names asked over DNS cannot turn meshdns into a multicast
// amplifier: a token bucket of rate queries a second (burst rate) over all
// names, and at most one query per name a second (RFC 6762 §5.2 wants at
// least a second between the first two queries for a name). Invariant: the
// remembered names are those asked in the last second, plus at most
// limiterNames older ones not pruned yet.
type queryLimiter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
	asked  map[string]time.Time
}

const limiterNames = 4096

func newQueryLimiter(rate int) *queryLimiter {
	if rate <= 0 {
		rate = DefaultQueryRate
	}
	return &queryLimiter{rate: float64(rate), tokens: float64(rate), asked: map[string]time.Time{}}
}

// allow reports whether a query for name may be sent at now, and if not,
// why; an allowed query is counted.
func (l *queryLimiter) allow(name string, now time.Time) (bool, string) {
	return l.allowKeeping(name, now, 0)
}

// allowBackground is allow for a query nobody waits for (the other hosts
// of a local name, a refresh): it must leave half the budget, so that
// background queries never starve the ones clients wait on.
func (l *queryLimiter) allowBackground(name string, now time.Time) (bool, string) {
	return l.allowKeeping(name, now, l.rate/2)
}

// allowKeeping is allow that leaves at least reserve tokens.
func (l *queryLimiter) allowKeeping(name string, now time.Time, reserve float64) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.asked[name]; ok && now.Sub(at) < time.Second {
		return false, limitedName
	}
	if !l.last.IsZero() {
		l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1+reserve {
		return false, limitedRate
	}
	l.tokens--
	if len(l.asked) >= limiterNames {
		for n, at := range l.asked {
			if now.Sub(at) >= time.Second {
				delete(l.asked, n)
			}
		}
	}
	l.asked[name] = now
	return true, ""
}
