package virtualconsul

import (
	"context"
	"strings"
	"time"

	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
)

// serveRemote answers q (the canonical key key) from the listener, or passes
// it on: only a NOERROR answer with records for the key is a hit, rewritten
// to the asked name and given the plugin's TTL (not the listener's: Envoy's
// default is 300 s). An answer with more than one record of the asked type
// is ambiguous and passed on, as table mode and Consul Dataplane do: a
// client must never get two services' addresses for one name.
func (v *VirtualConsul) serveRemote(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, key string, c *counters) (int, error) {
	e := v.remote
	if e.InBackoff(time.Now()) {
		c.backoff.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	q := r.Question[0]
	m := new(dns.Msg)
	m.SetQuestion(key, q.Qtype)
	m.RecursionDesired = r.RecursionDesired
	resp, err := e.Exchange(ctx, m) // opens the backoff window on a failure
	if err != nil {
		c.remoteError.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
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
