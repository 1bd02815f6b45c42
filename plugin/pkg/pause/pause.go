// Package pause holds the waits the plugins' sync loops share: a sleep that
// ends early when the loop's context is cancelled (so OnShutdown never waits
// on a timer), and capped exponential backoff.
package pause

import (
	"context"
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
