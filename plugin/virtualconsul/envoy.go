package virtualconsul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"

	"github.com/meshdns/meshdns/plugin/pkg/gauges"

	"github.com/miekg/dns"
)

// Defaults of the remote-listener mode.
const (
	defaultEnvoyTimeout = 300 * time.Millisecond
	defaultEnvoyBackoff = 5 * time.Second
	defaultEnvoyPort    = "8653" // Consul's virtual_dns listener
)

// newEnvoySource reads
//
//	source envoy ADDRESS {
//	    timeout DURATION
//	    backoff DURATION
//	}
func newEnvoySource(c *caddy.Controller, args []string) (*envoySource, error) {
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
	e := &envoySource{address: ua.String(), timeout: defaultEnvoyTimeout, backoff: defaultEnvoyBackoff}
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

// envoySource is the remote-listener mode: no table; each virtual name is
// expanded to its canonical form and asked of Envoy's virtual_dns listener
// over UDP, as Consul Dataplane's DNS proxy does.
//
// Backoff: a timeout or an error stops the use of the listener until a
// fixed window has passed (backoff after the failure). A failure during a
// window may push its end later, never earlier, and the window never grows
// with repeated failures; after it the next query tries the listener again.
// During a window no query waits on the listener.
type envoySource struct {
	address          string
	timeout, backoff time.Duration

	until   atomic.Int64 // Unix nanoseconds: skip the listener before this
	failing atomic.Bool  // between a failure and the next answer, for logs and the gauge
	zone    string       // the zone label of the failing gauge
	servers []string     // its server labels
}

// fail opens (or extends, never shortens) the backoff window after a
// failure at now.
func (e *envoySource) fail(now time.Time, err error) {
	end := now.Add(e.backoff).UnixNano()
	for {
		cur := e.until.Load()
		if end <= cur || e.until.CompareAndSwap(cur, end) {
			break
		}
	}
	if e.failing.CompareAndSwap(false, true) {
		gauges.Of(sourceFailing, e.servers, e.zone, "envoy").Set(1)
		log.Errorf("Source envoy failing, not asking %s for %v: %v", e.address, e.backoff, err)
	}
}

// ok notes an answer from the listener.
func (e *envoySource) ok() {
	if e.failing.Load() && e.failing.CompareAndSwap(true, false) {
		gauges.Of(sourceFailing, e.servers, e.zone, "envoy").Set(0)
		log.Infof("Source envoy recovered: %s answers", e.address)
	}
}

// serveRemote answers q (the canonical key key) from the listener, or passes
// it on: only a NOERROR answer with records for the key is a hit, rewritten
// to the asked name and given the plugin's TTL (not the listener's: Envoy's
// default is 300 s). An answer with more than one record of the asked type
// is ambiguous and passed on, as table mode and Consul Dataplane do: a
// client must never get two services' addresses for one name.
func (v *VirtualConsul) serveRemote(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, key string, c *counters) (int, error) {
	e := v.remote
	now := time.Now()
	if now.UnixNano() < e.until.Load() {
		c.backoff.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	q := r.Question[0]
	m := new(dns.Msg)
	m.SetQuestion(key, q.Qtype)
	m.RecursionDesired = r.RecursionDesired
	cl := dns.Client{Net: "udp", Timeout: e.timeout} // UDP even when the client came over TCP
	resp, _, err := cl.ExchangeContext(ctx, m, e.address)
	if err != nil {
		if ctx.Err() == nil { // the listener failed, not the client going away
			e.fail(time.Now(), err) // the window starts when the failure is known
		}
		c.remoteError.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	e.ok()
	var answer []dns.RR
	if resp.Rcode == dns.RcodeSuccess && !resp.Truncated {
		for _, rr := range resp.Answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, key) || h.Class != dns.ClassINET || (h.Rrtype != q.Qtype && q.Qtype != dns.TypeANY) {
				continue
			}
			h.Name, h.Ttl = q.Name, v.ttl
			answer = append(answer, rr)
		}
	}
	if len(answer) == 0 {
		c.miss.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	if ambiguous(answer) {
		c.ambiguous.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	out := new(dns.Msg)
	out.SetReply(r)
	out.Authoritative = true
	out.Answer = answer
	c.hit.Inc()
	w.WriteMsg(out)
	return dns.RcodeSuccess, nil
}

// ambiguous reports whether rrs hold more than one record of a type.
func ambiguous(rrs []dns.RR) bool {
	for i := range rrs {
		for j := i + 1; j < len(rrs); j++ {
			if rrs[i].Header().Rrtype == rrs[j].Header().Rrtype {
				return true
			}
		}
	}
	return false
}
