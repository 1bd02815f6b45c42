package nodelocal

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func TestParseAddrs(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the addresses joined by ","
		wantErr string
	}{
		{in: "169.254.20.10,10.96.0.10", want: "169.254.20.10,10.96.0.10"},
		{in: " 169.254.20.10 , fd00::10 ", want: "169.254.20.10,fd00::10"},
		{in: "::ffff:10.96.0.10", want: "10.96.0.10"},
		{in: "", wantErr: "no address"},
		{in: "10.96.0.10,", wantErr: `"" is not an IP address`},
		{in: "10.96.0.300", wantErr: "not an IP address"},
		{in: "10.96.0.10/32", wantErr: "not an IP address"},
		{in: "fe80::1%eth0", wantErr: "no zone"},
		{in: "0.0.0.0", wantErr: "not a unicast address"},
		{in: "::", wantErr: "not a unicast address"},
		{in: "127.0.0.1", wantErr: "not a unicast address"},
		{in: "224.0.0.251", wantErr: "not a unicast address"},
		{in: "255.255.255.255", wantErr: "not a unicast address"},
		{in: "10.96.0.10,10.96.0.10", wantErr: "given twice"},
		{in: "10.96.0.10,::ffff:10.96.0.10", wantErr: "given twice"},
	}
	for _, tc := range tests {
		got, err := ParseAddrs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseAddrs(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if err != nil || strings.Join(s, ",") != tc.want {
			t.Errorf("ParseAddrs(%q) = %v, %v; want %s", tc.in, s, err, tc.want)
		}
	}
}

func FuzzParseAddrs(f *testing.F) {
	for _, s := range []string{"169.254.20.10,10.96.0.10", "fd00::10", "::ffff:1.2.3.4", "", ",", "1.1.1.1,1.1.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addrs, err := ParseAddrs(s)
		if err != nil {
			return
		}
		// what parsed is unicast, once each, and parses again to itself
		var parts []string
		for _, a := range addrs {
			if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("ParseAddrs(%q) let %v through", s, a)
			}
			parts = append(parts, a.String())
		}
		again, err := ParseAddrs(strings.Join(parts, ","))
		if err != nil || len(again) != len(addrs) {
			t.Fatalf("ParseAddrs(%q) = %v, which parses again to %v, %v", s, addrs, again, err)
		}
	})
}

