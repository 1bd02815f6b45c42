package mdns

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"

	"github.com/miekg/dns"
)

// mDNS constants (RFC 6762).
const (
	mdnsPort      = 5353
	cacheFlushBit = 1 << 15 // in the class of a response record
	quBit         = 1 << 15 // in the class of a question: unicast response wanted
	legacyMaxTTL  = 10      // §6.7: TTL cap in replies to legacy (non-5353) queriers
	mcastInterval = time.Second
	maxPacket     = 9000
	// A multicast reply holding shared records waits a random
	// 20–120 ms, so that the replies of the hosts sharing the name do not
	// collide (RFC 6762 §6). Every record meshdns sends is shared.
	sharedDelayMin = 20 * time.Millisecond
	sharedDelayMax = 120 * time.Millisecond
)

// Packet is a packet the responder wants sent.
type Packet struct {
	ifIndex int
	to      netip.AddrPort
	msg     *dns.Msg
	delay   time.Duration // sent this long after it was made
	oneShot bool          // sent from the ephemeral-port socket (a legacy query)
	// fresh: the local records it carries are checked against the
	// database when it is sent (see current); legacy caps their TTLs.
	fresh, legacy bool
}

// Message is the packet's DNS message; Dest where it goes.
func (o Packet) Message() *dns.Msg    { return o.msg }
func (o Packet) Dest() netip.AddrPort { return o.to }
func (o Packet) Delay() time.Duration { return o.delay }

// Responder answers mDNS questions for local names, caches the answers it
// hears and sends the queries of the fallback. handle is pure apart from the
// cache and the in-flight table, so tests and fuzzing drive it directly.
type Responder struct {
	n      *Node
	names  []string // the configured interfaces, by name
	ifmu   sync.RWMutex
	ifaces map[int]*mdnsIface // by index; replaced whole, never changed in place (ifs)

	mu        sync.Mutex
	lastMcast map[mcastKey]time.Time
	ann       map[string]*announcement // names with announcements due (announce.go)
	closed    bool                     // no more announcements

	// shared: another socket is bound to port 5353 here (Avahi), so
	// queries ask for multicast replies (QM): a unicast reply to a shared
	// port reaches one socket only (RFC 6762 §15.1). Set by the
	// interface watcher from /proc/net/udp.
	shared atomic.Bool

	// mc are the port-5353 sockets by family (mc[fam6] nil where the host
	// has no IPv6); os the ephemeral-port ones: one-shot queries sent from
	// them get unicast replies that reach meshdns alone (RFC 6762 §6.7),
	// even where another stack shares port 5353 (and never loops its own
	// multicast replies back to the host).
	mc, os   [2]sock
	stop     chan struct{} // closed by close: the interface watcher ends
	wg       sync.WaitGroup
	opened   atomic.Bool // open: records are announced on links that come up
	detached bool        // no sockets (tests): every group counts as joined

	// The interface watcher's own state (and open's, before it starts).
	addrsOf func(*net.Interface) []netip.Prefix // ifacePrefixes (tests replace it)
	waiting map[string]bool                     // configured interfaces it waits for (logged once)
	seen    map[string]bool                     // configured interfaces joined once: a new join is a rejoin

	own     ownPackets   // what we sent lately: our own multicast, looped back, is not news
	sendMu  sync.Mutex   // held across reading a fresh packet's records and writing it (emit)
	quiet   atomic.Bool  // stopping: the goodbyes of every record are sent, nothing else
	replies replyLimiter // unicast and legacy replies per source

	sent func(Packet) // tests: sees every packet sent
}

// ownPackets remembers the hashes of the last packets sent, so that the
// read loop drops them when multicast loopback (on, for a stack beside
// meshdns) brings them back: our own announcements must not enter the
// cache as another host's records (a deleted name would linger there).
type ownPackets struct {
	mu   sync.Mutex
	seed maphash.Seed
	ring [64]ownPacket
	next int
}

type ownPacket struct {
	h  uint64
	at time.Time
}

// ownPacketAge is how long a sent packet is recognised when it comes back.
const ownPacketAge = 2 * time.Second

