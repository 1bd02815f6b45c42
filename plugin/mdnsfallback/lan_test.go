package mdnsfallback

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/mdns"

	"github.com/miekg/dns"
)

// The plugin's use of its mDNS side: ServeDNS asking the network, the
// goodbyes of a stop, the query budget under a flood.

const testIfIndex = 7

var peer = netip.MustParseAddrPort("10.250.0.2:5353")

// testResponder makes p's responder one with no socket on a fake
// interface 10.250.0.0/24; what it would send goes to sent (may be nil).
func testResponder(p *MDNSFallback, sent func(mdns.Packet)) *mdns.Responder {
	return p.lan.Detached(testIfIndex, "test0", []netip.Prefix{netip.MustParsePrefix("10.250.0.0/24")}, sent)
}

// hear hands r a packet multicast to the group from src.
func hear(t testing.TB, r *mdns.Responder, m *dns.Msg, src netip.AddrPort) []mdns.Packet {
	t.Helper()
	return r.Handle(pack(t, m), mdns.Inbound{Src: src, Dst: mdns.Group, IfIndex: testIfIndex, TTL: 255}, time.Now())
}

type sink struct {
	mu   sync.Mutex
	pkts []mdns.Packet
}

func (s *sink) add(o mdns.Packet) { s.mu.Lock(); s.pkts = append(s.pkts, o); s.mu.Unlock() }
func (s *sink) take() []mdns.Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.pkts
	s.pkts = nil
	return out
}

// waitPackets waits up to d for n packets in s and returns what came.
func waitPackets(s *sink, n int, d time.Duration) []mdns.Packet {
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

func answerMsg(rrs ...dns.RR) *dns.Msg {
	return &dns.Msg{MsgHdr: dns.MsgHdr{Response: true, Authoritative: true}, Answer: rrs}
}

const cacheFlushBit, quBit = 1 << 15, 1 << 15

func aRR(name, addr string, ttl uint32, flush bool) dns.RR {
	class := uint16(dns.ClassINET)
	if flush {
		class |= cacheFlushBit
	}
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: class, Ttl: ttl}, A: net.ParseIP(addr)}
}

// queriesSent is the number of mDNS queries p sent.
func queriesSent(p *MDNSFallback) int64 { q, _ := p.lan.Stats(); return q }

// TestGoodbyesOnStopNotOnReload: a stop multicasts a goodbye (TTL 0) for
// every local record; a reload, whose next instance keeps the records,
// sends none.
func TestGoodbyesOnStopNotOnReload(t *testing.T) {
	for _, reload := range []bool{true, false} {
		p := newTestPlugin(func(c *config) { c.api = "" })
		put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
		put(t, p, "c2", "fd00::2", "db.weave.local", 0)
		var s sink
		testResponder(p, s.add)
		if reload {
			if err := p.onRestart(); err != nil {
				t.Fatal(err)
			}
			carried.Drop(p.carryKey())
		} else if err := p.shutdown(); err != nil {
			t.Fatal(err)
		}
		var byes []dns.RR
		for _, o := range s.take() {
			byes = append(byes, o.Message().Answer...)
		}
		switch {
		case reload && len(byes) != 0:
			t.Fatalf("a reload sent goodbyes: %v", byes)
		case !reload && (len(byes) != 2 || byes[0].Header().Ttl != 0 || byes[1].Header().Ttl != 0):
			t.Fatalf("a stop sent %v, want TTL-0 goodbyes for both records", byes)
		}
	}
}

