package mdns

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// ifaceCheckEvery is how often the configured interfaces are looked up
// again.
const ifaceCheckEvery = time.Second

// watchInterfaces follows the configured interfaces until done is closed:
// one that is removed (a bridge that restarts) leaves the set, and one that
// appears again, under a new index, joins the mDNS group again and comes
// back, without a reload. The kernel drops a group membership with its
// interface, so a re-created interface must be joined anew.
func (r *Responder) watchInterfaces(done <-chan struct{}) {
	defer close(r.watched)
	t := time.NewTicker(ifaceCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		r.checkInterfaces(net.InterfaceByName)
		r.checkShared()
	}
}

// checkInterfaces looks each configured interface up by name and updates
// the set joined; byName is net.InterfaceByName (tests replace it).
func (r *Responder) checkInterfaces(byName func(string) (*net.Interface, error)) {
	cur := r.ifs()
	next := make(map[int]*mdnsIface, len(r.names))
	changed := false
	var rejoined []int
	for _, name := range r.names {
		var old *mdnsIface
		for _, i := range cur {
			if i.ifi.Name == name {
				old = i
			}
		}
		ifi, err := byName(name)
		switch {
		case err != nil || ifi.Flags&net.FlagMulticast == 0:
			if old != nil {
				changed = true
				log.Warningf("Interface %s is gone; mDNS on it resumes when it is back", name)
			}
		case old != nil && old.ifi.Index == ifi.Index:
			next[ifi.Index] = old
		default:
			if r.pc != nil {
				if err := r.pc.JoinGroup(ifi, &net.UDPAddr{IP: mdnsGroup.AsSlice()}); err != nil {
					log.Warningf("Interface %s is back (index %d) but joining %s failed, retrying: %v", name, ifi.Index, mdnsGroup, err)
					continue
				}
			}
			changed = true
			next[ifi.Index] = newIface(ifi)
			log.Infof("Interface %s is back (index %d): mDNS joined again", name, ifi.Index)
			mdnsRejoins.Inc()
			rejoined = append(rejoined, ifi.Index)
		}
	}
	if changed {
		r.ifmu.Lock()
		r.ifaces = next
		r.ifmu.Unlock()
	}
	for _, idx := range rejoined {
		r.announceAll(idx) // peers may have dropped our records meanwhile
	}
}

// udpTable is the kernel's table of IPv4 UDP sockets in this network
// namespace.
const udpTable = "/proc/net/udp"

// portSockets counts the sockets bound to UDP port in a /proc/net/udp
// table (its local_address column is ADDR:PORT, both in hex).
func portSockets(table []byte, port int) int {
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasSuffix(f[1], want) {
			n++
		}
	}
	return n
}

// checkShared sets r.shared when another socket than ours is bound to
// port 5353 here (Avahi): queries then ask for multicast replies. An
// unreadable table keeps the last answer.
func (r *Responder) checkShared() {
	b, err := os.ReadFile(udpTable)
	if err != nil {
		return
	}
	shared := portSockets(b, mdnsPort) > 1
	if r.shared.Swap(shared) != shared {
		log.Infof("Port %d shared with another mDNS stack: %t (queries ask for %s replies)", mdnsPort, shared, map[bool]string{true: "multicast", false: "unicast"}[shared])
	}
}