// ownPacket reports whether b, from src, is a packet we sent lately: the
// same bytes from one of our own addresses (another host's identical
// query or answer comes from its own address, and is handled).
func (r *Responder) ownPacket(b []byte, src netip.Addr, now time.Time) bool {
	if !r.own.sent(b, now) {
		return false
	}
	for _, i := range r.ifs() {
		if i.ownAddr(src) {
			return true
		}
	}
	return false
}

func (o *ownPackets) note(b []byte, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ring[o.next] = ownPacket{maphash.Bytes(o.seed, b), now}
	o.next = (o.next + 1) % len(o.ring)
}

func (o *ownPackets) sent(b []byte, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := maphash.Bytes(o.seed, b)
	for _, p := range o.ring {
		if p.h == h && now.Sub(p.at) < ownPacketAge {
			return true
		}
	}
	return false
}

// mcastKey is one record on one link: the once-a-second multicast
// limit is per record and link (RFC 6762 §6), so an AAAA question right after a
// multicast A answer for the same name is answered.
type mcastKey struct {
	name string
	addr netip.Addr
	link link
}

// newResponder returns a responder for the interfaces named, with no
// socket and none of them joined yet.
func newResponder(n *Node, names []string) *Responder {
	r := &Responder{n: n, names: names, ifaces: map[int]*mdnsIface{}, lastMcast: map[mcastKey]time.Time{},
		waiting: map[string]bool{}, seen: map[string]bool{}, addrsOf: ifacePrefixes}
	r.own.seed = maphash.MakeSeed()
	return r
}

// ifs returns the interfaces joined, by index. The map is never changed
// after it is published: callers may range over it without a lock.
func (r *Responder) ifs() map[int]*mdnsIface {
	r.ifmu.RLock()
	defer r.ifmu.RUnlock()
	return r.ifaces
}

// open binds the sockets: 0.0.0.0:5353 and [::]:5353 (shared with other
// mDNS stacks through SO_REUSEADDR) and an ephemeral port of each family;
// joins the groups on every configured interface that exists (the others
// when they appear) and starts reading. IPv6 is left out, with a warning,
// where the host has none.
func (r *Responder) open() error {
	var err error
	if r.mc[fam4], err = listen(fam4, mdnsPort); err != nil {
		return fmt.Errorf("mdns listen: %w", err)
	}
	if r.os[fam4], err = listen(fam4, 0); err != nil {
		r.closeSockets()
		return fmt.Errorf("mdns one-shot socket: %w", err)
	}
	if err := r.open6(); err != nil {
		log.Warningf("mDNS over IPv6 is off: %v", err)
	}
	return r.start()
}

// open6 binds the IPv6 sockets.
func (r *Responder) open6() error {
	s, err := listen(fam6, mdnsPort)
	if err != nil {
		return err
	}
	u, err := listen(fam6, 0)
	if err != nil {
		s.close()
		return fmt.Errorf("one-shot socket: %w", err)
	}
	r.mc[fam6], r.os[fam6] = s, u
	return nil
}

// start joins the interfaces there are and starts the read loops and the
// interface watcher.
func (r *Responder) start() error {
	r.checkInterfaces(net.InterfaceByName)
	r.checkShared()
	r.stop = make(chan struct{})
	for fam := range 2 {
		if r.mc[fam] != nil {
			r.wg.Add(2)
			go r.readLoop(r.mc[fam], false)
			go r.readLoop(r.os[fam], true)
		}
	}
	r.wg.Add(1)
	go r.watchInterfaces(r.stop)
	return nil
}

func (r *Responder) closeSockets() {
	for fam := range 2 {
		for _, s := range []sock{r.mc[fam], r.os[fam]} {
			if s != nil {
				s.close()
			}
		}
	}
}

// close stops the announcements, the read loops and the watcher, and
// waits for them.
func (r *Responder) close() {
	r.stopAnnouncements()
	if r.stop == nil {
		return
	}
	close(r.stop)
	r.closeSockets()
	r.wg.Wait()
	r.stop = nil
}

// readLoop handles the packets of s (an ephemeral-port socket with
// oneShot) until it is closed.
func (r *Responder) readLoop(s sock, oneShot bool) {
	defer r.wg.Done()
	buf := make([]byte, 1<<16) // larger than any packet it accepts: an oversized one is seen whole
	for {
		n, in, err := s.readFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !in.Src.IsValid() {
			continue
		}
		in.OneShot = oneShot
		if r.ownPacket(buf[:n], in.Src.Addr(), time.Now()) {
			mdnsDropped.WithLabelValues("own").Inc()
			continue // our own packet, looped back
		}
		for _, out := range r.Handle(buf[:n], in, time.Now()) {
			r.send(out)
		}
	}
}

