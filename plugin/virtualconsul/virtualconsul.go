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
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"

	"github.com/miekg/dns"
)

// VirtualConsul is the plugin handler.
type VirtualConsul struct {
	Next plugin.Handler

	zones         []soa.Names // longest first, with their SOA names made once
	ns, ap, dc    string      // this workload's identity, expands short names
	dcSet         bool        // the Corefile named dc; else a table's own datacenter wins
	ttl           uint32
	authoritative bool
	src           source.Source // nil when only a snapshot is configured, or in remote-listener mode
	remote        *source.Envoy // the remote-listener mode (source envoy), else nil
	snapshot      string        // snapshot path, "" for none
	emptyGrace    time.Duration // the empty-sync rule's grace (persist.Writer)
	metricZone    string        // the zone label of the table metrics
	servers       []string      // the server labels of its gauges (conf.Servers)
	carryKey      string        // the key of the table carried across a reload

	table atomic.Pointer[table.Table] // nil until a table is loaded
	ctrs  sync.Map                    // server → *counters, resolved on the server's first query
	life  lifecycle                   // the running source, between OnStartup and OnShutdown
	insp  inspected                   // what the inspect plugin lists beside the table
}

// Name implements plugin.Handler.
func (v *VirtualConsul) Name() string { return pluginName }

// ServeDNS implements plugin.Handler.
func (v *VirtualConsul) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	q := r.Question[0]
	l := v.lookup(q)
	if l.outcome == notOurs {
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	}
	c := v.counters(ctx)
	switch l.outcome {
	case remote:
		return v.serveRemote(ctx, w, r, l.key, c)
	case passThrough:
		c.passthrough.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	case notReady:
		c.notReady.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	case missing:
		c.miss.Inc()
		if !v.authoritative {
			return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
		}
		// NODATA, not NXDOMAIN: Consul's DNS answers a virtual name that has
		// no VIP with NOERROR and no records (measured on v1.16.3).
		return v.negative(w, r, l.zone, l.table, dns.RcodeSuccess)
	}
	vp := l.vip
	switch {
	case vp.Family() == table.FamDual && q.Qtype == dns.TypeAAAA:
		rp := newReply[dns.AAAA](r, dns.RcodeSuccess)
		rp.rec = dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: v.ttl}, AAAA: l.table.IPv6Of(l.idx)}
		rp.m.Answer = rp.rr[:]
		c.hit.Inc()
		w.WriteMsg(&rp.m)
		return dns.RcodeSuccess, nil
	case vp.Family() == table.FamAmbiguous:
		c.ambiguous.Inc()
		return plugin.NextOrFailure(pluginName, v.Next, ctx, w, r)
	case (vp.Family() == table.Fam4 || vp.Family() == table.FamDual) && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
		rp := newReply[dns.A](r, dns.RcodeSuccess)
		rp.rec = dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: v.ttl}, A: vp.IPv4()}
		rp.m.Answer = rp.rr[:]
		c.hit.Inc()
		w.WriteMsg(&rp.m)
		return dns.RcodeSuccess, nil
	case vp.Family() == table.Fam6 && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
		rp := newReply[dns.AAAA](r, dns.RcodeSuccess)
		rp.rec = dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: v.ttl}, AAAA: vp.IPv6()}
		rp.m.Answer = rp.rr[:]
		c.hit.Inc()
		w.WriteMsg(&rp.m)
		return dns.RcodeSuccess, nil
	}
	c.nodata.Inc()
	return v.negative(w, r, l.zone, l.table, dns.RcodeSuccess)
}

// Outcomes of lookup.
const (
	notOurs     = iota // not in the plugin's zones: not counted
	passThrough        // in a zone, not a name we answer (or of a datacenter the table does not hold)
	notReady           // no table yet
	missing            // a virtual name not in the table
	found              // in the table: vip says what
	remote             // remote-listener mode: ask the listener for key
)

// looked is what lookup found for a question.
type looked struct {
	outcome int
	zone    *soa.Names
	table   *table.Table
	vip     *table.VIP
	idx     int32  // vip's index in table
	key     string // the canonical key with its final dot, in remote-listener mode
}

