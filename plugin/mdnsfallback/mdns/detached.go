package mdns

import (
	"net"
	"net/netip"
	"time"
)

// Detached makes the node's responder one with no socket, on one interface
// (ifIndex, name) holding prefixes, whose packets go to sent instead of
// the network, and returns it: tests and fuzzing drive it through Handle.
// Both groups count as joined: a family is up when prefixes hold an
// address of it.
func (n *Node) Detached(ifIndex int, name string, prefixes []netip.Prefix, sent func(Packet)) *Responder {
	r := newResponder(n, []string{name})
	r.detached = true
	r.ifaces[ifIndex] = detachedIface(ifIndex, name, prefixes)
	r.sent = sent
	n.resp.Store(r)
	return r
}

func detachedIface(ifIndex int, name string, prefixes []netip.Prefix) *mdnsIface {
	i := &mdnsIface{ifi: &net.Interface{Index: ifIndex, Name: name, Flags: net.FlagMulticast},
		load: func() []netip.Prefix { return prefixes }, prefixes: prefixes, refreshed: time.Now(), joined: [2]bool{true, true}}
	i.up = [2]bool{i.linkUpLocked(fam4), i.linkUpLocked(fam6)}
	return i
}

// SetShared says whether another stack shares port 5353 (queries then ask
// for multicast replies); the interface watcher sets it from /proc/net/udp.
func (r *Responder) SetShared(v bool) { r.shared.Store(v) }

// Group is the mDNS IPv4 group; Group6 the IPv6 one.
var (
	Group  = mdnsGroup
	Group6 = mdnsGroup6
)