// send sends o, after its delay.
func (r *Responder) send(o Packet) {
	if o.delay > 0 {
		time.AfterFunc(o.delay, func() { r.emit(o) })
		return
	}
	r.emit(o)
}

// emit writes o now. Invariant (deleted means deleted): packets are
// written one at a time under sendMu, and a fresh packet's records are
// read from the database under it, just before the write. A delete
// changes the database before its goodbye takes sendMu, so a reply read
// before the delete is on the wire before the goodbye, and one read after
// it no longer carries the record: no peer hears an answer after the
// goodbye. A quiet responder (stopping, its goodbyes sent) sends nothing
// more but those.
func (r *Responder) emit(o Packet) {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	if o.fresh {
		if r.quiet.Load() {
			return
		}
		if o.msg = r.current(o.msg, o.legacy); o.msg == nil {
			mdnsDropped.WithLabelValues("stale").Inc()
			return
		}
	}
	if r.sent != nil {
		r.sent(o)
	}
	r.write(o)
}

// write sends o from the socket of its destination's family (the
// ephemeral-port one for a one-shot query).
func (r *Responder) write(o Packet) {
	fam := famOf(o.to.Addr())
	s := r.mc[fam]
	if o.oneShot {
		s = r.os[fam]
	}
	b, err := o.msg.Pack()
	if err != nil || s == nil {
		return
	}
	r.own.note(b, time.Now())
	_ = s.writeTo(b, o.ifIndex, o.to)
}

// Inbound is how a packet arrived.
type Inbound struct {
	Src     netip.AddrPort
	Dst     netip.Addr // the mDNS group, or one of our own unicast addresses
	IfIndex int
	TTL     int  // its IP TTL (IPv6: hop limit), from the control message
	OneShot bool // it came to the ephemeral-port socket (answers to our one-shot queries)
}

// Handle processes one packet and returns the replies to send. It keeps
// only what RFC 6762 lets the LAN say, and counts every packet or record
// it drops in mdns_dropped_total by reason:
//
//   - interface: not on a joined interface; oversized: over 9,000 bytes
//     (§17); malformed: not a DNS message; opcode: not a plain query or
//     response; bad_source: from an address no host sends from (the
//     unspecified, limited or directed broadcast, multicast addresses);
//   - responses: source_port: not from port 5353 (§6); ttl: an IP TTL
//     other than 255 (§11: it crossed a router); unsolicited: a record of
//     a unicast response (to one of our unicast addresses, §6) for a name
//     we have no query pending for — only multicast responses are news
//     anybody may send; out_of_zone, bad_address: see learn;
//   - queries: off_link: an IP TTL (hop limit) below 255 from a source
//     off the link — neither IPv6 link-local nor inside one of the
//     interface's networks (§11); a query to the ephemeral-port socket is
//     dropped as unexpected.
//
// IPv4 and IPv6 packets go through the same rules; a reply goes back over
// the family its query came in on.
func (r *Responder) Handle(b []byte, in Inbound, now time.Time) []Packet {
	iface := r.ifaceOf(in.IfIndex)
	switch {
	case iface == nil:
		return drop("interface")
	case len(b) > maxPacket:
		return drop("oversized")
	case badSource(in.Src.Addr(), iface):
		return drop("bad_source")
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return drop("malformed")
	}
	if m.Opcode != dns.OpcodeQuery || m.Rcode != dns.RcodeSuccess {
		return drop("opcode")
	}
	if m.Response {
		switch {
		case in.Src.Port() != mdnsPort: // RFC 6762 §6: MUST be ignored
			return drop("source_port")
		case in.TTL != 255:
			return drop("ttl")
		}
		r.learn(m, !in.Dst.IsMulticast(), now)
		return nil
	}
	switch {
	case in.OneShot:
		return drop("unexpected")
	}
	onLink := iface.onLink(in.Src.Addr(), now)
	if in.TTL != 255 && !onLink {
		return drop("off_link")
	}
	return r.answer(m, in.Src, !in.Dst.IsMulticast(), !onLink, link{iface.ifi.Index, famOf(in.Src.Addr())}, now)
}

