package nodelocal

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// dnsPort is the port the bypass is for.
const dnsPort = 53

// Chain names in each of our tables.
const (
	chainPrerouting = "prerouting" // queries to the addresses, hook prerouting
	chainOutput     = "output"     // the node-local's replies, hook output
)

// ruleSpec is one rule of the bypass: in prerouting, packets to addr,
// proto, port 53, for which a socket bound to addr exists; in output,
// packets from addr, proto, port 53. Either way: counted, then untracked.
type ruleSpec struct {
	chain string
	addr  netip.Addr
	proto byte // unix.IPPROTO_UDP or unix.IPPROTO_TCP
}

// bypassSpecs returns the rules for addrs: per address and protocol (UDP
// first), one in prerouting and one in output.
func bypassSpecs(addrs []netip.Addr) []ruleSpec {
	var out []ruleSpec
	for _, chain := range []string{chainPrerouting, chainOutput} {
		for _, a := range addrs {
			for _, p := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				out = append(out, ruleSpec{chain: chain, addr: a, proto: p})
			}
		}
	}
	return out
}

// family is the nftables family of the spec's table.
func (s ruleSpec) family() nftables.TableFamily {
	if s.addr.Is4() {
		return nftables.TableFamilyIPv4
	}
	return nftables.TableFamilyIPv6
}

func (s ruleSpec) protoName() string {
	if s.proto == unix.IPPROTO_TCP {
		return "tcp"
	}
	return "udp"
}

// String renders the rule as nft lists it (iptables' equivalent of the
// prerouting rule: -d ADDR -p udp --dport 53 -m socket -j NOTRACK).
func (s ruleSpec) String() string {
	ipw := "ip"
	if s.addr.Is6() {
		ipw = "ip6"
	}
	if s.chain == chainPrerouting {
		return fmt.Sprintf("%s %s %s: %s daddr %s %s dport %d xt match socket counter notrack",
			ipw, TableName, s.chain, ipw, s.addr, s.protoName(), dnsPort)
	}
	return fmt.Sprintf("%s %s %s: %s saddr %s %s sport %d counter notrack",
		ipw, TableName, s.chain, ipw, s.addr, s.protoName(), dnsPort)
}

// exprs returns the rule's expressions: the address (the destination in
// prerouting, the source in output), the layer-4 protocol, the port, in
// prerouting the socket match, then a counter and notrack.
func (s ruleSpec) exprs() []expr.Any {
	var off, portOff uint32
	switch {
	case s.chain == chainPrerouting && s.addr.Is4():
		off, portOff = 16, 2 // IPv4 destination, destination port
	case s.chain == chainPrerouting:
		off, portOff = 24, 2 // IPv6 destination
	case s.addr.Is4():
		off, portOff = 12, 0 // IPv4 source, source port
	default:
		off, portOff = 8, 0 // IPv6 source
	}
	addr := s.addr.AsSlice()
	out := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{s.proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: portOff, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(dnsPort)},
	}
	if s.chain == chainPrerouting {
		out = append(out, socketMatch())
	}
	return append(out, &expr.Counter{}, &expr.Notrack{})
}

// socketMatch is iptables' `-m socket` (xt_socket revision 1, no flags)
// through nftables' compat layer: true when a socket exists for the
// packet's destination (a listener or a connection, UDP or TCP, full or
// not: the handshake's last ACK meets a request socket), except a listener
// bound to the wildcard address. nft's own `socket wildcard 0` fails on
// request sockets, which would leave the handshake's ACK to kube-proxy's
// DNAT; iptables' --nowildcard would accept wildcard listeners (another
// DNS server on *:53 would catch the queries of a node whose node-local is
// gone). The info is xt_socket_mtinfo1 (one flags byte), padded to
// XT_ALIGN as the kernel expects.
func socketMatch() *expr.Match {
	info := xt.Unknown(make([]byte, 8))
	return &expr.Match{Name: "socket", Rev: 1, Info: &info}
}

// ourTables returns our table of each family.
func ourTables() []*nftables.Table {
	return []*nftables.Table{
		{Name: TableName, Family: nftables.TableFamilyIPv4},
		{Name: TableName, Family: nftables.TableFamilyIPv6},
	}
}

// ourChains returns the two chains of table t: prerouting and output, both
// at the raw priority (before conntrack, where notrack acts).
func ourChains(t *nftables.Table) map[string]*nftables.Chain {
	return map[string]*nftables.Chain{
		chainPrerouting: {Name: chainPrerouting, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw},
		chainOutput: {Name: chainOutput, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRaw},
	}
}

// specOf reads the spec back from a rule's expressions as exprs writes
// them (the address and protocol from the first two comparisons).
func specOf(chain string, exprs []expr.Any) (ruleSpec, bool) {
	var cmps [][]byte
	for _, e := range exprs {
		if c, ok := e.(*expr.Cmp); ok {
			cmps = append(cmps, c.Data)
		}
	}
	if len(cmps) < 2 || len(cmps[1]) != 1 {
		return ruleSpec{}, false
	}
	a, ok := netip.AddrFromSlice(cmps[0])
	if !ok {
		return ruleSpec{}, false
	}
	return ruleSpec{chain: chain, addr: a, proto: cmps[1][0]}, true
}