// TestPTROverMDNS: the responder answers PTR questions for the local
// addresses; a PTR query for another host's address inside the reverse
// networks is asked over mDNS and answered from what that host replies.
func TestPTROverMDNS(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.timeout = time.Second })
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	var s sink
	r := testResponder(p, s.add)

	out := r.Handle(pack(t, question("1.0.32.10.in-addr.arpa.", dns.TypePTR, dns.ClassINET|quBit)), mdns.Inbound{Src: peer, Dst: mdns.Group, IfIndex: testIfIndex, TTL: 255}, time.Now())
	if len(out) != 1 || len(out[0].Message().Answer) != 1 || out[0].Message().Answer[0].(*dns.PTR).Ptr != "web.weave.local." {
		t.Fatalf("PTR question for a local address: %+v", out)
	}
	s.take()

	done := make(chan *dns.Msg)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("2.0.32.10.in-addr.arpa.", dns.TypePTR)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		p.ServeDNS(context.Background(), rec, m)
		done <- rec.Msg
	}()
	q := waitPackets(&s, 1, time.Second)
	if len(q) != 1 || len(q[0].Message().Question) != 1 || q[0].Message().Question[0].Qtype != dns.TypePTR || q[0].Message().Question[0].Name != "2.0.32.10.in-addr.arpa." {
		t.Fatalf("PTR query: %+v", q)
	}
	ans := answerMsg(&dns.PTR{Hdr: dns.RR_Header{Name: "2.0.32.10.in-addr.arpa.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: "db.weave.local."})
	r.Handle(pack(t, ans), mdns.Inbound{Src: netip.MustParseAddrPort("10.250.0.2:5353"), Dst: mdns.Group, IfIndex: testIfIndex, TTL: 255}, time.Now())
	m := <-done
	if len(m.Answer) != 1 || m.Answer[0].(*dns.PTR).Ptr != "db.weave.local." {
		t.Fatalf("PTR of another host's address: %v", m)
	}
	// A PTR outside the reverse networks or pointing outside the zones is dropped.
	bad := answerMsg(
		&dns.PTR{Hdr: dns.RR_Header{Name: "9.0.0.192.in-addr.arpa.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: "x.weave.local."},
		&dns.PTR{Hdr: dns.RR_Header{Name: "3.0.32.10.in-addr.arpa.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: "printer.local."})
	r.Handle(pack(t, bad), mdns.Inbound{Src: netip.MustParseAddrPort("10.250.0.2:5353"), Dst: mdns.Group, IfIndex: testIfIndex, TTL: 255}, time.Now())
	if p.lan.Answers().Len() != 1 {
		t.Fatalf("cache holds %d entries, want the one PTR", p.lan.Answers().Len())
	}
}

// TestRandomNameFlood: DNS requests for 500 random names in the zone, as
// fast as they come, send at most query_rate queries a second (plus the
// burst); the others are answered SERVFAIL at once. The names' negative
// entries do not evict the names peers answered (their own budget).
func TestRandomNameFlood(t *testing.T) {
	p := newTestPlugin(func(c *config) {
		c.timeout = 20 * time.Millisecond
		c.cacheSize = 16
		c.queryRate = 10
	})
	r := testResponder(p, nil)
	now := time.Now()
	for i := range 16 {
		r.Handle(pack(t, answerMsg(aRR(fmt.Sprintf("peer%d.weave.local.", i), "10.250.0.9", 120, true))), mdns.Inbound{Src: peer, Dst: mdns.Group, IfIndex: testIfIndex, TTL: 255}, now)
	}
	start := time.Now()
	servfail := 0
	for i := range 500 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("rnd%d.weave.local.", i), dns.TypeA)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		rc, _ := p.ServeDNS(context.Background(), rec, m)
		if rc == dns.RcodeServerFailure && rec.Msg == nil { // the server writes the SERVFAIL
			servfail++
		}
	}
	elapsed := time.Since(start)
	sent := queriesSent(p)
	if max := int64(10 + 10*elapsed.Seconds() + 1); sent > max {
		t.Fatalf("%d queries sent in %v for 500 random names, want at most %d", sent, elapsed, max)
	}
	if servfail == 0 || int64(servfail)+sent != 500 {
		t.Fatalf("%d SERVFAIL and %d queries for 500 names", servfail, sent)
	}
	t.Logf("500 random names in %v: %d queries sent, %d SERVFAIL", elapsed.Round(time.Millisecond), sent, servfail)
	for i := range 16 {
		if !p.lan.Has(fmt.Sprintf("peer%d.weave.local.", i), time.Now()) {
			t.Fatalf("peer%d evicted by negative entries", i)
		}
	}
}

// TestOtherTypesNeedNoQuery: the traffic for nothing — HTTPS and
// SRV questions for a name another host holds — sends no mDNS query:
// types other than A, AAAA and ANY are answered from what is known
// (NODATA for a name with addresses, here or on other hosts; NXDOMAIN for
// one nobody is known to hold). An HTTPS question asked while the name's
// A query is in flight waits for it instead of answering NXDOMAIN early.
func TestOtherTypesNeedNoQuery(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.timeout = time.Second })
	r := testResponder(p, nil)
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	hear(t, r, answerMsg(aRR("far.weave.local.", "10.250.0.9", 120, false)), peer)
	serve := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		p.ServeDNS(context.Background(), rec, m)
		return rec.Msg
	}
	time.Sleep(20 * time.Millisecond) // the background query for web's other holders is out
	base := queriesSent(p)
	for range 10 {
		for _, qt := range []uint16{dns.TypeHTTPS, dns.TypeSRV} {
			if m := serve("far.weave.local.", qt); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 || len(m.Ns) != 1 {
				t.Fatalf("%s of a name another host holds: %v", dns.TypeToString[qt], m)
			}
			if m := serve("web.weave.local.", qt); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
				t.Fatalf("%s of a local name: %v", dns.TypeToString[qt], m)
			}
			if m := serve("nobody.weave.local.", qt); m.Rcode != dns.RcodeNameError {
				t.Fatalf("%s of a name nobody holds: %v", dns.TypeToString[qt], m)
			}
		}
	}
	if n := queriesSent(p) - base; n != 0 {
		t.Fatalf("60 questions of other types sent %d mDNS queries", n)
	}
	// A, then HTTPS while the A query is in flight: NODATA once it is answered.
	a := make(chan *dns.Msg)
	go func() { a <- serve("late.weave.local.", dns.TypeA) }()
	for queriesSent(p) == base {
		time.Sleep(time.Millisecond)
	}
	https := make(chan *dns.Msg)
	go func() { https <- serve("late.weave.local.", dns.TypeHTTPS) }()
	time.Sleep(10 * time.Millisecond)
	hear(t, r, answerMsg(aRR("late.weave.local.", "10.250.0.8", 120, false)), peer)
	if m := <-https; m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Fatalf("HTTPS asked beside A: %v", m)
	}
	if m := <-a; len(m.Answer) != 1 {
		t.Fatalf("A: %v", m)
	}
}
