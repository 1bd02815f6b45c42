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
// the reverse names of local addresses (PTR): one answer per distinct
// question (a question repeated, or an ANY beside an A, adds nothing),
// less the known answers (RFC 6762 §7.1), in packets of at most
// maxPayload bytes (§17). A query sent straight to our unicast address
// (direct) is answered by unicast to its source, whatever its QU bit
// (§5.5); unicast and legacy replies are bounded per source (replyRate).
// A QU or direct query from a peer of another subnet on the link
// (offSubnet: its IP TTL 255 says it is on the link, but its source is in
// none of the interface's networks) is answered by multicast: a unicast
// reply would follow the host's routes, through a router (which lowers
// the TTL, and the querier drops it) or nowhere; the group reaches every
// host of the link. Such a reply is not dropped by the once-a-second
// multicast limit (the querier asked, and may not have heard the last
// multicast): the records multicast less than a second ago go as soon as
// the limit allows.
func (r *Responder) answer(m *dns.Msg, src netip.AddrPort, direct, offSubnet bool, l link, now time.Time) []Packet {
	legacy := src.Port() != mdnsPort
	var mcast, ucast, deferred []dns.RR
	var legacyQ []dns.Question
	seenQ := map[dns.Question]bool{}
	seenRR := map[mcastKey]bool{}
	for _, q := range m.Question {
		cls := q.Qclass &^ quBit
		if cls != dns.ClassINET && cls != dns.ClassANY {
			continue
		}
		k := dns.Question{Name: dnsname.Lower(q.Name), Qtype: q.Qtype, Qclass: cls}
		if seenQ[k] {
			continue // asked already in this query: answered once
		}
		seenQ[k] = true
		var rrs []dns.RR
		for _, rr := range suppressKnown(r.questionRRs(q), m.Answer) {
			if key := rrKey(rr, link{}); !seenRR[key] {
				seenRR[key] = true
				rrs = append(rrs, rr)
			}
		}
		if len(rrs) == 0 {
			continue
		}
		switch {
		case legacy:
			capTTL(rrs)
			legacyQ = append(legacyQ, q)
			ucast = append(ucast, rrs...)
		case (q.Qclass&quBit != 0 || direct) && !offSubnet:
			ucast = append(ucast, rrs...)
		case q.Qclass&quBit != 0 || direct: // from another subnet
			fresh, recent := r.splitRecent(rrs, l, now)
			mcast, deferred = append(mcast, fresh...), append(deferred, recent...)
		default:
			fresh, _ := r.splitRecent(rrs, l, now)
			mcast = append(mcast, fresh...)
		}
	}
	var out []Packet
	if len(ucast) > 0 && r.replies.allow(src.Addr(), now) {
		if legacy {
			out = append(out, Packet{ifIndex: l.ifIndex, to: src, msg: legacyReply(m, legacyQ, ucast), fresh: true, legacy: true})
		} else {
			for _, msg := range split(ucast) {
				out = append(out, Packet{ifIndex: l.ifIndex, to: src, msg: msg, fresh: true})
			}
		}
	} else if len(ucast) > 0 {
		mdnsDropped.WithLabelValues("reply_rate").Inc()
	}
	if len(mcast) > 0 {
		r.noteMulticast(mcast, l, now)
		delay := sharedDelayMin + rand.N(sharedDelayMax-sharedDelayMin)
		for _, msg := range split(mcast) {
			out = append(out, Packet{ifIndex: l.ifIndex, to: l.group(), msg: msg, delay: delay, fresh: true})
		}
	}
	out = append(out, r.deferredReply(deferred, l, now)...)
	for _, o := range out {
		mdnsResponses.WithLabelValues(kindOf(o, legacy)).Inc()
	}
	return out
}

// capTTL caps the TTLs of a legacy reply (RFC 6762 §6.7).
func capTTL(rrs []dns.RR) {
	for _, rr := range rrs {
		if rr.Header().Ttl > legacyMaxTTL {
			rr.Header().Ttl = legacyMaxTTL
		}
	}
}

// maxPayload bounds the DNS message of a packet we send, so that with its
// IPv6 and UDP headers (48 bytes) the packet stays within RFC 6762 §17's
// 9,000 bytes.
const maxPayload = maxPacket - 48

// split packs rrs into responses of at most maxPayload bytes each.
func split(rrs []dns.RR) []*dns.Msg {
	var out []*dns.Msg
	m := newResponse()
	for _, rr := range rrs {
		m.Answer = append(m.Answer, rr)
		if m.Len() > maxPayload && len(m.Answer) > 1 {
			m.Answer = m.Answer[:len(m.Answer)-1]
			out = append(out, m)
			m = newResponse()
			m.Answer = append(m.Answer, rr)
		}
	}
	return append(out, m)
}

func newResponse() *dns.Msg {
	return &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}}
}

// legacyReply is the conventional unicast reply to a legacy query (RFC
// 6762 §6.7): its ID and questions echoed, within the size the querier
// takes (512 bytes, or its EDNS0 buffer up to maxPayload), truncated
// with TC set when the answers do not fit.
func legacyReply(q *dns.Msg, questions []dns.Question, answers []dns.RR) *dns.Msg {
	m := newResponse()
	m.Id, m.Question, m.Answer = q.Id, questions, answers
	size := dns.MinMsgSize
	if opt := q.IsEdns0(); opt != nil {
		size = min(max(int(opt.UDPSize()), dns.MinMsgSize), maxPayload)
	}
	for m.Len() > size && len(m.Answer) > 0 {
		m.Answer = m.Answer[:len(m.Answer)-1]
		m.Truncated = true
	}
	return m
}

func kindOf(o Packet, legacy bool) string {
	switch {
	case o.to.Addr().IsMulticast():
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

// rrKey is the multicast-limit key of a local A/AAAA/PTR record on l.
func rrKey(rr dns.RR, l link) mcastKey {
	var a netip.Addr
	switch v := rr.(type) {
	case *dns.A:
		a, _ = netip.AddrFromSlice(v.A.To4())
	case *dns.AAAA:
		a, _ = netip.AddrFromSlice(v.AAAA.To16())
	case *dns.PTR:
		return mcastKey{dnsname.Lower(rr.Header().Name) + " " + dnsname.Lower(v.Ptr), a, l}
	}
	return mcastKey{dnsname.Lower(rr.Header().Name), a, l}
}

// splitRecent splits rrs into the records not multicast on l in the last
// second (fresh: they may go now) and those multicast in it (recent); a
// record whose multicast is already scheduled (a deferred reply) is in
// neither. The once-a-second limit (RFC 6762 §6: per record and link)
// also bounds what a query flood can make us send.
func (r *Responder) splitRecent(rrs []dns.RR, l link, now time.Time) (fresh, recent []dns.RR) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rr := range rrs {
		last, ok := r.lastMcast[rrKey(rr, l)]
		switch {
		case !ok || now.Sub(last) >= mcastInterval:
			fresh = append(fresh, rr)
		case !last.After(now):
			recent = append(recent, rr)
		}
	}
	return fresh, recent
}

// deferredReply multicasts rrs, records multicast on l less than a second
// ago, as soon as the once-a-second limit allows every one of them; they
// count as multicast then, so nothing else sends them before.
func (r *Responder) deferredReply(rrs []dns.RR, l link, now time.Time) []Packet {
	if len(rrs) == 0 {
		return nil
	}
	r.mu.Lock()
	at := now
	for _, rr := range rrs {
		if last, ok := r.lastMcast[rrKey(rr, l)]; ok && last.Add(mcastInterval).After(at) {
			at = last.Add(mcastInterval)
		}
	}
	r.noteMulticastLocked(rrs, l, at)
	r.mu.Unlock()
	var out []Packet
	for _, msg := range split(rrs) {
		out = append(out, Packet{ifIndex: l.ifIndex, to: l.group(), msg: msg, delay: at.Sub(now) + sharedDelayMin, fresh: true})
	}
	return out
}

// noteMulticast remembers that rrs were multicast on l at now.
func (r *Responder) noteMulticast(rrs []dns.RR, l link, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteMulticastLocked(rrs, l, now)
}

func (r *Responder) noteMulticastLocked(rrs []dns.RR, l link, now time.Time) {
	if len(r.lastMcast) > 4096 {
		for k, t := range r.lastMcast {
			if now.Sub(t) >= mcastInterval {
				delete(r.lastMcast, k)
			}
		}
	}
	for _, rr := range rrs {
		r.lastMcast[rrKey(rr, l)] = now
	}
}
