package nodelocal

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// loopbackIndex is lo's interface index, the same in every network
// namespace (the kernel's LOOPBACK_IFINDEX).
const loopbackIndex = 1

// dialRoute opens an rtnetlink connection in h's namespace.
func (h Host) dialRoute() (*netlink.Conn, error) {
	return netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: h.NetNS})
}

// addrMessage is an RTM_NEWADDR or RTM_DELADDR request for a on lo, as
// `ip addr add|del ADDR/32 dev lo` sends it: an ifaddrmsg (family, prefix
// length, flags, scope, index) and the address as IFA_LOCAL and
// IFA_ADDRESS. IPv6 addresses skip duplicate address detection, so they
// can be bound at once.
func addrMessage(typ netlink.HeaderType, flags netlink.HeaderFlags, a netip.Addr) (netlink.Message, error) {
	family, ifaFlags := byte(unix.AF_INET), byte(0)
	if a.Is6() {
		family, ifaFlags = unix.AF_INET6, unix.IFA_F_NODAD
	}
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.IFA_LOCAL, a.AsSlice())
	ae.Bytes(unix.IFA_ADDRESS, a.AsSlice())
	attrs, err := ae.Encode()
	if err != nil {
		return netlink.Message{}, err
	}
	hdr := []byte{family, byte(a.BitLen()), ifaFlags, unix.RT_SCOPE_UNIVERSE, 0, 0, 0, 0}
	binary.NativeEndian.PutUint32(hdr[4:], loopbackIndex)
	return netlink.Message{
		Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Acknowledge | flags},
		Data:   append(hdr, attrs...),
	}, nil
}

// addToLoopback adds a to lo; added is false when lo had it already.
func addToLoopback(c *netlink.Conn, a netip.Addr) (added bool, err error) {
	m, err := addrMessage(unix.RTM_NEWADDR, netlink.Create|netlink.Excl, a)
	if err != nil {
		return false, err
	}
	_, err = c.Execute(m)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	return err == nil, err
}

// removeFromLoopback removes a from lo; removed is false when lo did not
// have it.
func removeFromLoopback(c *netlink.Conn, a netip.Addr) (removed bool, err error) {
	m, err := addrMessage(unix.RTM_DELADDR, 0, a)
	if err != nil {
		return false, err
	}
	_, err = c.Execute(m)
	if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	return err == nil, err
}
