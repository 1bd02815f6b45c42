package mdns

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/internal/dnsname"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
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

var mdnsGroup = netip.MustParseAddr("224.0.0.251")

// mdnsIface is one configured interface and its on-link networks.
type mdnsIface struct {
	ifi       *net.Interface
	load      func() []netip.Prefix // re-reads the networks
	mu        sync.Mutex
	prefixes  []netip.Prefix
	refreshed time.Time
}

// onLink reports whether src is inside one of the interface's IPv4
// networks; it re-reads the interface's addresses at most once a second.
func (i *mdnsIface) onLink(src netip.Addr, now time.Time) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	for pass := 0; pass < 2; pass++ {
		for _, p := range i.prefixes {
			if p.Contains(src) {
				return true
			}
		}
		if pass == 1 || now.Sub(i.refreshed) < time.Second {
			return false
		}
		i.refreshed = now
		i.prefixes = i.load()
	}
	return false
}

// broadcast reports whether src is the directed broadcast address of one
// of the interface's IPv4 networks.
func (i *mdnsIface) broadcast(src netip.Addr) bool {
	if !src.Is4() {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, p := range i.prefixes {
		if !p.Addr().Is4() || p.Bits() >= 31 || !p.Contains(src) {
			continue
		}
		a, host := p.Addr().As4(), uint32(1)<<(32-p.Bits())-1
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
		if netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) == src {
			return true
		}
	}
	return false
}

// ifacePrefixes returns the interface's IPv4 addresses with their prefix
// lengths (not masked: each one's Addr is one of the host's addresses).
// ownAddr reports whether src is one of the interface's own addresses.
func (i *mdnsIface) ownAddr(src netip.Addr) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, p := range i.prefixes {
		if p.Addr() == src {
			return true
		}
	}
	return false
}

func ifacePrefixes(ifi *net.Interface) []netip.Prefix {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, ok := netip.AddrFromSlice(n.IP)
			ones, _ := n.Mask.Size()
			if ok && ip.Unmap().Is4() {
				out = append(out, netip.PrefixFrom(ip.Unmap(), ones)) // unmasked: Addr is ours
			}
		}
	}
	return out
}

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

	pc   *ipv4.PacketConn
	conn net.PacketConn
	done chan struct{}
	// The ephemeral-port socket: one-shot queries sent from it get unicast
	// replies that reach meshdns alone (RFC 6762 §6.7), even where
	// another stack shares port 5353 (and never loops its own multicast
	// replies back to the host).
	uc      *ipv4.PacketConn
	ucConn  net.PacketConn
	ucDone  chan struct{}
	watched chan struct{} // closed when the interface watcher ended

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

// mcastKey is one record on one interface: the once-a-second multicast
// limit is per record (RFC 6762 §6), so an AAAA question right after a
// multicast A answer for the same name is answered.
type mcastKey struct {
	name    string
	addr    netip.Addr
	ifIndex int
}

func newResponder(n *Node, ifis []*net.Interface) *Responder {
	r := &Responder{n: n, ifaces: map[int]*mdnsIface{}, lastMcast: map[mcastKey]time.Time{}}
	r.own.seed = maphash.MakeSeed()
	for _, ifi := range ifis {
		r.names = append(r.names, ifi.Name)
		r.ifaces[ifi.Index] = newIface(ifi)
	}
	return r
}

func newIface(ifi *net.Interface) *mdnsIface {
	load := func() []netip.Prefix { return ifacePrefixes(ifi) }
	return &mdnsIface{ifi: ifi, load: load, prefixes: load(), refreshed: time.Now()}
}

// ifs returns the interfaces joined, by index. The map is never changed
// after it is published: callers may range over it without a lock.
func (r *Responder) ifs() map[int]*mdnsIface {
	r.ifmu.RLock()
	defer r.ifmu.RUnlock()
	return r.ifaces
}

