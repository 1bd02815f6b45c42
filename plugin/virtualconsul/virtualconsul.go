// Package virtualconsul answers Consul virtual domains
// ([<port>.]<service>.virtual[.<ns>.ns][.<ap>.ap][.<dc>.dc].consul) from a
// local table of virtual IPs, so that workloads in a Consul service mesh keep
// resolving their upstreams when the Consul servers are slow or down.
//
// The query path reads one immutable Table through an atomic pointer: no
// lock, no log line and no allocation beyond the reply. Sync sources build
// new tables off the query path and swap them in.
package virtualconsul

import (
	"context"
	"sync/atomic"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"

	"github.com/miekg/dns"
)

// VirtualConsul is the plugin handler.
type VirtualConsul struct {
	Next plugin.Handler

	zones         []string // lowercased FQDNs, longest first
	ns, ap, dc    string   // this workload's identity, expands short names
	ttl           uint32
	authoritative bool
	src           source // nil when only a snapshot is configured
	snapshot      string // snapshot path, "" for none
	metricZone    string // the zone label of the table metrics

	table atomic.Pointer[Table]    // nil until a table is loaded
	ctrs  atomic.Pointer[counters] // the last server's request counters
	life  lifecycle                // the running source, between OnStartup and OnShutdown
}

// Name implements plugin.Handler.
func (v *VirtualConsul) Name() string { return pluginName }

// ServeDNS implements plugin.Handler.
func (v *VirtualConsul) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	q := r.Question[0]
	var nameBuf [256]byte
	lname, ok := lowerName(nameBuf[:0], q.Name)
	if !ok {
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	zone, rel, ok := v.match(lname)
	if !ok {
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	c := v.counters(ctx)
	p, ok := parseVirtual(rel)
	if !ok || q.Qclass != dns.ClassINET {
		c.passthrough.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	t := v.table.Load()
	if t == nil {
		c.notReady.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	var keyBuf [512]byte
	i, found := t.index[string(appendKey(keyBuf[:0], p, v.ns, v.ap, v.dc))]
	if !found {
		if p.port != nil || !v.authoritative {
			// A named port without its own entry is never ours to deny.
			if p.port != nil {
				c.passthrough.Inc()
			} else {
				c.miss.Inc()
			}
			return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
		}
		c.miss.Inc()
		return v.negative(w, r, zone, t, dns.RcodeNameError)
	}
	vp := &t.vips[i]
	var rr dns.RR
	switch {
	case vp.fam == famAmbiguous:
		c.ambiguous.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	case vp.fam == fam4 && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
		rr = &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: v.ttl}, A: vp.ip[:4:4]}
	case vp.fam == fam6 && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
		rr = &dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: v.ttl}, AAAA: vp.ip[:]}
	default:
		c.nodata.Inc()
		return v.negative(w, r, zone, t, dns.RcodeSuccess)
	}
	c.hit.Inc()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = []dns.RR{rr}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// negative writes NODATA (rcode NOERROR) or NXDOMAIN with the zone's SOA.
func (v *VirtualConsul) negative(w dns.ResponseWriter, r *dns.Msg, zone string, t *Table, rcode int) (int, error) {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	m.Authoritative = true
	m.Ns = []dns.RR{v.soa(zone, t.serial)}
	w.WriteMsg(m)
	return rcode, nil
}

// soa is the zone's SOA for negative answers; its minimum (the negative
// caching TTL) is the answer TTL.
func (v *VirtualConsul) soa(zone string, serial uint32) dns.RR {
	host := "ns.dns." + zone
	if zone == "." {
		host = "ns.dns."
	}
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: v.ttl},
		Ns:      host,
		Mbox:    "hostmaster." + host,
		Serial:  serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  v.ttl,
	}
}

// match returns the longest of the plugin's zones that contains lname (a
// lowercased FQDN) and the labels in front of it, without the joining dot.
func (v *VirtualConsul) match(lname []byte) (zone string, rel []byte, ok bool) {
	for _, z := range v.zones { // longest first
		if z == "." {
			if len(lname) > 1 {
				return z, lname[:len(lname)-1], true
			}
			return z, nil, true
		}
		n := len(lname) - len(z)
		if n >= 0 && string(lname[n:]) == z {
			if n == 0 {
				return z, nil, true // the apex: in the zone, never a virtual name
			}
			if lname[n-1] == '.' {
				return z, lname[:n-1], true
			}
		}
	}
	return "", nil, false
}

// counters returns the request counters for the server in ctx, resolving
// them only when the server changes.
func (v *VirtualConsul) counters(ctx context.Context) *counters {
	server := metrics.WithServer(ctx)
	if c := v.ctrs.Load(); c != nil && c.server == server {
		return c
	}
	c := newCounters(server)
	v.ctrs.Store(c)
	return c
}
