package mdnsfallback

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/netip"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// TestPTROverMDNS: the responder answers PTR questions for the local
// addresses; a PTR query for another host's address inside the reverse
// networks is asked over mDNS and answered from what that host replies.
func TestPTROverMDNS(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.timeout = time.Second })
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	var s sink
	r.sent = s.add
	p.mdns.Store(r)

	out := r.handle(pack(t, question("1.0.32.10.in-addr.arpa.", dns.TypePTR, dns.ClassINET|quBit)), peer, testIfIndex, time.Now())
	if len(out) != 1 || len(out[0].msg.Answer) != 1 || out[0].msg.Answer[0].(*dns.PTR).Ptr != "web.weave.local." {
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
	if len(q) != 1 || len(q[0].msg.Question) != 1 || q[0].msg.Question[0].Qtype != dns.TypePTR || q[0].msg.Question[0].Name != "2.0.32.10.in-addr.arpa." {
		t.Fatalf("PTR query: %+v", q)
	}
	ans := answerMsg(&dns.PTR{Hdr: dns.RR_Header{Name: "2.0.32.10.in-addr.arpa.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: "db.weave.local."})
	r.handle(pack(t, ans), netip.MustParseAddrPort("10.250.0.2:5353"), testIfIndex, time.Now())
	m := <-done
	if len(m.Answer) != 1 || m.Answer[0].(*dns.PTR).Ptr != "db.weave.local." {
		t.Fatalf("PTR of another host's address: %v", m)
	}
	// A PTR outside the reverse networks or pointing outside the zones is dropped.
	bad := answerMsg(
		&dns.PTR{Hdr: dns.RR_Header{Name: "9.0.0.192.in-addr.arpa.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: "x.weave.local."},
		&dns.PTR{Hdr: dns.RR_Header{Name: "3.0.32.10.in-addr.arpa.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: "printer.local."})
	r.handle(pack(t, bad), netip.MustParseAddrPort("10.250.0.2:5353"), testIfIndex, time.Now())
	if p.cache.Len() != 1 {
		t.Fatalf("cache holds %d entries, want the one PTR", p.cache.Len())
	}
}

// TestAnnounceAll: after start-up (or an interface's rejoin) every local
// record is announced, twenty a packet, and again one second later.
func TestAnnounceAll(t *testing.T) {
	p := newTestPlugin(nil)
	for i := range 25 {
		put(t, p, "c", fmt.Sprintf("10.32.1.%d", i+1), fmt.Sprintf("n%d.weave.local", i), 0)
	}
	put(t, p, "d", "10.32.1.1", "n0.weave.local", 0) // the same pair, sent once
	r := testResponder(p)
	defer r.stopAnnouncements()
	var s sink
	r.sent = s.add
	r.announceAll(0)
	out := s.take()
	if len(out) != 2 || len(out[0].msg.Answer)+len(out[1].msg.Answer) != 25 {
		t.Fatalf("first announcement: %d packets", len(out))
	}
	for _, rr := range append(out[0].msg.Answer, out[1].msg.Answer...) {
		if rr.Header().Class != dns.ClassINET || rr.Header().Ttl != 30 {
			t.Fatalf("announced %v", rr)
		}
	}
	if again := waitPackets(&s, 2, 2*time.Second); len(again) != 2 {
		t.Fatalf("second announcement: %d packets", len(again))
	}
}

// TestOwnPacket: a packet we sent, back from one of our own addresses
// (multicast loopback), is ours; the same bytes from another host (an
// identical query for the same name) are not, and neither are other bytes.
func TestOwnPacket(t *testing.T) {
	r := testResponder(newTestPlugin(nil))
	r.own.seed = maphash.MakeSeed()
	pr := []netip.Prefix{netip.MustParsePrefix("10.250.0.1/24")}
	r.ifaces[testIfIndex].prefixes = pr
	r.ifaces[testIfIndex].load = func() []netip.Prefix { return pr }
	now := time.Now()
	q := pack(t, question("svc.weave.local.", dns.TypeA, dns.ClassINET|quBit))
	r.own.note(q, now)
	for _, tc := range []struct {
		b    []byte
		src  string
		at   time.Duration
		want bool
	}{
		{q, "10.250.0.1", 0, true},
		{q, "10.250.0.2", 0, false}, // another host asking the same
		{pack(t, question("other.weave.local.", dns.TypeA, dns.ClassINET)), "10.250.0.1", 0, false},
		{q, "10.250.0.1", 3 * time.Second, false}, // too old to be a loopback
	} {
		if got := r.ownPacket(tc.b, netip.MustParseAddr(tc.src), now.Add(tc.at)); got != tc.want {
			t.Errorf("from %s after %v: own %v, want %v", tc.src, tc.at, got, tc.want)
		}
	}
}
