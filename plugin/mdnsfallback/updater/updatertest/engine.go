// Package updatertest provides a container engine for tests of the
// updater and of what drives it: its containers and event stream are the
// test's to set.
package updatertest

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
)

// Engine is an updater.Engine whose containers and event stream the test
// drives; SetDown makes every call fail and breaks the streams.
type Engine struct {
	mu         sync.Mutex
	ctrs       map[string]updater.Container
	down       bool
	subs       []chan updater.Event
	errs       []chan error
	sessions   int // successful subscriptions
	pings      int
	inspectErr map[string]error // Inspect of these IDs fails (FailInspect)
	hold       chan struct{}    // Running waits for it to close (HoldRunning)
	delay      time.Duration    // each Inspect and each container Running inspects takes this long
}

// New returns an engine with no containers.
func New() *Engine {
	return &Engine{ctrs: map[string]updater.Container{}, inspectErr: map[string]error{}}
}

// ErrDown is what calls return while the engine is down.
var ErrDown = errors.New("fake engine down")

// Endpoint implements updater.Engine.
func (f *Engine) Endpoint() string { return "fake://" }

// Close implements updater.Engine.
func (f *Engine) Close() error { return nil }

// Ping implements updater.Engine.
func (f *Engine) Ping(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	if f.down {
		return "", ErrDown
	}
	return "1.41", nil
}

// Events implements updater.Engine.
func (f *Engine) Events(ctx context.Context, _ time.Time) (<-chan updater.Event, <-chan error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ec := make(chan updater.Event, 64), make(chan error, 1)
	if f.down {
		ec <- ErrDown
		return ch, ec
	}
	f.sessions++
	f.subs, f.errs = append(f.subs, ch), append(f.errs, ec)
	return ch, ec
}

// Running implements updater.Engine.
func (f *Engine) Running(ctx context.Context) ([]updater.Container, []string, error) {
	f.mu.Lock()
	hold, delay, n := f.hold, f.delay, len(f.ctrs)
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	time.Sleep(delay * time.Duration(n) / 8) // inspected eight at a time
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, nil, ErrDown
	}
	var out []updater.Container
	var failed []string
	for id, c := range f.ctrs {
		switch {
		case f.inspectErr[id] != nil:
			failed = append(failed, id)
		case c.Running:
			out = append(out, c)
		}
	}
	return out, failed, nil
}

// Inspect implements updater.Engine.
func (f *Engine) Inspect(_ context.Context, id string) (updater.Container, error) {
	f.mu.Lock()
	delay := f.delay
	f.mu.Unlock()
	time.Sleep(delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return updater.Container{}, ErrDown
	}
	if err := f.inspectErr[id]; err != nil {
		return updater.Container{}, err
	}
	c, ok := f.ctrs[id]
	if !ok {
		return updater.Container{ID: id}, nil
	}
	return c, nil
}

// HoldRunning makes Running wait until release is called.
func (f *Engine) HoldRunning() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.hold = ch
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.hold = nil
		f.mu.Unlock()
		close(ch)
	}
}

// SetDelay makes each inspect take d.
func (f *Engine) SetDelay(d time.Duration) {
	f.mu.Lock()
	f.delay = d
	f.mu.Unlock()
}

// Emit sends an event to the live subscribers.
func (f *Engine) Emit(action, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return
	}
	for _, s := range f.subs {
		s <- updater.Event{Action: action, ID: id}
	}
}

// Run starts (or restarts) a container and emits its start event.
func (f *Engine) Run(c updater.Container) {
	c.Running = true
	f.Set(c)
	f.Emit("start", c.ID)
}

// Set changes a container behind the updater's back (no event).
func (f *Engine) Set(c updater.Container) {
	f.mu.Lock()
	f.ctrs[c.ID] = c
	f.mu.Unlock()
}

// Remove forgets a container without an event.
func (f *Engine) Remove(id string) {
	f.mu.Lock()
	delete(f.ctrs, id)
	f.mu.Unlock()
}

// Get returns a container.
func (f *Engine) Get(id string) updater.Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctrs[id]
}

// FailInspect makes Inspect of id fail with err (nil: succeed again).
func (f *Engine) FailInspect(id string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.inspectErr, id)
	} else {
		f.inspectErr[id] = err
	}
}

// Stop marks a container stopped and emits die and stop.
func (f *Engine) Stop(id string) {
	f.mu.Lock()
	c := f.ctrs[id]
	c.Running = false
	f.ctrs[id] = c
	f.mu.Unlock()
	f.Emit("die", id)
	f.Emit("stop", id)
}

// SetDown breaks the streams (down) or lets calls succeed again.
func (f *Engine) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	if down {
		for _, e := range f.errs {
			e <- ErrDown
		}
		f.subs, f.errs = nil, nil
	}
}

// Sessions is the number of successful subscriptions; Pings of pings.
func (f *Engine) Sessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions
}

// Pings is the number of Ping calls.
func (f *Engine) Pings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings
}

// Ctr is a container named host.domain on network wnet at ip.
func Ctr(id, host, domain, ip string) updater.Container {
	return updater.Container{
		ID: id, Name: host, Hostname: host, Domainname: domain, NetworkMode: "wnet",
		Networks: map[string]updater.Net{"wnet": {IPv4: netip.MustParseAddr(ip), Prefix4: 24}},
	}
}