// drop counts a dropped packet by reason and returns no replies.
func drop(reason string) []Packet {
	mdnsDropped.WithLabelValues(reason).Inc()
	return nil
}

// ifaceOf returns the joined interface of index (the only one when the
// index is unknown), or nil.
func (r *Responder) ifaceOf(index int) *mdnsIface {
	ifaces := r.ifs()
	if i := ifaces[index]; i != nil {
		return i
	}
	if len(ifaces) == 1 && index == 0 {
		for _, i := range ifaces {
			return i
		}
	}
	return nil
}

// badSource reports whether src is an address no host sends from: the
// unspecified address, the limited broadcast, the directed broadcast of
// one of the interface's networks, or a multicast address.
func badSource(src netip.Addr, iface *mdnsIface) bool {
	if !src.IsValid() || src.IsUnspecified() || src.IsMulticast() || src == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	return iface.broadcast(src)
}

// learn caches the A/AAAA records of a response (unicast: sent to one of
// our unicast addresses, whose records count only for names we have a
// query pending for) for names inside the zones, local ones too (a name answers the union of its local records and
// every other host's), and tells the queries waiting for them.
func (r *Responder) learn(m *dns.Msg, unicast bool, now time.Time) {
	n := r.n
	var woke []string
	for _, sec := range [][]dns.RR{m.Answer, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Class&^cacheFlushBit != dns.ClassINET {
				continue
			}
			var addr netip.Addr
			switch v := rr.(type) {
			case *dns.A:
				addr, _ = netip.AddrFromSlice(v.A.To4())
			case *dns.AAAA:
				addr, _ = netip.AddrFromSlice(v.AAAA.To16())
			case *dns.PTR:
				if unicast && !n.inflight.pending(dnsname.Lower(h.Name)) {
					mdnsDropped.WithLabelValues("unsolicited").Inc()
					continue
				}
				if r.learnPTR(v, now) && h.Ttl > 0 {
					woke = append(woke, dnsname.Lower(h.Name))
				}
				continue
			default:
				continue
			}
			if addr = addr.Unmap(); !addr.IsValid() || addr.IsLoopback() || addr.IsUnspecified() || addr.IsMulticast() {
				mdnsDropped.WithLabelValues("bad_address").Inc() // no peer has it
				continue
			}
			name := dnsname.Lower(h.Name)
			if unicast && !n.inflight.pending(name) {
				mdnsDropped.WithLabelValues("unsolicited").Inc() // not an answer to a query of ours
				continue
			}
			if !n.inZones(name) {
				mdnsDropped.WithLabelValues("out_of_zone").Inc()
				continue
			}
			if addr.Is6() && addr.IsLinkLocalUnicast() {
				// fe80::/10 means nothing without its zone, which a DNS
				// answer cannot carry: a client could not reach it.
				mdnsDropped.WithLabelValues("link_local").Inc()
				continue
			}
			if e := n.local.Lookup(name); e != nil && e.Holds(addr) {
				continue // a local record (our own, looped back, or the same held elsewhere): the database answers it
			}
			mdnsAnswers.Inc()
			n.answers.Add(1)
			n.cache.Add(name, addr, h.Ttl, h.Class&cacheFlushBit != 0, now)
			n.neg.forget(name)
			if h.Ttl > 0 {
				woke = append(woke, name)
				n.limiter.answered(name)
			}
		}
	}
	n.setGauge()
	for _, name := range woke {
		n.inflight.answered(name, now)
	}
}

// learnPTR caches a PTR record for an address inside the reverse networks
// that points into the zones; it reports whether it did.
func (r *Responder) learnPTR(v *dns.PTR, now time.Time) bool {
	n := r.n
	name, target := dnsname.Lower(v.Hdr.Name), dnsname.Lower(v.Ptr)
	addr, ok := dnsname.ParseReverse(name)
	if !ok || !dnsname.InPrefixes(n.cfg.Reverse, addr) || !n.inZones(target) {
		mdnsDropped.WithLabelValues("out_of_zone").Inc()
		return false
	}
	mdnsAnswers.Inc()
	n.answers.Add(1)
	n.cache.addPTR(name, target, v.Hdr.Ttl, v.Hdr.Class&cacheFlushBit != 0, now)
	n.neg.forget(name)
	return true
}

