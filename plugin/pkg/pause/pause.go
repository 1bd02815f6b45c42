// Package pause holds the waits the plugins' sync loops share: a sleep that
// ends early when the loop's context is cancelled (so OnShutdown never waits
// on a timer), and capped exponential backoff.
package pause

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep waits d, or until ctx is done; it reports whether the full wait
// passed (false: the caller should return).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Double is the next backoff after cur: twice cur, at least lo, at most hi.
// Start with cur = 0 to get lo.
func Double(cur, lo, hi time.Duration) time.Duration {
	return min(max(2*cur, lo), hi)
}

// Jitter returns a random duration in [d/2, 2d) (0 for d <= 0): a thousand
// nodes that start the same wait at the same instant (a failure of their
// common servers) spread their next request over 1.5 d instead of asking
// at once.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(3*d/2)
}

// Spread returns a random duration in [0, d) (0 for d <= 0): the delay
// before the requests a fleet-wide wake-up (a change every node's blocking
// query saw at once) sets off.
func Spread(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
