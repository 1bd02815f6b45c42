package mdns

import (
	"fmt"
	"hash/maphash"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAnnounceAll: after start-up (or an interface's rejoin) every local
// record is announced, twenty a packet, and again one second later.
func TestAnnounceAll(t *testing.T) {
	p, db := newTestNode(nil)
	for i := range 25 {
		put(t, db, "c", fmt.Sprintf("10.32.1.%d", i+1), fmt.Sprintf("n%d.weave.local", i), 0)
	}
	put(t, db, "d", "10.32.1.1", "n0.weave.local", 0) // the same pair, sent once
	r := testResponder(p)
	defer r.stopAnnouncements()
	var s sink
	r.sent = s.add
	r.announceAll(nil)
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
	r := testResponder(testNode())
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
