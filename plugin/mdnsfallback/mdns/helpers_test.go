package mdns

import (
	"net/netip"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
)

// newTestNode returns a node with the test configuration changed by mod,
// over a record database whose puts announce and deletes say goodbye
// through it, as the plugin wires them.
func newTestNode(mod func(*Config)) (*Node, *records.DB) {
	cfg := Config{
		Zones:       []string{"weave.local."},
		TTL:         30,
		CacheSize:   100,
		NegativeTTL: 5 * time.Second,
		QueryRate:   DefaultQueryRate,
		Timeout:     250 * time.Millisecond,
		Reverse:     []netip.Prefix{netip.MustParsePrefix("10.32.0.0/12")},
	}
	if mod != nil {
		mod(&cfg)
	}
	db := records.NewDB(cfg.Zones, 1000, cfg.TTL)
	n := New(cfg, db)
	db.SetHooks(n.Announce, n.Goodbye, nil)
	return n, db
}

func put(t testing.TB, db *records.DB, id, addr, domain string, ttl uint32) {
	t.Helper()
	if _, _, err := db.Put(records.Record{ID: id, IP: netip.MustParseAddr(addr), Domain: domain, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
}

func itoa3(i int) string {
	return string([]byte{byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)})
}

// handle is Handle for a packet multicast to the group.
func (r *Responder) handle(b []byte, src netip.AddrPort, ifIndex int, now time.Time) []Packet {
	return r.Handle(b, Inbound{Src: src, Dst: mdnsGroup, IfIndex: ifIndex, TTL: 255}, now)
}

func testNode() *Node { n, _ := newTestNode(nil); return n }

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }
