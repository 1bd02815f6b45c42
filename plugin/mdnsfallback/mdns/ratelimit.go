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
	limitedRate = "rate" // the budget is spent
	limitedName = "name" // the name was asked too recently (its back-off)
)

// Back-off of a name asked again (RFC 6762 §5.2): the first two queries
// for a name are at least backoffFirst apart, and each interval after is
// twice the one before, up to backoffCapAsked for a name a client waits
// on and backoffCapBackground for one asked with nobody waiting. An
// answer for the name starts it over.
const (
	backoffFirst         = time.Second
	backoffCapAsked      = time.Minute
	backoffCapBackground = time.Hour
)

// Kinds of query (who waits on it).
const (
	queryAsked   = iota // a client waits on it
	queryRefresh        // a cached name clients use is due for a refresh
	queryOthers         // the other holders of a local name
)

// askState is a name's back-off: when it was last asked and the interval
// before it may be asked again.
type askState struct {
	at       time.Time
	interval time.Duration
}

// queryLimiter bounds the mDNS queries that DNS requests set off, so that
// random names asked over DNS cannot turn meshdns into a multicast
// amplifier: a token bucket of rate queries a second (burst rate) over all
// names shared by the queries clients wait on and the refreshes (which must
// leave half of it), a bucket of its own a tenth that size for the queries
// about the other holders of local names (so that names this host holds
// never spend the refresh budget), and a back-off per name. Invariant: at
// most limiterNames names are remembered.
type queryLimiter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	local  float64 // the bucket of queryOthers
	last   time.Time
	asked  map[string]*askState
}

const limiterNames = 4096

func newQueryLimiter(rate int) *queryLimiter {
	if rate <= 0 {
		rate = DefaultQueryRate
	}
	return &queryLimiter{rate: float64(rate), tokens: float64(rate), local: localRate(float64(rate)), asked: map[string]*askState{}}
}

// localRate is the rate (and burst) of queryOthers.
func localRate(rate float64) float64 { return max(rate/10, 1) }

// allow reports whether a query a client waits on may be sent for name at
// now, and if not, why; an allowed query is counted.
func (l *queryLimiter) allow(name string, now time.Time) (bool, string) {
	return l.allowKind(name, now, queryAsked)
}

// allowKind is allow for a query of kind.
func (l *queryLimiter) allowKind(name string, now time.Time, kind int) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.asked[name]
	limit := backoffCapAsked
	if kind != queryAsked {
		limit = backoffCapBackground
	}
	if st != nil && now.Sub(st.at) < min(st.interval, limit) {
		return false, limitedName
	}
	if !l.last.IsZero() {
		el := now.Sub(l.last).Seconds()
		l.tokens = min(l.rate, l.tokens+el*l.rate)
		l.local = min(localRate(l.rate), l.local+el*localRate(l.rate))
	}
	l.last = now
	switch kind {
	case queryOthers:
		if l.local < 1 {
			return false, limitedRate
		}
		l.local--
	default:
		reserve := 0.0
		if kind == queryRefresh {
			reserve = l.rate / 2
		}
		if l.tokens < 1+reserve {
			return false, limitedRate
		}
		l.tokens--
	}
	l.note(name, st, now)
	return true, ""
}

// note records a query for name sent at now: its interval doubles.
func (l *queryLimiter) note(name string, st *askState, now time.Time) {
	if st == nil {
		if len(l.asked) >= limiterNames {
			l.prune(now)
		}
		l.asked[name] = &askState{at: now, interval: backoffFirst}
		return
	}
	st.at, st.interval = now, min(2*st.interval, backoffCapBackground)
}

// prune forgets the names whose back-off has run out, or all of them
// when none has (they start over at backoffFirst).
func (l *queryLimiter) prune(now time.Time) {
	for n, st := range l.asked {
		if now.Sub(st.at) >= min(st.interval, backoffCapAsked) {
			delete(l.asked, n)
		}
	}
	if len(l.asked) >= limiterNames {
		clear(l.asked)
	}
}

// answered starts the back-off of name over: somebody answered it.
func (l *queryLimiter) answered(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.asked, name)
}