// lookup parses and looks q up. It is kept out of line so that its name
// buffers are off the stack before the reply is packed and written: a
// frame that big at the bottom of the writing path made every query's
// goroutine grow its stack.
//
//go:noinline
func (v *VirtualConsul) lookup(q dns.Question) (l looked) {
	var nameBuf [256]byte
	lname, ok := table.LowerName(nameBuf[:0], q.Name)
	if !ok {
		return l
	}
	z, rel, ok := v.match(lname)
	if !ok {
		return l
	}
	l.zone = z
	p, ok := table.ParseVirtual(rel)
	if !ok || q.Qclass != dns.ClassINET {
		l.outcome = passThrough
		return l
	}
	var keyBuf [512]byte
	if v.remote != nil {
		p.Port = nil // a named port is its service's VIP; Envoy's table has no ports
		l.outcome, l.key = remote, string(append(table.AppendKey(keyBuf[:0], p, v.ns, v.ap, v.dc), '.'))
		return l
	}
	if l.table = v.table.Load(); l.table == nil {
		l.outcome = notReady
		return l
	}
	dc := v.dc
	if !v.dcSet && l.table.Datacenter() != "" {
		dc = l.table.Datacenter() // the table's own datacenter (its agent's, or its entries')
	}
	i, ok := l.table.Index(table.AppendKey(keyBuf[:0], p, v.ns, v.ap, dc))
	if !ok && p.Port != nil {
		// A named port answers its service's VIP, as Consul's DNS does
		// (v1.16.3), unless the table holds an entry of its own for it.
		p.Port = nil
		i, ok = l.table.Index(table.AppendKey(keyBuf[:0], p, v.ns, v.ap, dc))
	}
	if !ok {
		l.outcome = missing
		if p.DC != nil && string(p.DC) != dc && !l.table.HasDC(p.DC) {
			// Another datacenter the table knows nothing of: the servers
			// answer it (Consul's DNS ignores the qualifier).
			l.outcome = passThrough
		}
		return l
	}
	l.outcome, l.vip, l.idx = found, l.table.VIP(i), i
	return l
}

// reply is a whole answer in one allocation: the message, its question and
// its one record (rr[0] points at rec).
type reply[T any] struct {
	m   dns.Msg
	q   [1]dns.Question
	rr  [1]dns.RR
	rec T
}

// newReply starts the reply to r as dns.Msg.SetRcode does, without separate
// allocations for the question and the record.
func newReply[T any, PT interface {
	*T
	dns.RR
}](r *dns.Msg, rcode int) *reply[T] {
	rp := new(reply[T])
	rp.rr[0] = PT(&rp.rec)
	m := &rp.m
	m.Id = r.Id
	m.Response = true
	m.Opcode = r.Opcode
	if m.Opcode == dns.OpcodeQuery {
		m.RecursionDesired = r.RecursionDesired
		m.CheckingDisabled = r.CheckingDisabled
	}
	m.Authoritative = true
	m.Rcode = rcode
	rp.q[0] = r.Question[0]
	m.Question = rp.q[:]
	return rp
}

// negative writes NODATA (rcode NOERROR) or NXDOMAIN with the zone's SOA,
// whose minimum (the negative caching TTL) is the answer TTL.
func (v *VirtualConsul) negative(w dns.ResponseWriter, r *dns.Msg, z *soa.Names, t *table.Table, rcode int) (int, error) {
	rp := newReply[dns.SOA](r, rcode)
	z.Fill(&rp.rec, v.ttl, t.Serial())
	rp.m.Ns = rp.rr[:]
	w.WriteMsg(&rp.m)
	return rcode, nil
}

// match returns the longest of the plugin's zones that contains lname (a
// lowercased FQDN) and the labels in front of it, without the joining dot.
func (v *VirtualConsul) match(lname []byte) (z *soa.Names, rel []byte, ok bool) {
	for i := range v.zones { // longest first
		z = &v.zones[i]
		if z.Zone == "." {
			if len(lname) > 1 {
				return z, lname[:len(lname)-1], true
			}
			return z, nil, true
		}
		n := len(lname) - len(z.Zone)
		if n >= 0 && string(lname[n:]) == z.Zone {
			if n == 0 {
				return z, nil, true // the apex: in the zone, never a virtual name
			}
			if lname[n-1] == '.' {
				return z, lname[:n-1], true
			}
		}
	}
	return nil, nil, false
}

// counters returns the request counters for the server in ctx: after the
// server's first query, a load only (no label lookup, no allocation), however
// the servers of a multi-address block (bind A B) alternate.
func (v *VirtualConsul) counters(ctx context.Context) *counters {
	server := metrics.WithServer(ctx)
	if c, ok := v.ctrs.Load(server); ok {
		return c.(*counters)
	}
	c, _ := v.ctrs.LoadOrStore(server, newCounters(server))
	return c.(*counters)
}
