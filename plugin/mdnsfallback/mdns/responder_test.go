package mdns

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const testIfIndex = 7

// testResponder is a responder on a fake interface 10.250.0.0/24 with no
// socket; it records what it would send.
func testResponder(p *Node) *Responder {
	r := newResponder(p, []string{"test0"})
	r.detached = true
	r.ifaces[testIfIndex] = detachedIface(testIfIndex, "test0", []netip.Prefix{netip.MustParsePrefix("10.250.0.0/24")})
	return r
}

type sink struct {
	mu   sync.Mutex
	pkts []Packet
}

func (s *sink) add(o Packet) { s.mu.Lock(); s.pkts = append(s.pkts, o); s.mu.Unlock() }
func (s *sink) take() []Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.pkts
	s.pkts = nil
	return out
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func question(name string, qtype, qclass uint16) *dns.Msg {
	return &dns.Msg{Question: []dns.Question{{Name: name, Qtype: qtype, Qclass: qclass}}}
}

var peer = netip.MustParseAddrPort("10.250.0.2:5353")

func TestResponderAnswers(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	put(t, db, "c1", "fd00::1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Unix(1000, 0)

	// QM: one multicast answer without the cache-flush bit (every name is
	// shared), delayed 20–120 ms (RFC 6762 §6), then rate-limited per record.
	out := r.handle(pack(t, question("WEB.weave.local.", dns.TypeA, dns.ClassINET)), peer, testIfIndex, now)
	if len(out) != 1 || out[0].to != netip.MustParseAddrPort("224.0.0.251:5353") || out[0].ifIndex != testIfIndex {
		t.Fatalf("QM: %+v", out)
	}
	m := out[0].msg
	if out[0].delay < sharedDelayMin || out[0].delay >= sharedDelayMax {
		t.Fatalf("QM answer delayed %v", out[0].delay)
	}
	if !m.Response || !m.Authoritative || m.Id != 0 || len(m.Question) != 0 || len(m.Answer) != 1 ||
		m.Answer[0].Header().Class != dns.ClassINET || m.Answer[0].Header().Ttl != 30 ||
		m.Answer[0].Header().Name != "WEB.weave.local." {
		t.Fatalf("QM answer: %v", m)
	}
	if out := r.handle(pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET)), peer, testIfIndex, now.Add(500*time.Millisecond)); len(out) != 0 {
		t.Fatalf("multicast twice within a second: %v", out)
	}
	// The limit is per record: the AAAA is answered right after the A.
	out = r.handle(pack(t, question("web.weave.local.", dns.TypeAAAA, dns.ClassINET)), peer, testIfIndex, now.Add(500*time.Millisecond))
	if len(out) != 1 || len(out[0].msg.Answer) != 1 || out[0].msg.Answer[0].Header().Rrtype != dns.TypeAAAA {
		t.Fatalf("AAAA within a second of the A: %v", out)
	}
	if out := r.handle(pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET)), peer, testIfIndex, now.Add(1100*time.Millisecond)); len(out) != 1 {
		t.Fatalf("no multicast after a second: %v", out)
	}

	// QU: unicast to the querier, not rate-limited.
	out = r.handle(pack(t, question("web.weave.local.", dns.TypeANY, dns.ClassINET|quBit)), peer, testIfIndex, now.Add(1200*time.Millisecond))
	if len(out) != 1 || out[0].to != peer || len(out[0].msg.Answer) != 2 || out[0].msg.Answer[1].Header().Class != dns.ClassINET || out[0].delay != 0 {
		t.Fatalf("QU: %+v", out)
	}

	// Legacy unicast (source port ≠ 5353): ID and question echoed, TTL ≤ 10, no cache-flush.
	legacy := netip.MustParseAddrPort("10.250.0.2:40000")
	q := question("web.weave.local.", dns.TypeAAAA, dns.ClassINET)
	q.Id = 4242
	out = r.handle(pack(t, q), legacy, testIfIndex, now)
	if len(out) != 1 || out[0].to != legacy {
		t.Fatalf("legacy: %+v", out)
	}
	m = out[0].msg
	if m.Id != 4242 || len(m.Question) != 1 || len(m.Answer) != 1 || m.Answer[0].Header().Ttl != 10 ||
		m.Answer[0].Header().Class != dns.ClassINET || m.Answer[0].(*dns.AAAA).AAAA.String() != "fd00::1" {
		t.Fatalf("legacy answer: %v", m)
	}

	// Known answers with enough TTL left are not repeated.
	q = question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit)
	q.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "web.weave.local.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 20}, A: net.ParseIP("10.32.0.1")}}
	if out := r.handle(pack(t, q), peer, testIfIndex, now); len(out) != 0 {
		t.Fatalf("known answer repeated: %v", out)
	}

	// Names we do not hold, other types, off-link sources (another subnet
	// and an IP TTL below 255: it crossed a router), other interfaces,
	// garbage: silence.
	for i, tc := range []struct {
		b   []byte
		src netip.AddrPort
		idx int
	}{
		{pack(t, question("other.weave.local.", dns.TypeA, dns.ClassINET|quBit)), peer, testIfIndex},
		{pack(t, question("web.weave.local.", dns.TypeTXT, dns.ClassINET|quBit)), peer, testIfIndex},
		{pack(t, question("web.weave.local.", dns.TypeA, dns.ClassCHAOS)), peer, testIfIndex},
		{pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit)), netip.MustParseAddrPort("192.0.2.1:5353"), testIfIndex},
		{pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit)), peer, 99},
		{[]byte{1, 2, 3}, peer, testIfIndex},
	} {
		if out := r.Handle(tc.b, Inbound{Src: tc.src, Dst: mdnsGroup, IfIndex: tc.idx, TTL: 64}, now); len(out) != 0 {
			t.Errorf("%d: answered %v", i, out)
		}
	}
}