// open binds 0.0.0.0:5353 (shared with other mDNS stacks through
// SO_REUSEADDR), joins 224.0.0.251 on every interface and starts reading.
func (r *Responder) open() error {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", mdnsPort))
	if err != nil {
		return fmt.Errorf("mdns listen: %w", err)
	}
	pc := ipv4.NewPacketConn(conn)
	for _, i := range r.ifs() {
		if err := pc.JoinGroup(i.ifi, &net.UDPAddr{IP: mdnsGroup.AsSlice()}); err != nil {
			conn.Close()
			return fmt.Errorf("mdns join %s on %s: %w", mdnsGroup, i.ifi.Name, err)
		}
	}
	if err := pc.SetControlMessage(ipv4.FlagInterface|ipv4.FlagDst|ipv4.FlagTTL, true); err != nil {
		conn.Close()
		return fmt.Errorf("mdns control messages: %w", err)
	}
	_ = pc.SetMulticastTTL(255)
	_ = pc.SetTTL(255)
	_ = pc.SetMulticastLoopback(true)
	ucConn, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		conn.Close()
		return fmt.Errorf("mdns one-shot socket: %w", err)
	}
	uc := ipv4.NewPacketConn(ucConn)
	if err := uc.SetControlMessage(ipv4.FlagInterface|ipv4.FlagDst|ipv4.FlagTTL, true); err != nil {
		conn.Close()
		ucConn.Close()
		return fmt.Errorf("mdns control messages: %w", err)
	}
	_ = uc.SetMulticastTTL(255)
	_ = uc.SetMulticastLoopback(true)
	r.pc, r.conn, r.done, r.watched = pc, conn, make(chan struct{}), make(chan struct{})
	r.uc, r.ucConn, r.ucDone = uc, ucConn, make(chan struct{})
	r.checkShared()
	go r.readLoop(r.pc, r.done, false)
	go r.readLoop(r.uc, r.ucDone, true)
	go r.watchInterfaces(r.done)
	return nil
}

// close stops the announcements and the read loop and waits for it.
func (r *Responder) close() {
	r.stopAnnouncements()
	if r.conn == nil {
		return
	}
	r.conn.Close()
	r.ucConn.Close()
	<-r.done
	<-r.ucDone
	<-r.watched
	r.conn = nil
}

// readLoop handles the packets of pc (the ephemeral-port socket with
// oneShot) until it is closed, then closes done.
func (r *Responder) readLoop(pc *ipv4.PacketConn, done chan struct{}, oneShot bool) {
	defer close(done)
	buf := make([]byte, 1<<16) // larger than any packet it accepts: an oversized one is seen whole
	for {
		n, cm, src, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		in := Inbound{Dst: mdnsGroup, OneShot: oneShot}
		if cm != nil {
			in.IfIndex, in.TTL = cm.IfIndex, cm.TTL
			if d, ok := netip.AddrFromSlice(cm.Dst); ok {
				in.Dst = d.Unmap()
			}
		}
		from := ua.AddrPort()
		in.Src = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
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

func (r *Responder) write(o Packet) {
	pc := r.pc
	if o.oneShot {
		pc = r.uc
	}
	b, err := o.msg.Pack()
	if err != nil || pc == nil {
		return
	}
	r.own.note(b, time.Now())
	dst := &net.UDPAddr{IP: o.to.Addr().AsSlice(), Port: int(o.to.Port())}
	_, _ = pc.WriteTo(b, &ipv4.ControlMessage{IfIndex: o.ifIndex}, dst)
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
//   - queries: off_link: an IP TTL below 255 from outside the interface's
//     networks (§11); a query to the ephemeral-port socket is dropped as
//     unexpected.
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
	case in.TTL != 255 && !iface.onLink(in.Src.Addr(), now):
		return drop("off_link")
	}
	return r.answer(m, in.Src, !in.Dst.IsMulticast(), iface.ifi.Index, now)
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
// name) for name on every
// interface, from the unconnected port-5353 socket: replies, multicast or
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
	for idx := range r.ifs() {
		r.send(Packet{ifIndex: idx, to: netip.AddrPortFrom(mdnsGroup, mdnsPort), msg: m})
		if qm {
			r.send(Packet{ifIndex: idx, to: netip.AddrPortFrom(mdnsGroup, mdnsPort), msg: m, oneShot: true})
		}
		mdnsQueries.Inc()
		r.n.queries.Add(1)
	}
}

// goodbye multicasts TTL-0 records for recs on every interface. The
// cache-flush bit stays clear, so peers drop only these addresses.
func (r *Responder) goodbye(recs []records.Record) {
	var rrs []dns.RR
	for _, rec := range recs {
		rrs = append(rrs, records.RR(rec, 0))
	}
	for len(rrs) > 0 {
		n := min(len(rrs), announceBatch)
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: rrs[:n]}
		for idx := range r.ifs() {
			r.send(Packet{ifIndex: idx, to: netip.AddrPortFrom(mdnsGroup, mdnsPort), msg: m, fresh: !r.quiet.Load()})
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