// query multicasts one question pair (A and AAAA; PTR alone for a reverse
// name) for name on every link (interface and family), from the unconnected port-5353 socket: replies, multicast or
// unicast from the responder's own address, come back through readLoop.
// The questions ask for unicast replies (QU, RFC 6762 §5.4) while meshdns
// is the only socket on port 5353 here: a responder may hold back a
// multicast reply for a record it multicast less than a second ago (Avahi
// does). Where another stack shares the port they ask for multicast
// replies (QM): a unicast reply would reach one of the sockets only
// (RFC 6762 §15.1), maybe not ours; the same questions then also go out
// as a one-shot query from the ephemeral-port socket, whose unicast
// replies reach meshdns alone — the only way to hear the stack beside it,
// which does not loop its multicast replies back to its own host. qm is
// r.shared, read once by the caller.
func (r *Responder) query(name string, qm bool) {
	class := uint16(dns.ClassINET)
	if !qm {
		class |= quBit
	}
	m := &dns.Msg{Question: []dns.Question{
		{Name: name, Qtype: dns.TypeA, Qclass: class},
		{Name: name, Qtype: dns.TypeAAAA, Qclass: class},
	}}
	if dnsname.IsReverse(name) {
		m.Question = []dns.Question{{Name: name, Qtype: dns.TypePTR, Qclass: class}}
	}
	for _, l := range r.links() {
		r.send(Packet{ifIndex: l.ifIndex, to: l.group(), msg: m})
		if qm {
			r.send(Packet{ifIndex: l.ifIndex, to: l.group(), msg: m, oneShot: true})
		}
		mdnsQueries.Inc()
		r.n.queries.Add(1)
	}
}

// goodbye multicasts TTL-0 records for recs on every link. The
// cache-flush bit stays clear, so peers drop only these addresses.
func (r *Responder) goodbye(recs []records.Record) {
	var rrs []dns.RR
	for _, rec := range recs {
		rrs = append(rrs, records.RR(rec, 0))
	}
	for len(rrs) > 0 {
		n := min(len(rrs), announceBatch)
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: rrs[:n]}
		for _, l := range r.links() {
			r.send(Packet{ifIndex: l.ifIndex, to: l.group(), msg: m, fresh: !r.quiet.Load()})
			mdnsResponses.WithLabelValues("goodbye").Inc()
		}
		rrs = rrs[n:]
	}
}

// current returns m with only the records that are true now: a positive
// record the database holds (with the TTL it has now, capped for a legacy
// reply), a goodbye for one it no longer holds (a record put back since
// was announced, and the goodbye must not follow it); nil when none is
// left. Called under sendMu.
func (r *Responder) current(m *dns.Msg, legacy bool) *dns.Msg {
	var kept []dns.RR
	for _, rr := range m.Answer {
		ttl, held := r.held(rr)
		switch {
		case rr.Header().Ttl == 0 && !held:
			kept = append(kept, rr)
		case rr.Header().Ttl > 0 && held:
			if legacy {
				ttl = min(ttl, legacyMaxTTL)
			}
			if ttl != rr.Header().Ttl {
				rr = dns.Copy(rr)
				rr.Header().Ttl = ttl
			}
			kept = append(kept, rr)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	c := m.Copy()
	c.Answer = kept
	return c
}

// held reports whether the database holds the local record rr (an A,
// AAAA or PTR record), and its TTL as served.
func (r *Responder) held(rr dns.RR) (uint32, bool) {
	name := dnsname.Lower(rr.Header().Name)
	var a netip.Addr
	switch v := rr.(type) {
	case *dns.A:
		a, _ = netip.AddrFromSlice(v.A.To4())
	case *dns.AAAA:
		a, _ = netip.AddrFromSlice(v.AAAA.To16())
	case *dns.PTR:
		if addr, ok := dnsname.ParseReverse(name); ok {
			target := dnsname.Lower(v.Ptr)
			for _, n := range r.n.local.LookupPTR(addr) {
				if n == target {
					return r.n.cfg.TTL, true
				}
			}
		}
		return 0, false
	default:
		return 0, false
	}
	e := r.n.local.Lookup(name)
	if e == nil {
		return 0, false
	}
	t, ok := e.TTL(a.Unmap())
	return r.n.ttl(t), ok
}
