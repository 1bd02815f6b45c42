package mdns

import (
	"net/netip"
	"sync"
	"time"
)

// Per-source bound of unicast and legacy replies: each source address
// gets replyBurst replies at once and replyRate a second after that, so a
// querier (or a spoofer naming a victim as its source) cannot make us
// send it more than that, whatever it asks. Multicast replies have the
// once-a-second limit per record instead.
const (
	replyRate    = 10
	replyBurst   = 20
	replySources = 4096 // sources remembered; the idle ones go first
)

type sourceBucket struct {
	tokens float64
	last   time.Time
}

// replyLimiter is a token bucket per source address. Invariant: at most
// replySources sources are remembered.
type replyLimiter struct {
	mu sync.Mutex
	m  map[netip.Addr]*sourceBucket
}

// allow reports whether a unicast reply to src may go at now, and counts it.
func (l *replyLimiter) allow(src netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[netip.Addr]*sourceBucket{}
	}
	b := l.m[src]
	if b == nil {
		if len(l.m) >= replySources {
			l.prune(now)
		}
		b = &sourceBucket{tokens: replyBurst, last: now}
		l.m[src] = b
	}
	b.tokens = min(replyBurst, b.tokens+now.Sub(b.last).Seconds()*replyRate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// prune forgets the sources whose bucket is full again (they were idle
// long enough), or all of them when none is.
func (l *replyLimiter) prune(now time.Time) {
	for a, b := range l.m {
		if b.tokens+now.Sub(b.last).Seconds()*replyRate >= replyBurst {
			delete(l.m, a)
		}
	}
	if len(l.m) >= replySources {
		clear(l.m)
	}
}