func answerMsg(rrs ...dns.RR) *dns.Msg {
	return &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: rrs}
}

func aRR(name, addr string, ttl uint32, flush bool) dns.RR {
	class := uint16(dns.ClassINET)
	if flush {
		class |= cacheFlushBit
	}
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: class, Ttl: ttl}, A: net.ParseIP(addr)}
}

func TestResponderLearns(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Now()
	msg := answerMsg(
		aRR("Peer.weave.local.", "10.250.0.2", 120, true),
		aRR("web.weave.local.", "10.250.0.66", 120, true), // local name: cached too, answered with the local records
		aRR("web.weave.local.", "10.32.0.1", 120, false),  // a local record itself (our own, looped back): not cached
		aRR("printer.local.", "10.250.0.9", 120, true),    // outside the zone
	)
	msg.Extra = []dns.RR{&dns.AAAA{Hdr: dns.RR_Header{Name: "peer.weave.local.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 120}, AAAA: net.ParseIP("fd00::2")}}
	r.handle(pack(t, msg), peer, testIfIndex, now)
	if !p.cache.Has("peer.weave.local.", now) || !p.cache.Has("web.weave.local.", now) || p.cache.Has("printer.local.", now) || p.cache.Len() != 3 {
		t.Fatalf("cache: %d entries", p.cache.Len())
	}
	rrs, _, _ := p.cache.lookup("peer.weave.local.", "peer.weave.local.", dns.TypeANY, now, nil)
	if len(rrs) != 2 {
		t.Fatalf("peer: %v", rrs)
	}
	if rrs, _, _ := p.cache.lookup("web.weave.local.", "web.weave.local.", dns.TypeA, now, nil); len(rrs) != 1 || rrs[0].(*dns.A).A.String() != "10.250.0.66" {
		t.Fatalf("local name's cache: %v, want the other host's address only", rrs)
	}
	// Answers that crossed a router (IP TTL below 255) are ignored.
	r.Handle(pack(t, answerMsg(aRR("evil.weave.local.", "10.250.0.3", 120, true))), Inbound{Src: netip.MustParseAddrPort("203.0.113.1:5353"), Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 254}, now)
	if p.cache.Has("evil.weave.local.", now) {
		t.Fatal("off-link answer cached")
	}
	// A response from a source port other than 5353 is ignored (RFC 6762 §6).
	r.handle(pack(t, answerMsg(aRR("port.weave.local.", "10.250.0.2", 120, false))), netip.MustParseAddrPort("10.250.0.2:40000"), testIfIndex, now)
	if p.cache.Has("port.weave.local.", now) {
		t.Fatal("response from port 40000 cached")
	}
	// A goodbye removes the address one second later; the other stays.
	r.handle(pack(t, answerMsg(aRR("peer.weave.local.", "10.250.0.2", 0, false))), peer, testIfIndex, now)
	if rrs, _, _ = p.cache.lookup("peer.weave.local.", "peer.weave.local.", dns.TypeANY, now.Add(900*time.Millisecond), nil); len(rrs) != 2 {
		t.Fatalf("goodbye removed the address within the second: %v", rrs)
	}
	rrs, _, _ = p.cache.lookup("peer.weave.local.", "peer.weave.local.", dns.TypeANY, now.Add(1001*time.Millisecond), nil)
	if len(rrs) != 1 || rrs[0].Header().Rrtype != dns.TypeAAAA {
		t.Fatalf("after goodbye: %v", rrs)
	}
	// A flood of unsolicited answers stays within the cache bound.
	for i := 0; i < 2000; i++ {
		r.handle(pack(t, answerMsg(aRR("n"+itoa3(i%1000)+itoa3(i/1000)+".weave.local.", "10.250.0.5", 120, true))), peer, testIfIndex, now)
	}
	if p.cache.Len() != p.cfg.CacheSize {
		t.Fatalf("cache %d entries, bound %d", p.cache.Len(), p.cfg.CacheSize)
	}
}

// waitPackets waits up to d for n packets in s and returns what came.
func waitPackets(s *sink, n int, d time.Duration) []Packet {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		got := len(s.pkts)
		s.mu.Unlock()
		if got >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s.take()
}

func TestGoodbyeOnDelete(t *testing.T) {
	p, db := newTestNode(nil)
	r := testResponder(p)
	defer r.stopAnnouncements()
	var s sink
	r.sent = s.add
	p.resp.Store(r)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	out := waitPackets(&s, 1, time.Second)
	if len(out) != 1 || out[0].to.Addr() != mdnsGroup || len(out[0].msg.Answer) != 1 ||
		out[0].msg.Answer[0].Header().Class != dns.ClassINET || out[0].msg.Answer[0].Header().Ttl != 30 {
		t.Fatalf("announcement: %+v", out)
	}
	r.stopAnnouncements() // the repeats are TestAnnounceCoalesced's
	put(t, db, "c1", "fd00::1", "web.weave.local", 0)
	put(t, db, "c2", "10.32.0.1", "web.weave.local", 0)
	db.DeleteID("c1")
	out = s.take()
	if len(out) != 1 || len(out[0].msg.Answer) != 1 {
		t.Fatalf("goodbye for c1 (c2 still holds 10.32.0.1): %+v", out)
	}
	rr := out[0].msg.Answer[0]
	if rr.Header().Ttl != 0 || rr.Header().Class != dns.ClassINET || rr.(*dns.AAAA).AAAA.String() != "fd00::1" ||
		out[0].to.Addr() != mdnsGroup || !out[0].msg.Response {
		t.Fatalf("goodbye: %v", out[0].msg)
	}
	db.DeleteIDIP("c2", netip.MustParseAddr("10.32.0.1"))
	if out := s.take(); len(out) != 1 || out[0].msg.Answer[0].(*dns.A).A.String() != "10.32.0.1" {
		t.Fatalf("goodbye for c2: %+v", out)
	}
}

// TestAnnounceCoalesced: a new name is announced twice, one second apart
// (RFC 6762 §8.3). A second write within the once-a-second limit is not
// dropped (it was, before): the next announcement carries both addresses,
// and the count starts over, so the full set goes out twice as well.
func TestAnnounceCoalesced(t *testing.T) {
	p, db := newTestNode(nil)
	r := testResponder(p)
	defer r.stopAnnouncements()
	var s sink
	var mu sync.Mutex
	var at []time.Time
	r.sent = func(o Packet) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		s.add(o)
	}
	p.resp.Store(r)
	start := time.Now()
	put(t, db, "c1", "10.32.0.1", "solo.weave.local", 0)
	out := waitPackets(&s, 2, 3*time.Second)
	if len(out) != 2 || len(out[0].msg.Answer) != 1 || len(out[1].msg.Answer) != 1 {
		t.Fatalf("announcements of a new name: %+v", out)
	}
	mu.Lock()
	if d := at[1].Sub(at[0]); d < 950*time.Millisecond || d > 2*time.Second {
		t.Fatalf("announcements %v apart, want 1s", d)
	}
	if d := at[0].Sub(start); d > 500*time.Millisecond {
		t.Fatalf("first announcement after %v, want at once", d)
	}
	at = nil
	mu.Unlock()
	if out := waitPackets(&s, 1, 1500*time.Millisecond); len(out) != 0 {
		t.Fatalf("a third announcement: %+v", out)
	}

	put(t, db, "c2", "10.32.0.2", "dual.weave.local", 0)
	put(t, db, "c2", "fd00::2", "dual.weave.local", 0) // back to back, as a dual-stack container
	out = waitPackets(&s, 3, 3500*time.Millisecond)
	// the first may have gone out with the IPv4 address alone (2 then 3
	// announcements) or after both writes (2)
	if len(out) < 2 || len(out) > 3 {
		t.Fatalf("%d announcements of a name written twice, want 2 or 3: %+v", len(out), out)
	}
	if n := len(out); len(out[n-1].msg.Answer) != 2 || len(out[n-2].msg.Answer) != 2 {
		t.Fatalf("the last two announcements do not both carry both addresses: %v / %v", out[n-2].msg.Answer, out[n-1].msg.Answer)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d < 950*time.Millisecond {
			t.Fatalf("announcements %v apart: the once-a-second limit is broken", d)
		}
	}
}

func TestQueryPacket(t *testing.T) {
	p := testNode()
	r := testResponder(p)
	var s sink
	r.sent = s.add
	for _, qm := range []bool{false, true} {
		r.query("peer.weave.local.", qm)
		out := s.take()
		want := 1 // QM: the same packet again from the ephemeral port, a one-shot query
		if qm {
			want = 2
		}
		if len(out) != want || out[0].to != netip.MustParseAddrPort("224.0.0.251:5353") || out[0].oneShot || out[want-1].oneShot != qm {
			t.Fatalf("query (qm %v): %+v", qm, out)
		}
		class := uint16(dns.ClassINET | quBit) // QU while meshdns is alone on port 5353
		if qm {
			class = dns.ClassINET
		}
		m := out[0].msg
		if m.Response || m.Id != 0 || len(m.Question) != 2 || m.Question[0].Qtype != dns.TypeA || m.Question[1].Qtype != dns.TypeAAAA ||
			m.Question[0].Qclass != class || m.Question[1].Qclass != class {
			t.Fatalf("query packet (qm %v): %v", qm, m)
		}
	}
}

// FuzzHandle feeds arbitrary packets to the responder: it must never panic
// and never let the cache grow past its bound.
func FuzzHandle(f *testing.F) {
	f.Add(pack(f, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit)), uint16(5353))
	f.Add(pack(f, question("web.weave.local.", dns.TypeANY, dns.ClassINET)), uint16(40000))
	f.Add(pack(f, answerMsg(aRR("peer.weave.local.", "10.250.0.2", 120, true))), uint16(5353))
	f.Add(pack(f, answerMsg(aRR("peer.weave.local.", "10.250.0.2", 0, false))), uint16(5353))
	p, db := newTestNode(func(c *Config) { c.CacheSize = 8 })
	put(f, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	f.Fuzz(func(t *testing.T, b []byte, port uint16) {
		out := r.handle(b, netip.AddrPortFrom(netip.MustParseAddr("10.250.0.2"), port), testIfIndex, time.Now())
		for _, o := range out {
			if _, err := o.msg.Pack(); err != nil {
				t.Fatalf("reply does not pack: %v", err)
			}
		}
		if p.cache.Len() > 8 {
			t.Fatalf("cache grew to %d", p.cache.Len())
		}
	})
}

// TestDirectUnicastQuery: a query sent to our own unicast address from
// port 5353, without the QU bit, is answered by unicast to its source
// (RFC 6762 §5.5); the same query multicast is answered by multicast.
func TestDirectUnicastQuery(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Unix(1000, 0)
	q := pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET))
	out := r.Handle(q, Inbound{Src: peer, Dst: netip.MustParseAddr("10.250.0.1"), IfIndex: testIfIndex, TTL: 255}, now)
	if len(out) != 1 || out[0].to != peer || len(out[0].msg.Answer) != 1 {
		t.Fatalf("direct query: %+v, want one unicast reply to %v", out, peer)
	}
	out = r.handle(q, peer, testIfIndex, now)
	if len(out) != 1 || out[0].to.Addr() != mdnsGroup {
		t.Fatalf("multicast query: %+v, want a multicast reply", out)
	}
}

// TestCacheRefusesNonPeerAddresses: answers carrying loopback, unspecified
// or multicast addresses are not cached; a peer's own address is.
func TestCacheRefusesNonPeerAddresses(t *testing.T) {
	p := testNode()
	r := testResponder(p)
	now := time.Now()
	for _, a := range []string{"127.0.0.1", "0.0.0.0", "224.0.0.251", "239.1.2.3"} {
		r.handle(pack(t, answerMsg(aRR("bad.weave.local.", a, 120, true))), peer, testIfIndex, now)
	}
	if p.cache.Has("bad.weave.local.", now) {
		t.Fatal("cached an address no peer can have")
	}
	aaaa := &dns.AAAA{Hdr: dns.RR_Header{Name: "bad6.weave.local.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 120}, AAAA: net.ParseIP("::1")}
	r.handle(pack(t, answerMsg(aaaa)), peer, testIfIndex, now)
	if p.cache.Has("bad6.weave.local.", now) {
		t.Fatal("cached ::1")
	}
	r.handle(pack(t, answerMsg(aRR("good.weave.local.", "10.250.0.9", 120, true))), peer, testIfIndex, now)
	if !p.cache.Has("good.weave.local.", now) {
		t.Fatal("a peer's address was not cached")
	}
}