func TestBypassSpecs(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("fd00::10")}
	var got []string
	for _, s := range bypassSpecs(addrs) {
		got = append(got, s.String())
	}
	want := []string{
		"ip meshdns-node-local prerouting: ip daddr 169.254.20.10 udp dport 53 xt match socket counter notrack",
		"ip meshdns-node-local prerouting: ip daddr 169.254.20.10 tcp dport 53 xt match socket counter notrack",
		"ip6 meshdns-node-local prerouting: ip6 daddr fd00::10 udp dport 53 xt match socket counter notrack",
		"ip6 meshdns-node-local prerouting: ip6 daddr fd00::10 tcp dport 53 xt match socket counter notrack",
		"ip meshdns-node-local output: ip saddr 169.254.20.10 udp sport 53 counter notrack",
		"ip meshdns-node-local output: ip saddr 169.254.20.10 tcp sport 53 counter notrack",
		"ip6 meshdns-node-local output: ip6 saddr fd00::10 udp sport 53 counter notrack",
		"ip6 meshdns-node-local output: ip6 saddr fd00::10 tcp sport 53 counter notrack",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRuleExprs checks the expressions against the header layouts: the
// address offset of each family and direction, the port offset, the
// socket match only before the input, and notrack last.
func TestRuleExprs(t *testing.T) {
	tests := []struct {
		spec             ruleSpec
		addrOff, portOff uint32
		socket           bool
	}{
		{ruleSpec{chainPrerouting, netip.MustParseAddr("10.96.0.10"), unix.IPPROTO_UDP}, 16, 2, true},
		{ruleSpec{chainPrerouting, netip.MustParseAddr("fd00::10"), unix.IPPROTO_TCP}, 24, 2, true},
		{ruleSpec{chainOutput, netip.MustParseAddr("10.96.0.10"), unix.IPPROTO_TCP}, 12, 0, false},
		{ruleSpec{chainOutput, netip.MustParseAddr("fd00::10"), unix.IPPROTO_UDP}, 8, 0, false},
	}
	for _, tc := range tests {
		ex := tc.spec.exprs()
		addr := ex[0].(*expr.Payload)
		port := ex[4].(*expr.Payload)
		if addr.Base != expr.PayloadBaseNetworkHeader || addr.Offset != tc.addrOff || int(addr.Len) != tc.spec.addr.BitLen()/8 {
			t.Errorf("%s: address payload %+v", tc.spec, addr)
		}
		if !bytes.Equal(ex[1].(*expr.Cmp).Data, tc.spec.addr.AsSlice()) || ex[3].(*expr.Cmp).Data[0] != tc.spec.proto {
			t.Errorf("%s: comparisons %+v %+v", tc.spec, ex[1], ex[3])
		}
		if port.Base != expr.PayloadBaseTransportHeader || port.Offset != tc.portOff || port.Len != 2 ||
			!bytes.Equal(ex[5].(*expr.Cmp).Data, []byte{0, 53}) {
			t.Errorf("%s: port %+v %+v", tc.spec, port, ex[5])
		}
		m, hasSocket := ex[6].(*expr.Match)
		if hasSocket != tc.socket || (hasSocket && (m.Name != "socket" || m.Rev != 1)) {
			t.Errorf("%s: expression 6 is %#v", tc.spec, ex[6])
		}
		if _, ok := ex[len(ex)-1].(*expr.Notrack); !ok {
			t.Errorf("%s: the last expression is %#v, want notrack", tc.spec, ex[len(ex)-1])
		}
		if back, ok := specOf(tc.spec.chain, ex); !ok || back != tc.spec {
			t.Errorf("%s: read back as %v (%v)", tc.spec, back, ok)
		}
	}
}

// TestAddrMessage checks the rtnetlink request against the layout of
// struct ifaddrmsg and `ip addr add ADDR/32 dev lo`.
func TestAddrMessage(t *testing.T) {
	for _, tc := range []struct {
		addr         string
		family, bits byte
		flags        byte
	}{
		{"169.254.20.10", unix.AF_INET, 32, 0},
		{"fd00::10", unix.AF_INET6, 128, unix.IFA_F_NODAD},
	} {
		a := netip.MustParseAddr(tc.addr)
		m, err := addrMessage(unix.RTM_NEWADDR, netlink.Create|netlink.Excl, a)
		if err != nil {
			t.Fatal(err)
		}
		d := m.Data
		if m.Header.Type != unix.RTM_NEWADDR || m.Header.Flags&(netlink.Create|netlink.Excl|netlink.Acknowledge) != netlink.Create|netlink.Excl|netlink.Acknowledge {
			t.Errorf("%s: header %+v", a, m.Header)
		}
		if d[0] != tc.family || d[1] != tc.bits || d[2] != tc.flags || d[3] != unix.RT_SCOPE_UNIVERSE || binary.NativeEndian.Uint32(d[4:8]) != 1 {
			t.Errorf("%s: ifaddrmsg % x", a, d[:8])
		}
		ad, err := netlink.NewAttributeDecoder(d[8:])
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint16]bool{}
		for ad.Next() {
			if !bytes.Equal(ad.Bytes(), a.AsSlice()) {
				t.Errorf("%s: attribute %d = % x", a, ad.Type(), ad.Bytes())
			}
			seen[ad.Type()] = true
		}
		if !seen[unix.IFA_LOCAL] || !seen[unix.IFA_ADDRESS] || len(seen) != 2 {
			t.Errorf("%s: attributes %v, want IFA_LOCAL and IFA_ADDRESS", a, seen)
		}
	}
}
