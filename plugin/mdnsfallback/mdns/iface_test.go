package mdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeLinks stands for the kernel's interfaces in the watcher's tests:
// byName looks one up, addrs gives its addresses.
type fakeLinks struct {
	present map[string]*net.Interface
	addrs   map[int][]netip.Prefix
}

func (f *fakeLinks) byName(n string) (*net.Interface, error) {
	if i, ok := f.present[n]; ok {
		return i, nil
	}
	return nil, errors.New("no such interface")
}

func (f *fakeLinks) responder(names ...string) *Responder {
	r := newResponder(testNode(), names)
	r.detached = true
	r.addrsOf = func(ifi *net.Interface) []netip.Prefix { return f.addrs[ifi.Index] }
	return r
}

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestCheckInterfaces: an interface that does not exist at start-up is
// waited for and joined when it appears; one that disappears leaves the
// set; one that comes back under a new index rejoins; an unchanged one is
// kept as it is; one that loses multicast leaves. Interfaces says which
// are joined and which are missing.
func TestCheckInterfaces(t *testing.T) {
	f := &fakeLinks{
		present: map[string]*net.Interface{"eth1": {Index: 4, Name: "eth1", Flags: net.FlagMulticast}},
		addrs:   map[int][]netip.Prefix{4: pfx("10.1.0.1/24"), 9: pfx("10.32.0.1/12", "fe80::1/64")},
	}
	r := f.responder("weave", "eth1")
	r.n.resp.Store(r)
	r.checkInterfaces(f.byName) // start-up: weave does not exist yet
	eth1 := r.ifs()[4]
	if got := r.ifs(); len(got) != 1 || eth1 == nil {
		t.Fatalf("at start-up: %v", got)
	}
	want := `[{weave missing 0 []} {eth1 joined 4 [ipv4]}]`
	if got := fmt.Sprint(r.n.Interfaces()); got != want {
		t.Fatalf("Interfaces at start-up: %s, want %s", got, want)
	}
	f.present["weave"] = &net.Interface{Index: 9, Name: "weave", Flags: net.FlagMulticast}
	r.checkInterfaces(f.byName)
	if got := r.ifs(); len(got) != 2 || got[9] == nil || got[9].ifi.Name != "weave" || got[4] != eth1 {
		t.Fatalf("after weave appeared as 9: %v", got)
	}
	want = `[{weave joined 9 [ipv4 ipv6]} {eth1 joined 4 [ipv4]}]`
	if got := fmt.Sprint(r.n.Interfaces()); got != want {
		t.Fatalf("Interfaces after weave appeared: %s, want %s", got, want)
	}
	delete(f.present, "weave")
	r.checkInterfaces(f.byName)
	if got := r.ifs(); len(got) != 1 || got[4] != eth1 {
		t.Fatalf("after weave went: %v", got)
	}
	before := testutil.ToFloat64(mdnsRejoins)
	f.present["weave"] = &net.Interface{Index: 11, Name: "weave", Flags: net.FlagMulticast}
	f.addrs[11] = f.addrs[9]
	r.checkInterfaces(f.byName)
	if got := r.ifs(); len(got) != 2 || got[11] == nil || got[4] != eth1 {
		t.Fatalf("after weave came back as 11: %v", got)
	}
	if testutil.ToFloat64(mdnsRejoins)-before != 1 {
		t.Fatal("a rejoin not counted")
	}
	f.present["eth1"] = &net.Interface{Index: 4, Name: "eth1"} // no multicast any more
	r.checkInterfaces(f.byName)
	if got := r.ifs(); len(got) != 1 || got[11] == nil {
		t.Fatalf("after eth1 lost multicast: %v", got)
	}
}

// TestLinks: mDNS goes out on each interface over each family it has an
// address of — IPv4 and IPv6 on a dual-stack one, IPv6 alone on one with
// only a link-local address — and an address added later brings its
// family up, announced at once on that link only.
func TestLinks(t *testing.T) {
	f := &fakeLinks{
		present: map[string]*net.Interface{
			"ds0": {Index: 2, Name: "ds0", Flags: net.FlagMulticast},
			"v6":  {Index: 3, Name: "v6", Flags: net.FlagMulticast},
		},
		addrs: map[int][]netip.Prefix{2: pfx("10.1.0.1/24", "fd00::1/64"), 3: pfx("fe80::3/64")},
	}
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := f.responder("ds0", "v6")
	r.n = p
	p.resp.Store(r)
	var s sink
	r.sent = s.add
	defer r.stopAnnouncements()
	r.checkInterfaces(f.byName)
	if got, want := fmt.Sprint(r.links()), "[{2 0} {2 1} {3 1}]"; got != want {
		t.Fatalf("links %s, want %s", got, want)
	}
	// A query goes out once per link, to the family's group.
	r.query("far.weave.local.", false)
	var dsts []string
	for _, o := range s.take() {
		dsts = append(dsts, fmt.Sprintf("%d %s", o.ifIndex, o.to))
	}
	if got, want := strings.Join(dsts, ","), "2 224.0.0.251:5353,2 [ff02::fb]:5353,3 [ff02::fb]:5353"; got != want {
		t.Fatalf("query sent to %s, want %s", got, want)
	}
	// v6 gets an IPv4 address: its IPv4 link comes up and is announced on.
	r.opened.Store(true)
	f.addrs[3] = pfx("fe80::3/64", "10.2.0.1/24")
	r.checkInterfaces(f.byName)
	out := waitPackets(&s, 1, time.Second)
	if len(out) != 1 || out[0].ifIndex != 3 || out[0].to.Addr() != mdnsGroup || len(out[0].msg.Answer) != 1 {
		t.Fatalf("announcement on the new link: %+v", out)
	}
}

