package mdns

import (
	"slices"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"

	"github.com/miekg/dns"
)

// announceCount is how many times a new or changed name is announced, one
// mcastInterval apart (RFC 6762 §8.3: at least twice, one second apart).
const announceCount = 2

// announcement is a name with announcements still due. Invariant: a name
// has at most one timer pending, and every announcement it fires sends the
// name's records as they are then, so writes made meanwhile (the IPv4 and
// IPv6 address of a dual-stack container, written back to back) coalesce
// into it instead of being dropped by the once-a-second limit.
type announcement struct {
	left  int // announcements still to send
	timer *time.Timer
}

// scheduleAnnounce makes name due for announceCount announcements: the
// first as soon as the once-a-second limit per name and interface allows
// (at once when the name was not multicast in the last second), the others
// one second apart. A name already due starts its count over with the
// next announcement, at the time already scheduled.
func (r *Responder) scheduleAnnounce(name string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.ann == nil {
		r.ann = map[string]*announcement{}
	}
	a := r.ann[name]
	if a == nil {
		a = &announcement{}
		r.ann[name] = a
	}
	a.left = announceCount
	if a.timer == nil {
		a.timer = time.AfterFunc(r.nextMulticastLocked(r.localRRs(name), now).Sub(now), func() { r.fireAnnounce(name) })
	}
}

// nextMulticastLocked is the earliest time every record of name (rrs)
// may be multicast on every link; r.mu is held.
func (r *Responder) nextMulticastLocked(rrs []dns.RR, now time.Time) time.Time {
	next := now
	for _, l := range r.links() {
		for _, rr := range rrs {
			if last, ok := r.lastMcast[rrKey(rr, l)]; ok && last.Add(mcastInterval).After(next) {
				next = last.Add(mcastInterval)
			}
		}
	}
	return next
}

// localRRs returns the records of the local name, as announced.
func (r *Responder) localRRs(name string) []dns.RR {
	if e := r.n.local.Lookup(name); e != nil {
		return e.RRs(name, dns.TypeANY, r.n.cfg.TTL)
	}
	return nil
}

// fireAnnounce sends one announcement of name, or waits again when a reply
// multicast one of its records meanwhile.
func (r *Responder) fireAnnounce(name string) {
	now := time.Now()
	r.mu.Lock()
	// Read under r.mu: a write's scheduleAnnounce (after the index has the
	// write) either sees this announcement's count or comes after it.
	rrs := r.localRRs(name)
	a := r.ann[name]
	if r.closed || a == nil {
		r.mu.Unlock()
		return
	}
	if next := r.nextMulticastLocked(rrs, now); next.After(now) {
		a.timer = time.AfterFunc(next.Sub(now), func() { r.fireAnnounce(name) })
		r.mu.Unlock()
		return
	}
	if a.left--; a.left > 0 {
		a.timer = time.AfterFunc(mcastInterval, func() { r.fireAnnounce(name) })
	} else {
		delete(r.ann, name)
	}
	for _, l := range r.links() {
		r.noteMulticastLocked(rrs, l, now)
	}
	r.mu.Unlock()
	r.sendAnnouncement(rrs)
}

// sendAnnouncement multicasts the name's current records (no cache-flush
// bit: every name is shared) on every link; a name deleted meanwhile
// sends nothing (its goodbye went out with the delete).
func (r *Responder) sendAnnouncement(rrs []dns.RR) {
	if len(rrs) == 0 {
		return
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: rrs}
	for _, l := range r.links() {
		r.send(Packet{ifIndex: l.ifIndex, to: l.group(), msg: m, fresh: true})
		mdnsResponses.WithLabelValues("announcement").Inc()
	}
}

// stopAnnouncements cancels every announcement due (shutdown, reload).
func (r *Responder) stopAnnouncements() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for name, a := range r.ann {
		a.timer.Stop()
		delete(r.ann, name)
	}
}

// announceBatch bounds the records of one bulk announcement packet, so a
// packet stays within an Ethernet MTU.
const announceBatch = 20

// announceAll announces every local record (RFC 6762 §8.3) on the links
// only, or on every link when only is nil: at once and
// again one second later (the records of the first round that are still
// there: a record put meanwhile has announcements of its own, a deleted
// one had its goodbye). It runs after start-up (the records of a loaded
// snapshot or carried across a reload included) and when a link comes up
// (an interface that appeared or joined again, an address family that
// came up on one), so peers that lost the records, or never heard them,
// learn them without asking.
func (r *Responder) announceAll(only []link) {
	first := r.n.local.Records("")
	if len(first) == 0 {
		return
	}
	r.sendRecords(first, only)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	time.AfterFunc(mcastInterval, func() {
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		was := make(map[records.Record]bool, len(first))
		for _, rec := range first {
			was[rec] = true
		}
		var again []records.Record
		for _, rec := range r.n.local.Records("") {
			if was[rec] {
				again = append(again, rec)
			}
		}
		r.sendRecords(again, only)
	})
}

// sendRecords multicasts recs, announceBatch a packet, on the links only
// that are up (every link when only is nil).
func (r *Responder) sendRecords(recs []records.Record, only []link) {
	var rrs []dns.RR
	seen := map[mcastKey]bool{}
	for _, rec := range recs {
		k := mcastKey{rec.Domain, rec.IP, link{}}
		if seen[k] {
			continue // one address of a name held by two identifiers
		}
		seen[k] = true
		rrs = append(rrs, records.RR(rec, r.n.ttl(rec.TTL)))
	}
	for len(rrs) > 0 {
		n := min(len(rrs), announceBatch)
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: rrs[:n]}
		for _, l := range r.links() {
			if only == nil || slices.Contains(only, l) {
				r.send(Packet{ifIndex: l.ifIndex, to: l.group(), msg: m, fresh: true})
				mdnsResponses.WithLabelValues("announcement").Inc()
			}
		}
		rrs = rrs[n:]
	}
}
