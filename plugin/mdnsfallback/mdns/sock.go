package mdns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// The responder's sockets: per address family, one bound to port 5353
// (shared with another stack through SO_REUSEADDR) that joins the group on
// each interface, and one on an ephemeral port for the one-shot queries.
// IPv4 is required; IPv6 is used where the host has it.

// Address families, as indexes of the responder's socket pairs.
const (
	fam4 = 0
	fam6 = 1
)

func famOf(a netip.Addr) int {
	if a.Is6() && !a.Is4In6() {
		return fam6
	}
	return fam4
}

var famName = [2]string{"IPv4", "IPv6"}

// sock is one UDP socket of the responder.
type sock interface {
	// readFrom reads a packet; in is how it came (Src zone-less, TTL is
	// its IP TTL or hop limit).
	readFrom(b []byte) (n int, in Inbound, err error)
	// writeTo sends b to dst out of the interface ifIndex.
	writeTo(b []byte, ifIndex int, dst netip.AddrPort) error
	// join joins the family's mDNS group on ifi.
	join(ifi *net.Interface) error
	close() error
}

func reuseAddr(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}); err != nil {
		return err
	}
	return serr
}

// listen opens a socket of the family on port (0: an ephemeral one; 5353
// with SO_REUSEADDR). An IPv6 socket takes IPv6 only.
func listen(fam, port int) (sock, error) {
	lc := net.ListenConfig{}
	if port != 0 {
		lc.Control = reuseAddr
	}
	network, addr := "udp4", fmt.Sprintf("0.0.0.0:%d", port)
	if fam == fam6 {
		network, addr = "udp6", fmt.Sprintf("[::]:%d", port)
	}
	c, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		return nil, err
	}
	if fam == fam4 {
		p := ipv4.NewPacketConn(c)
		if err := p.SetControlMessage(ipv4.FlagInterface|ipv4.FlagDst|ipv4.FlagTTL, true); err != nil {
			c.Close()
			return nil, fmt.Errorf("control messages: %w", err)
		}
		_ = p.SetMulticastTTL(255)
		_ = p.SetTTL(255)
		_ = p.SetMulticastLoopback(true)
		return &sock4{c: c, p: p}, nil
	}
	p := ipv6.NewPacketConn(c)
	if err := p.SetControlMessage(ipv6.FlagInterface|ipv6.FlagDst|ipv6.FlagHopLimit, true); err != nil {
		c.Close()
		return nil, fmt.Errorf("control messages: %w", err)
	}
	_ = p.SetMulticastHopLimit(255)
	_ = p.SetHopLimit(255)
	_ = p.SetMulticastLoopback(true)
	return &sock6{c: c, p: p}, nil
}

type sock4 struct {
	c net.PacketConn
	p *ipv4.PacketConn
}

func (s *sock4) readFrom(b []byte) (int, Inbound, error) {
	n, cm, src, err := s.p.ReadFrom(b)
	in := Inbound{Dst: mdnsGroup}
	if err != nil {
		return 0, in, err
	}
	if cm != nil {
		in.IfIndex, in.TTL = cm.IfIndex, cm.TTL
		if d, ok := netip.AddrFromSlice(cm.Dst); ok {
			in.Dst = d.Unmap()
		}
	}
	in.Src = srcOf(src)
	return n, in, nil
}

func (s *sock4) writeTo(b []byte, ifIndex int, dst netip.AddrPort) error {
	_, err := s.p.WriteTo(b, &ipv4.ControlMessage{IfIndex: ifIndex}, net.UDPAddrFromAddrPort(dst))
	return err
}

func (s *sock4) join(ifi *net.Interface) error {
	return s.p.JoinGroup(ifi, &net.UDPAddr{IP: mdnsGroup.AsSlice()})
}

func (s *sock4) close() error { return s.c.Close() }

type sock6 struct {
	c net.PacketConn
	p *ipv6.PacketConn
}

func (s *sock6) readFrom(b []byte) (int, Inbound, error) {
	n, cm, src, err := s.p.ReadFrom(b)
	in := Inbound{Dst: mdnsGroup6}
	if err != nil {
		return 0, in, err
	}
	if cm != nil {
		in.IfIndex, in.TTL = cm.IfIndex, cm.HopLimit
		if d, ok := netip.AddrFromSlice(cm.Dst); ok {
			in.Dst = d
		}
	}
	in.Src = srcOf(src)
	return n, in, nil
}

// writeTo sends out of ifIndex (IPV6_PKTINFO), which is also the zone of
// a link-local destination.
func (s *sock6) writeTo(b []byte, ifIndex int, dst netip.AddrPort) error {
	_, err := s.p.WriteTo(b, &ipv6.ControlMessage{IfIndex: ifIndex}, net.UDPAddrFromAddrPort(dst))
	return err
}

func (s *sock6) join(ifi *net.Interface) error {
	return s.p.JoinGroup(ifi, &net.UDPAddr{IP: mdnsGroup6.AsSlice()})
}

func (s *sock6) close() error { return s.c.Close() }

// srcOf is a packet's source without its zone (the interface index says
// it) and with an IPv4-mapped address unmapped.
func srcOf(a net.Addr) netip.AddrPort {
	ua, ok := a.(*net.UDPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	ap := ua.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}