// TestIPv6Exchange: a query over IPv6 from a link-local peer is answered
// over IPv6 (a multicast reply to ff02::fb, a QU one to the peer), with
// the AAAA and A records; answers heard from a link-local peer are
// cached, but a link-local address is not (a DNS client could not use
// it without its zone); an off-link IPv6 query below hop limit 255 is
// dropped, an on-link one (link-local source, or inside the interface's
// prefix) is not.
func TestIPv6Exchange(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	put(t, db, "c1", "fd00::32:1", "web.weave.local", 0)
	r := p.Detached(5, "v6", pfx("fe80::1/64", "2001:db8:1::1/64"), nil)
	now := time.Now()
	peer6 := netip.MustParseAddrPort("[fe80::2]:5353")
	in := Inbound{Src: peer6, Dst: mdnsGroup6, IfIndex: 5, TTL: 255}
	out := r.Handle(pack(t, question("web.weave.local.", dns.TypeANY, dns.ClassINET)), in, now)
	if len(out) != 1 || out[0].to != netip.AddrPortFrom(mdnsGroup6, mdnsPort) || len(out[0].msg.Answer) != 2 {
		t.Fatalf("QM over IPv6: %+v", out)
	}
	out = r.Handle(pack(t, question("web.weave.local.", dns.TypeAAAA, dns.ClassINET|quBit)), in, now)
	if len(out) != 1 || out[0].to != peer6 || out[0].ifIndex != 5 || len(out[0].msg.Answer) != 1 {
		t.Fatalf("QU over IPv6: %+v", out)
	}
	aaaa := &dns.AAAA{Hdr: dns.RR_Header{Name: "far.weave.local.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 120}, AAAA: net.ParseIP("fd00::99")}
	ll := &dns.AAAA{Hdr: dns.RR_Header{Name: "far.weave.local.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 120}, AAAA: net.ParseIP("fe80::99")}
	before := testutil.ToFloat64(mdnsDropped.WithLabelValues("link_local"))
	r.Handle(pack(t, answerMsg(aaaa, ll, aRR("far.weave.local.", "10.32.9.9", 120, false))), in, now)
	rrs, res, _ := p.Lookup("far.weave.local.", "far.weave.local.", dns.TypeAAAA, now)
	if res != Positive || len(rrs) != 1 || rrs[0].(*dns.AAAA).AAAA.String() != "fd00::99" {
		t.Fatalf("AAAA heard from a link-local peer: %v %v", rrs, res)
	}
	if testutil.ToFloat64(mdnsDropped.WithLabelValues("link_local"))-before != 1 {
		t.Fatal("a link-local address was not dropped as link_local")
	}
	if !p.Has("far.weave.local.", now) {
		t.Fatal("the A record heard over IPv6 was not cached")
	}
	q := pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET|quBit))
	for _, tc := range []struct {
		src  string
		want int
	}{
		{"[2001:db8:9::7]:40000", 0}, // off the link, through a router
		{"[fe80::7]:40000", 1},       // link-local: on the link
		{"[2001:db8:1::7]:40000", 1}, // inside the interface's prefix
	} {
		out := r.Handle(q, Inbound{Src: netip.MustParseAddrPort(tc.src), Dst: mdnsGroup6, IfIndex: 5, TTL: 1}, now)
		if len(out) != tc.want {
			t.Errorf("legacy query from %s with hop limit 1: %d replies, want %d", tc.src, len(out), tc.want)
		}
	}
}

// TestParseTentative: the addresses still in duplicate address detection
// (or that failed it) are read from /proc/net/if_inet6 for one interface.
func TestParseTentative(t *testing.T) {
	const table = `fe80000000000000f066dafffe00bd55 02 40 20 c0     pb
fe800000000000000000000000000001 02 40 20 80     pb
fd000000000000000000000000000002 02 40 00 08     pb
fe800000000000000000000000000003 03 40 20 40     pa
`
	got := parseTentative([]byte(table), 2)
	if len(got) != 2 || !got[netip.MustParseAddr("fe80::f066:daff:fe00:bd55")] || !got[netip.MustParseAddr("fd00::2")] {
		t.Fatalf("tentative on 2: %v", got)
	}
}

// TestPortSockets: the sockets on port 5353 are counted from a
// /proc/net/udp table (Avahi's and ours: shared).
func TestPortSockets(t *testing.T) {
	const table = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 ffff 0
  124: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   105        0 3 2 ffff 0
  200: 0100007F:041D 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2 ffff 0
  201: 0100007F:14E90 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2 ffff 0
`
	if n := portSockets([]byte(table), 5353); n != 2 {
		t.Fatalf("port 5353: %d sockets, want 2", n)
	}
	if n := portSockets([]byte(table), 1053); n != 1 {
		t.Fatalf("port 1053: %d sockets, want 1", n)
	}
}
