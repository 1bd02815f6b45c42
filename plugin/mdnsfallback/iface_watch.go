package mdnsfallback

import (
	"net"
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
func (r *responder) watchInterfaces(done <-chan struct{}) {
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
	}
}

// checkInterfaces looks each configured interface up by name and updates
// the set joined; byName is net.InterfaceByName (tests replace it).
func (r *responder) checkInterfaces(byName func(string) (*net.Interface, error)) {
	cur := r.ifs()
	next := make(map[int]*mdnsIface, len(r.names))
	changed := false
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
		}
	}
	if changed {
		r.ifmu.Lock()
		r.ifaces = next
		r.ifmu.Unlock()
	}
}
