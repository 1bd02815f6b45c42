package mdns

import (
	"net"
	"net/netip"
	"time"
)

// Detached makes the node's responder one with no socket, on one interface
// (ifIndex, name) holding prefixes, whose packets go to sent instead of
// the network, and returns it: tests and fuzzing drive it through Handle.
func (n *Node) Detached(ifIndex int, name string, prefixes []netip.Prefix, sent func(Packet)) *Responder {
	r := newResponder(n, nil)
	r.names = []string{name}
	r.ifaces[ifIndex] = &mdnsIface{ifi: &net.Interface{Index: ifIndex, Name: name},
		load: func() []netip.Prefix { return prefixes }, prefixes: prefixes, refreshed: time.Now()}
	r.sent = sent
	n.resp.Store(r)
	return r
}

// SetShared says whether another stack shares port 5353 (queries then ask
// for multicast replies); the interface watcher sets it from /proc/net/udp.
func (r *Responder) SetShared(v bool) { r.shared.Store(v) }

// Group is the mDNS IPv4 group.
var Group = mdnsGroup
