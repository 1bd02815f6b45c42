package mdns

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Item 1 of issue 29: only what the LAN really said.

var ourAddr = netip.MustParseAddr("10.250.0.1")

// TestDropReasons: every packet RFC 6762 says to ignore is ignored —
// nothing cached, nothing answered — and counted under its reason. The
// poisoning of the issue (an unsolicited unicast response from port 5353
// of an on-link host, no query pending) is the first case; the same
// response is taken while a query for the name is pending.
func TestDropReasons(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Now()
	evil := pack(t, answerMsg(aRR("evil.weave.local.", "10.66.6.6", 3600, false)))
	query := pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit))
	var big []dns.RR
	for i := range 600 {
		big = append(big, aRR("big.weave.local.", fmt.Sprintf("10.250.%d.%d", i/250, i%250+1), 120, false))
	}
	oversized := pack(t, answerMsg(big...))
	if len(oversized) <= maxPacket {
		t.Fatalf("oversized packet is %d bytes", len(oversized))
	}
	other := netip.MustParseAddrPort("192.0.2.7:5353") // another subnet on the link
	for _, tc := range []struct {
		name, reason string
		b            []byte
		in           Inbound
	}{
		{"unsolicited unicast response", "unsolicited", evil, Inbound{Src: peer, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255}},
		{"unicast response to the one-shot socket", "unsolicited", evil, Inbound{Src: peer, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255, OneShot: true}},
		{"response that crossed a router", "ttl", evil, Inbound{Src: peer, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 254}},
		{"response without a TTL", "ttl", evil, Inbound{Src: peer, Dst: mdnsGroup, IfIndex: testIfIndex}},
		{"response from port 40000", "source_port", evil, Inbound{Src: netip.MustParseAddrPort("10.250.0.2:40000"), Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"unspecified source", "bad_source", evil, Inbound{Src: netip.MustParseAddrPort("0.0.0.0:5353"), Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"limited broadcast source", "bad_source", evil, Inbound{Src: netip.MustParseAddrPort("255.255.255.255:5353"), Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"directed broadcast source", "bad_source", evil, Inbound{Src: netip.MustParseAddrPort("10.250.0.255:5353"), Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"multicast source", "bad_source", query, Inbound{Src: netip.MustParseAddrPort("224.0.0.251:5353"), Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"oversized", "oversized", oversized, Inbound{Src: peer, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"malformed", "malformed", []byte{0, 1, 2, 3, 4}, Inbound{Src: peer, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}},
		{"query from another subnet through a router", "off_link", query, Inbound{Src: other, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 63}},
		{"query to the one-shot socket", "unexpected", query, Inbound{Src: peer, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255, OneShot: true}},
		{"unknown interface", "interface", query, Inbound{Src: peer, Dst: mdnsGroup, IfIndex: 99, TTL: 255}},
	} {
		before := testutil.ToFloat64(mdnsDropped.WithLabelValues(tc.reason))
		if out := r.Handle(tc.b, tc.in, now); len(out) != 0 {
			t.Errorf("%s: answered %v", tc.name, out)
		}
		if got := testutil.ToFloat64(mdnsDropped.WithLabelValues(tc.reason)) - before; got != 1 {
			t.Errorf("%s: mdns_dropped_total{reason=%q} went up by %v, want 1", tc.name, tc.reason, got)
		}
		if p.cache.Len() != 0 {
			t.Fatalf("%s: cached %d entries", tc.name, p.cache.Len())
		}
	}
	// Taken: a unicast response while a query for the name is pending, a
	// query from another subnet on the link (IP TTL 255), and a multicast
	// response from it.
	c, _ := p.inflight.join("evil.weave.local.", time.Second, false, nil)
	defer p.inflight.abandon("evil.weave.local.", c)
	r.Handle(evil, Inbound{Src: peer, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255}, now)
	if !p.cache.Has("evil.weave.local.", now) {
		t.Fatal("a unicast answer to our pending query was not cached")
	}
	// Its QU query is answered by multicast: a unicast reply would follow
	// the routes (through a router, or nowhere).
	if out := r.Handle(query, Inbound{Src: other, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}, now); len(out) != 1 || out[0].to != netip.AddrPortFrom(mdnsGroup, mdnsPort) {
		t.Fatalf("a query from another subnet on the link: %v", out)
	}
	if out := r.Handle(query, Inbound{Src: other, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255}, now.Add(2*time.Second)); len(out) != 1 || out[0].to != netip.AddrPortFrom(mdnsGroup, mdnsPort) {
		t.Fatalf("a direct query from another subnet on the link: %v", out)
	}
	r.Handle(pack(t, answerMsg(aRR("far.weave.local.", "192.0.2.7", 120, false))), Inbound{Src: other, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}, now)
	if !p.cache.Has("far.weave.local.", now) {
		t.Fatal("a multicast answer from another subnet on the link was not cached")
	}
}

// TestOneAnswerPerQuestion: the amplification of the issue — a legacy
// query repeating one question 200 times — gets one answer in one packet
// of at most 512 bytes; a QU query repeating it, or asking ANY beside A,
// gets each record once.
func TestOneAnswerPerQuestion(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	put(t, db, "c1", "fd00::1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Now()
	q := &dns.Msg{}
	q.Id = 77
	for range 200 {
		q.Question = append(q.Question, dns.Question{Name: "web.weave.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	}
	legacy := netip.MustParseAddrPort("10.250.0.2:40000")
	out := r.handle(pack(t, q), legacy, testIfIndex, now)
	if len(out) != 1 || len(out[0].msg.Answer) != 1 || len(out[0].msg.Question) != 1 || out[0].msg.Id != 77 || out[0].msg.Len() > 512 {
		t.Fatalf("legacy query repeating a question 200 times: %+v", out)
	}
	q.Question = append(q.Question, dns.Question{Name: "WEB.weave.local.", Qtype: dns.TypeANY, Qclass: dns.ClassINET | quBit})
	for i := range q.Question {
		q.Question[i].Qclass |= quBit
	}
	out = r.handle(pack(t, q), peer, testIfIndex, now)
	if len(out) != 1 || len(out[0].msg.Answer) != 2 {
		t.Fatalf("QU query repeating A 200 times and ANY: %+v", out)
	}
}

// TestReplySize: a name with 700 addresses answers a QU query in packets
// of at most 9,000 bytes (with their IP and UDP headers) holding every
// address once; a legacy query with an EDNS0 buffer of 1232 bytes gets
// one reply within it, truncated (TC).
func TestReplySize(t *testing.T) {
	p, db := newTestNode(nil)
	for i := range 700 {
		put(t, db, "c", fmt.Sprintf("10.32.%d.%d", i/250, i%250+1), "many.weave.local", 0)
	}
	r := testResponder(p)
	now := time.Now()
	out := r.handle(pack(t, question("many.weave.local.", dns.TypeA, dns.ClassINET|quBit)), peer, testIfIndex, now)
	seen := map[string]bool{}
	for _, o := range out {
		if n := o.msg.Len(); n > maxPacket-48 {
			t.Errorf("a reply of %d bytes", n)
		}
		for _, rr := range o.msg.Answer {
			seen[rr.(*dns.A).A.String()] = true
		}
	}
	if len(out) < 2 || len(seen) != 700 {
		t.Fatalf("%d packets with %d addresses, want all 700 in several", len(out), len(seen))
	}
	q := question("many.weave.local.", dns.TypeA, dns.ClassINET)
	q.SetEdns0(1232, false)
	out = r.handle(pack(t, q), netip.MustParseAddrPort("10.250.0.3:40000"), testIfIndex, now)
	if len(out) != 1 || !out[0].msg.Truncated || out[0].msg.Len() > 1232 || len(out[0].msg.Answer) == 0 {
		t.Fatalf("legacy reply: %d packets, %+v", len(out), out)
	}
}

// TestReplyRateLimit: one source gets at most replyBurst unicast replies
// at once and replyRate a second after; another source is still answered.
func TestReplyRateLimit(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Now()
	q := pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit))
	before := testutil.ToFloat64(mdnsDropped.WithLabelValues("reply_rate"))
	answered := 0
	for range 100 {
		answered += len(r.handle(q, peer, testIfIndex, now))
	}
	if answered != replyBurst || testutil.ToFloat64(mdnsDropped.WithLabelValues("reply_rate"))-before != 100-replyBurst {
		t.Fatalf("%d of 100 queries from one source answered at once, want %d", answered, replyBurst)
	}
	if out := r.handle(q, peer, testIfIndex, now.Add(time.Second)); len(out) != 1 {
		t.Fatal("no reply a second later")
	}
	if out := r.handle(q, netip.MustParseAddrPort("10.250.0.3:5353"), testIfIndex, now); len(out) != 1 {
		t.Fatal("another source refused")
	}
}

// TestLateUnicastAnswer: a holder's unicast answer that comes after the
// query's collection window closed (a busy host) still counts for a
// recently sent query (RFC 6762 §6) and is cached for the next lookups;
// one for a name whose query ended longer ago than recentGrace, or was
// never sent, is unsolicited.
func TestLateUnicastAnswer(t *testing.T) {
	p, _ := newTestNode(func(c *Config) { c.Timeout = 50 * time.Millisecond })
	r := testResponder(p)
	p.resp.Store(r)
	var s sink
	r.sent = s.add
	if got := p.Resolve(context.Background(), "late.weave.local."); got != Asked {
		t.Fatalf("Resolve: %d", got)
	}
	// The query ended (nobody answered in time); the holder answers now.
	r.Handle(pack(t, answerMsg(aRR("late.weave.local.", "10.250.0.7", 120, false))), Inbound{Src: peer, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255}, time.Now())
	if !p.cache.Has("late.weave.local.", time.Now()) {
		t.Fatal("a late unicast answer to a query sent 50 ms ago was dropped")
	}
	if _, res, _ := p.Lookup("late.weave.local.", "late.weave.local.", dns.TypeA, time.Now()); res != Positive {
		t.Fatalf("the late answer did not replace the negative entry: %v", res)
	}
	p.inflight.mu.Lock()
	p.inflight.recent["late.weave.local."] = time.Now().Add(-time.Millisecond) // its grace is over
	p.inflight.mu.Unlock()
	before := testutil.ToFloat64(mdnsDropped.WithLabelValues("unsolicited"))
	r.Handle(pack(t, answerMsg(aRR("late.weave.local.", "10.250.0.8", 120, false))), Inbound{Src: peer, Dst: ourAddr, IfIndex: testIfIndex, TTL: 255}, time.Now())
	if testutil.ToFloat64(mdnsDropped.WithLabelValues("unsolicited"))-before != 1 {
		t.Fatal("a unicast answer after the grace was not dropped as unsolicited")
	}
}

// TestOffSubnetDeferred: a QU query from a peer of another subnet on the
// link is answered by multicast; one that comes less than a second after
// the record was multicast is not dropped by the once-a-second limit but
// deferred until the limit allows it (the querier asked: it may not have
// heard the last one), and a third meanwhile adds nothing.
func TestOffSubnetDeferred(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	now := time.Now()
	other := netip.MustParseAddrPort("192.0.2.7:5353")
	q := pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit))
	in := Inbound{Src: other, Dst: mdnsGroup, IfIndex: testIfIndex, TTL: 255}
	out := r.Handle(q, in, now)
	if len(out) != 1 || out[0].to.Addr() != mdnsGroup || out[0].delay > sharedDelayMax {
		t.Fatalf("first: %+v", out)
	}
	out = r.Handle(q, in, now.Add(400*time.Millisecond))
	if len(out) != 1 || out[0].to.Addr() != mdnsGroup || out[0].delay != 600*time.Millisecond+sharedDelayMin {
		t.Fatalf("400 ms later: %+v", out)
	}
	if out := r.Handle(q, in, now.Add(500*time.Millisecond)); len(out) != 0 {
		t.Fatalf("while the deferred reply is due: %+v", out)
	}
	// An on-subnet QM query meanwhile is not answered (the limit), as before.
	if out := r.handle(pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET)), peer, testIfIndex, now.Add(700*time.Millisecond)); len(out) != 0 {
		t.Fatalf("QM within the limit: %+v", out)
	}
}
