package mdns

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"

	"github.com/miekg/dns"
)

// The responder's answers to other hosts' questions: which local records
// answer, known-answer suppression, and the once-a-second multicast limit
// per record.

// questionRRs returns the local records that answer q: A/AAAA/ANY for a
// local name, PTR for the reverse name of a local address.
func (r *Responder) questionRRs(q dns.Question) []dns.RR {
	name := dnsname.Lower(q.Name)
	if q.Qtype == dns.TypePTR {
		addr, ok := dnsname.ParseReverse(name)
		if !ok {
			return nil
		}
		return records.PTRs(r.n.local.LookupPTR(addr), q.Name, r.n.cfg.TTL)
	}
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA && q.Qtype != dns.TypeANY {
		return nil
	}
	if e := r.n.local.Lookup(name); e != nil {
		return e.RRs(q.Name, q.Qtype, r.n.cfg.TTL)
	}
	return nil
}

// answer builds the replies to a query for local names (A, AAAA, ANY) and
// the reverse names of local addresses (PTR). A
// query sent straight to our unicast address (direct) is answered by
// unicast to its source, whatever its QU bit (RFC 6762 §5.5).
func (r *Responder) answer(m *dns.Msg, src netip.AddrPort, direct bool, ifIndex int, now time.Time) []Packet {
	legacy := src.Port() != mdnsPort
	var mcast, ucast []dns.RR
	var legacyQ []dns.Question
	for _, q := range m.Question {
		if q.Qclass&^quBit != dns.ClassINET && q.Qclass&^quBit != dns.ClassANY {
			continue
		}
		rrs := suppressKnown(r.questionRRs(q), m.Answer)
		if len(rrs) == 0 {
			continue
		}
		switch {
		case legacy:
			for _, rr := range rrs {
				if rr.Header().Ttl > legacyMaxTTL {
					rr.Header().Ttl = legacyMaxTTL
				}
			}
			legacyQ = append(legacyQ, q)
			ucast = append(ucast, rrs...)
		case q.Qclass&quBit != 0 || direct:
			ucast = append(ucast, rrs...)
		default:
			mcast = append(mcast, r.notRecent(rrs, ifIndex, now)...)
		}
	}
	var out []Packet
	if len(ucast) > 0 {
		resp := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: ucast}
		if legacy {
			resp.Id = m.Id
			resp.Question = legacyQ
		}
		out = append(out, Packet{ifIndex: ifIndex, to: src, msg: resp})
	}
	if len(mcast) > 0 {
		r.noteMulticast(mcast, ifIndex, now)
		resp := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: mcast}
		delay := sharedDelayMin + rand.N(sharedDelayMax-sharedDelayMin)
		out = append(out, Packet{ifIndex: ifIndex, to: netip.AddrPortFrom(mdnsGroup, mdnsPort), msg: resp, delay: delay})
	}
	for _, o := range out {
		mdnsResponses.WithLabelValues(kindOf(o, legacy)).Inc()
	}
	return out
}

func kindOf(o Packet, legacy bool) string {
	switch {
	case o.to.Addr() == mdnsGroup:
		return "multicast"
	case legacy:
		return "legacy"
	}
	return "unicast"
}

// suppressKnown drops the records the querier listed as known answers with
// at least half our TTL left (RFC 6762 §7.1).
func suppressKnown(rrs, known []dns.RR) []dns.RR {
	if len(known) == 0 {
		return rrs
	}
	kept := rrs[:0]
	for _, rr := range rrs {
		drop := false
		for _, k := range known {
			if k.Header().Rrtype == rr.Header().Rrtype && dnsname.SameData(k, rr) &&
				dnsname.Lower(k.Header().Name) == dnsname.Lower(rr.Header().Name) && k.Header().Ttl >= rr.Header().Ttl/2 {
				drop = true
				break
			}
		}
		if !drop {
			kept = append(kept, rr)
		}
	}
	return kept
}

// rrKey is the multicast-limit key of a local A/AAAA record.
func rrKey(rr dns.RR, ifIndex int) mcastKey {
	var a netip.Addr
	switch v := rr.(type) {
	case *dns.A:
		a, _ = netip.AddrFromSlice(v.A.To4())
	case *dns.AAAA:
		a, _ = netip.AddrFromSlice(v.AAAA.To16())
	case *dns.PTR:
		return mcastKey{dnsname.Lower(rr.Header().Name) + " " + dnsname.Lower(v.Ptr), a, ifIndex}
	}
	return mcastKey{dnsname.Lower(rr.Header().Name), a, ifIndex}
}

// notRecent keeps the records not multicast on ifIndex in the last second
// (RFC 6762 §6: per record and interface), which also bounds what a query
// flood can make us send.
func (r *Responder) notRecent(rrs []dns.RR, ifIndex int, now time.Time) []dns.RR {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := rrs[:0]
	for _, rr := range rrs {
		if last, ok := r.lastMcast[rrKey(rr, ifIndex)]; !ok || now.Sub(last) >= mcastInterval {
			kept = append(kept, rr)
		}
	}
	return kept
}

// noteMulticast remembers that rrs were multicast on ifIndex at now.
func (r *Responder) noteMulticast(rrs []dns.RR, ifIndex int, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteMulticastLocked(rrs, ifIndex, now)
}

func (r *Responder) noteMulticastLocked(rrs []dns.RR, ifIndex int, now time.Time) {
	if len(r.lastMcast) > 4096 {
		for k, t := range r.lastMcast {
			if now.Sub(t) >= mcastInterval {
				delete(r.lastMcast, k)
			}
		}
	}
	for _, rr := range rrs {
		r.lastMcast[rrKey(rr, ifIndex)] = now
	}
}
