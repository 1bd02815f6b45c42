package source

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"

	"github.com/miekg/dns"
)

// Defaults of the remote-listener mode.
const (
	defaultEnvoyTimeout = 300 * time.Millisecond
	defaultEnvoyBackoff = 5 * time.Second
	defaultEnvoyPort    = "8653" // Consul's virtual_dns listener
)

// NewEnvoy reads
//
//	source envoy ADDRESS {
//	    timeout DURATION
//	    backoff DURATION
//	}
func NewEnvoy(c *caddy.Controller, args []string) (*Envoy, error) {
	if len(args) != 1 {
		return nil, errors.New("want ADDRESS")
	}
	addr := args[0]
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), defaultEnvoyPort)
	}
	// a hostname is resolved here, once per (re)load, never per query
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %v", args[0], err)
	}
	e := &Envoy{address: ua.String(), timeout: defaultEnvoyTimeout, backoff: defaultEnvoyBackoff}
	seen := map[string]bool{}
	err = sourceBlock(c, func(opt string, args []string) error {
		if seen[opt] {
			return c.Errf("source envoy: %s given twice", opt)
		}
		seen[opt] = true
		switch opt {
		case "timeout", "backoff":
			if len(args) != 1 {
				return c.ArgErr()
			}
			d, err := time.ParseDuration(args[0])
			if err != nil || d <= 0 {
				return c.Errf("source envoy: %s: invalid duration %q", opt, args[0])
			}
			if opt == "timeout" {
				e.timeout = d
			} else {
				e.backoff = d
			}
		default:
			return c.Errf("source envoy: unknown property %q", opt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Envoy is the remote-listener mode: no table; each virtual name is
// expanded to its canonical form and asked of Envoy's virtual_dns listener
// over UDP, as Consul Dataplane's DNS proxy does.
//
// Backoff: a timeout or an error stops the use of the listener until a
// fixed window has passed (backoff after the failure). A failure during a
// window may push its end later, never earlier, and the window never grows
// with repeated failures; after it the next query tries the listener again.
// During a window no query waits on the listener.
type Envoy struct {
	address          string
	timeout, backoff time.Duration

	until   atomic.Int64 // Unix nanoseconds: skip the listener before this
	failing atomic.Bool  // between a failure and the next answer, for logs and the gauge

	// OnFailing, if set, is told when the listener starts failing (true)
	// and when it answers again (false): the plugin's source_failing gauge.
	OnFailing func(failing bool)
}

// Address is the listener's address, resolved when the Corefile was read.
func (e *Envoy) Address() string { return e.address }

// InBackoff reports whether now is in the backoff window: no query asks the
// listener then.
func (e *Envoy) InBackoff(now time.Time) bool { return now.UnixNano() < e.until.Load() }

// Exchange asks the listener m over UDP (even when the client came over
// TCP), within the timeout; a failure that is not ctx's opens the backoff
// window, an answer closes a failure.
func (e *Envoy) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	cl := dns.Client{Net: "udp", Timeout: e.timeout}
	resp, _, err := cl.ExchangeContext(ctx, m, e.address)
	if err != nil {
		if ctx.Err() == nil { // the listener failed, not the client going away
			e.fail(time.Now(), err) // the window starts when the failure is known
		}
		return nil, err
	}
	e.ok()
	return resp, nil
}

// fail opens (or extends, never shortens) the backoff window after a
// failure at now.
func (e *Envoy) fail(now time.Time, err error) {
	end := now.Add(e.backoff).UnixNano()
	for {
		cur := e.until.Load()
		if end <= cur || e.until.CompareAndSwap(cur, end) {
			break
		}
	}
	if e.failing.CompareAndSwap(false, true) {
		if e.OnFailing != nil {
			e.OnFailing(true)
		}
		log.Errorf("Source envoy failing, not asking %s for %v: %v", e.address, e.backoff, err)
	}
}

// ok notes an answer from the listener.
func (e *Envoy) ok() {
	if e.failing.Load() && e.failing.CompareAndSwap(true, false) {
		if e.OnFailing != nil {
			e.OnFailing(false)
		}
		log.Infof("Source envoy recovered: %s answers", e.address)
	}
}
