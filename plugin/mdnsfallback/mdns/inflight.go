package mdns

import (
	"sync"
	"time"
)

// The collection window: a query collects answers after the first one
// for as long again as the first took to come, at least collectTail, never
// past its timeout. A QU query's responders reply by unicast at once;
// beside a QM query (another stack shares port 5353) the same questions
// go out as a one-shot query, which every responder answers by unicast at
// once too (RFC 6762 §6.7), so the other holders of a shared name answer
// about when the first did — later on a busy host, hence a window that
// grows with the first answer's delay. Only a responder that answers
// neither would be heard after the window, and its multicast answer still
// enters the cache for the next lookup. (The window was 125 ms from a QM
// query, to wait out responders' 20–120 ms delay of shared multicast
// answers: docs/measurements/mdnsfallback.md has cold lookups beside Avahi
// before and after.) The answer is every host's addresses heard in the
// window, not the first host's alone.
const collectTail = 20 * time.Millisecond

// call is one mDNS query in flight; every DNS request for the same name
// waits on the same call. Invariant: done is closed exactly once, by
// whoever removes the call from the table.
type call struct {
	done     chan struct{}
	timer    *time.Timer
	started  time.Time
	timeout  time.Duration
	qm       bool // the query asked for multicast replies
	answered bool // an answer arrived: the timer now ends the collection
}

// inflight shares mDNS queries between concurrent requests, bounded in
// how many names may be in flight at once.
type inflight struct {
	mu  sync.Mutex
	m   map[string]*call
	max int
	// recent holds the names whose query ended lately, until when a
	// unicast answer still counts for them (RFC 6762 §6: it answers a
	// query sent recently): a holder that answers after the collection
	// window, on a busy host, enters the cache for the next lookups
	// instead of being dropped as unsolicited. At most recentMax names.
	recent map[string]time.Time
}

// recentGrace is how long after its query ends a unicast answer still
// counts for a name (longer when the query's timeout ends later).
const (
	recentGrace = time.Second
	recentMax   = 4096
)

func newInflight(max int) *inflight {
	return &inflight{m: map[string]*call{}, max: max, recent: map[string]time.Time{}}
}

// join returns the call for name and whether the caller must send the
// query; nil when too many queries are in flight. A new call ends after
// timeout, or once the collection window after an answer has passed,
// running onDone first; qm says the query asks for multicast replies.
func (f *inflight) join(name string, timeout time.Duration, qm bool, onDone func()) (*call, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.m[name]; ok {
		return c, false
	}
	if len(f.m) >= f.max {
		return nil, false
	}
	c := &call{done: make(chan struct{}), started: time.Now(), timeout: timeout, qm: qm}
	c.timer = time.AfterFunc(timeout, func() { f.finishCall(name, c, onDone) })
	f.m[name] = c
	return c, true
}

// answered notes an answer for name at now: the call, if any, ends at the
// end of its collection window. It reports whether a call was waiting.
func (f *inflight) answered(name string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.m[name]
	if !ok {
		return false
	}
	if !c.answered {
		c.answered = true
		end := now.Add(max(collectTail, now.Sub(c.started)))
		if limit := c.started.Add(c.timeout); end.After(limit) {
			end = limit
		}
		c.timer.Reset(max(end.Sub(now), 0))
	}
	return true
}

// get returns the call in flight for name, or nil.
func (f *inflight) get(name string) *call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[name]
}

// pending reports whether a query for name is in flight or ended less
// than recentGrace ago: a unicast response counts for it only then (RFC
// 6762 §6).
func (f *inflight) pending(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[name]; ok {
		return true
	}
	until, ok := f.recent[name]
	return ok && time.Now().Before(until)
}

// abandon ends c, the call for name, at once, without its onDone: the
// query was never sent.
func (f *inflight) abandon(name string, c *call) {
	c.timer.Stop()
	f.finishCall(name, c, nil)
}

// finishCall completes c if it is still the call for name.
func (f *inflight) finishCall(name string, c *call, onDone func()) {
	f.mu.Lock()
	if f.m[name] != c {
		f.mu.Unlock()
		return
	}
	delete(f.m, name)
	if onDone != nil { // the query was sent: its late answers still count a while
		f.noteRecentLocked(name, c, time.Now())
	}
	f.mu.Unlock()
	if onDone != nil {
		onDone()
	}
	close(c.done)
}

// noteRecentLocked remembers name's query, which ended at now, in
// f.recent; f.mu is held.
func (f *inflight) noteRecentLocked(name string, c *call, now time.Time) {
	if len(f.recent) >= recentMax {
		for n, until := range f.recent {
			if !now.Before(until) {
				delete(f.recent, n)
			}
		}
		if len(f.recent) >= recentMax {
			return // a flood of names: late answers for this one are dropped
		}
	}
	until := now.Add(recentGrace)
	if end := c.started.Add(c.timeout); end.After(until) {
		until = end
	}
	f.recent[name] = until
}

// stop ends every call in flight (shutdown).
func (f *inflight) stop() {
	f.mu.Lock()
	calls := f.m
	f.m = map[string]*call{}
	clear(f.recent)
	f.mu.Unlock()
	for _, c := range calls {
		c.timer.Stop()
		close(c.done)
	}
}
