package mdns

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The interfaces mDNS runs on. Each configured interface carries mDNS over
// IPv4 (224.0.0.251) and over IPv6 (ff02::fb) apart, as Avahi and
// systemd-resolved do: a link is one interface and one family, and every
// multicast goes out on each link that is up — the family's group joined
// on the interface, and an address of the family on it (IPv6: a link-local
// one is enough, once its duplicate address detection is over). An
// interface with no IPv4 address speaks IPv6 alone.
//
// The configured interfaces are looked up every ifaceCheckEvery: one that
// does not exist yet (a bridge created after meshdns, weave or docker0 at
// boot) is joined when it appears, one that goes away is left until it
// comes back, under its new index, and a family that comes up (an address
// added, DAD over) is announced on.

// ifaceCheckEvery is how often the configured interfaces are looked up
// again.
const ifaceCheckEvery = time.Second

var (
	mdnsGroup  = netip.MustParseAddr("224.0.0.251")
	mdnsGroup6 = netip.MustParseAddr("ff02::fb")
)

// link is one interface and one address family.
type link struct {
	ifIndex int
	fam     int
}

// group is where the link's multicast goes.
func (l link) group() netip.AddrPort {
	if l.fam == fam6 {
		return netip.AddrPortFrom(mdnsGroup6, mdnsPort)
	}
	return netip.AddrPortFrom(mdnsGroup, mdnsPort)
}

// mdnsIface is one configured interface that exists, its addresses and
// the families whose group is joined on it.
type mdnsIface struct {
	ifi       *net.Interface
	load      func() []netip.Prefix // re-reads the addresses
	mu        sync.Mutex
	prefixes  []netip.Prefix // the interface's addresses (unmasked, zone-less) with their prefix lengths
	refreshed time.Time
	joined    [2]bool // by family: the group joined on it
	up        [2]bool // by family, as the watcher last saw it (see links)
}

// newIface is the interface ifi, none of its groups joined yet.
func (r *Responder) newIface(ifi *net.Interface) *mdnsIface {
	load := func() []netip.Prefix { return r.addrsOf(ifi) }
	return &mdnsIface{ifi: ifi, load: load, prefixes: load(), refreshed: time.Now()}
}

// linkUp reports whether mDNS goes out on the interface over fam: its
// group is joined and the interface has an address of the family.
func (i *mdnsIface) linkUp(fam int) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.linkUpLocked(fam)
}

func (i *mdnsIface) linkUpLocked(fam int) bool {
	if !i.joined[fam] {
		return false
	}
	for _, p := range i.prefixes {
		if famOf(p.Addr()) == fam {
			return true
		}
	}
	return false
}

// refresh re-reads the addresses and returns the families that came up
// since the last refresh.
func (i *mdnsIface) refresh(now time.Time) (cameUp []int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.prefixes, i.refreshed = i.load(), now
	for fam := range 2 {
		up := i.linkUpLocked(fam)
		if up && !i.up[fam] {
			cameUp = append(cameUp, fam)
		}
		i.up[fam] = up
	}
	return cameUp
}

// onLink reports whether src is on the interface's link: an IPv6
// link-local address, or inside one of the interface's networks (IPv4 or
// IPv6); it re-reads the interface's addresses at most once a second.
func (i *mdnsIface) onLink(src netip.Addr, now time.Time) bool {
	if src.Is6() && src.IsLinkLocalUnicast() {
		return true // fe80::/10 never crosses a router
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for pass := 0; pass < 2; pass++ {
		for _, p := range i.prefixes {
			if p.Contains(src) {
				return true
			}
		}
		if pass == 1 || now.Sub(i.refreshed) < time.Second {
			return false
		}
		i.refreshed = now
		i.prefixes = i.load()
	}
	return false
}

// broadcast reports whether src is the directed broadcast address of one
// of the interface's IPv4 networks.
func (i *mdnsIface) broadcast(src netip.Addr) bool {
	if !src.Is4() {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, p := range i.prefixes {
		if !p.Addr().Is4() || p.Bits() >= 31 || !p.Contains(src) {
			continue
		}
		a, host := p.Addr().As4(), uint32(1)<<(32-p.Bits())-1
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
		if netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) == src {
			return true
		}
	}
	return false
}

// ownAddr reports whether src is one of the interface's own addresses.
func (i *mdnsIface) ownAddr(src netip.Addr) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, p := range i.prefixes {
		if p.Addr() == src {
			return true
		}
	}
	return false
}

// ifacePrefixes returns the interface's addresses with their prefix
// lengths (not masked: each one's Addr is one of the host's addresses),
// less the IPv6 addresses still in duplicate address detection (nothing
// can be sent from them yet).
func ifacePrefixes(ifi *net.Interface) []netip.Prefix {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var tentative map[netip.Addr]bool
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() {
			if tentative == nil {
				tentative = tentativeAddrs(ifi.Index)
			}
			if tentative[ip] {
				continue
			}
		}
		ones, _ := n.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones)) // unmasked: Addr is ours
	}
	return out
}

// inet6Table is the kernel's table of IPv6 addresses with their flags.
const inet6Table = "/proc/net/if_inet6"

// tentativeAddrs returns the IPv6 addresses of the interface index that
// are tentative (in duplicate address detection) or failed it, from
// /proc/net/if_inet6 (empty when unreadable).
func tentativeAddrs(index int) map[netip.Addr]bool {
	b, err := os.ReadFile(inet6Table)
	if err != nil {
		return map[netip.Addr]bool{}
	}
	return parseTentative(b, index)
}

// parseTentative reads an if_inet6 table: address (32 hex digits),
// interface index, prefix length, scope and flags (hex), name.
func parseTentative(table []byte, index int) map[netip.Addr]bool {
	const ifaTentative, ifaDadFailed = 0x40, 0x08
	out := map[netip.Addr]bool{}
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || len(f[0]) != 32 {
			continue
		}
		idx, err1 := strconv.ParseUint(f[1], 16, 32)
		flags, err2 := strconv.ParseUint(f[4], 16, 32)
		if err1 != nil || err2 != nil || int(idx) != index || flags&(ifaTentative|ifaDadFailed) == 0 {
			continue
		}
		var a [16]byte
		for j := range a {
			v, err := strconv.ParseUint(f[0][2*j:2*j+2], 16, 8)
			if err != nil {
				break
			}
			a[j] = byte(v)
		}
		out[netip.AddrFrom16(a)] = true
	}
	return out
}

// links returns the links mDNS goes out on now, by interface index then
// family.
func (r *Responder) links() []link {
	var out []link
	for idx, i := range r.ifs() {
		for fam := range 2 {
			if i.linkUp(fam) {
				out = append(out, link{idx, fam})
			}
		}
	}
	slices.SortFunc(out, func(a, b link) int { return cmp.Or(a.ifIndex-b.ifIndex, a.fam-b.fam) })
	return out
}

// joinGroups joins the groups of the families not joined yet on i; with
// no sockets (a detached responder) every family counts as joined. It
// returns the error of the IPv4 join, if any (IPv6 is optional).
func (r *Responder) joinGroups(i *mdnsIface) error {
	var err4 error
	for fam := range 2 {
		i.mu.Lock()
		done := i.joined[fam]
		i.mu.Unlock()
		if done {
			continue
		}
		var err error
		switch s := r.mc[fam]; {
		case r.detached:
		case s == nil:
			continue // no IPv6 on this host
		default:
			err = s.join(i.ifi)
		}
		if err != nil {
			if fam == fam4 {
				err4 = err
			}
			continue
		}
		i.mu.Lock()
		i.joined[fam] = true
		i.mu.Unlock()
	}
	return err4
}

// watchInterfaces follows the configured interfaces until stop is
// closed.
func (r *Responder) watchInterfaces(stop <-chan struct{}) {
	defer r.wg.Done()
	t := time.NewTicker(ifaceCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.checkInterfaces(net.InterfaceByName)
		r.checkShared()
	}
}

// checkInterfaces looks each configured interface up by name and updates
// the set joined; byName is net.InterfaceByName (tests replace it). An
// interface that appeared, or came back under a new index, has its groups
// joined (the kernel drops a membership with its interface) and every
// local record announced on it; a family that came up on a known one
// (an address added, DAD over) is announced on too.
func (r *Responder) checkInterfaces(byName func(string) (*net.Interface, error)) {
	cur := r.ifs()
	next := make(map[int]*mdnsIface, len(r.names))
	changed := false
	var announce []link
	now := time.Now()
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
			} else if !r.waiting[name] {
				log.Infof("Interface %s does not exist yet (or has no multicast): waiting for it, mDNS on it starts when it appears", name)
			}
			r.waiting[name] = true
		case old != nil && old.ifi.Index == ifi.Index:
			next[ifi.Index] = old
			_ = r.joinGroups(old) // IPv6 enabled on it since
			for _, fam := range old.refresh(now) {
				announce = append(announce, link{ifi.Index, fam})
			}
		default:
			i := r.newIface(ifi)
			if err := r.joinGroups(i); err != nil {
				log.Warningf("Interface %s (index %d): joining %s failed, retrying: %v", name, ifi.Index, mdnsGroup, err)
				r.waiting[name] = true
				continue
			}
			changed = true
			next[ifi.Index] = i
			for _, fam := range i.refresh(now) {
				announce = append(announce, link{ifi.Index, fam})
			}
			log.Infof("Interface %s (index %d): mDNS joined, over %s", name, ifi.Index, i.familiesText())
			if r.seen[name] {
				mdnsRejoins.Inc()
			}
			r.seen[name], r.waiting[name] = true, false
		}
	}
	if changed {
		r.ifmu.Lock()
		r.ifaces = next
		r.ifmu.Unlock()
	}
	if r.opened.Load() && len(announce) > 0 {
		r.announceAll(announce) // new links, and peers may have dropped our records meanwhile
	}
}

// familiesText names the families mDNS goes out over on i.
func (i *mdnsIface) familiesText() string {
	var fs []string
	for fam := range 2 {
		if i.linkUp(fam) {
			fs = append(fs, famName[fam])
		}
	}
	if len(fs) == 0 {
		return "no family yet (no address)"
	}
	return strings.Join(fs, " and ")
}

// InterfaceState is one configured interface as the responder sees it.
type InterfaceState struct {
	Name string `json:"name"`
	// State is "joined" (the interface exists and the mDNS group of at
	// least one family is joined on it) or "missing" (it does not exist,
	// or has no multicast: waiting for it).
	State string `json:"state"`
	Index int    `json:"index,omitempty"`
	// Families are those mDNS goes out over on it: "ipv4", "ipv6" (the
	// group joined and an address of the family on the interface).
	Families []string `json:"families"`
}

// Interfaces returns the state of every configured interface, in the
// Corefile's order; nil when the responder is not open.
func (n *Node) Interfaces() []InterfaceState {
	r := n.resp.Load()
	if r == nil {
		return nil
	}
	byName := map[string]*mdnsIface{}
	for _, i := range r.ifs() {
		byName[i.ifi.Name] = i
	}
	out := make([]InterfaceState, 0, len(r.names))
	for _, name := range r.names {
		s := InterfaceState{Name: name, State: "missing", Families: []string{}}
		if i := byName[name]; i != nil {
			s.State, s.Index = "joined", i.ifi.Index
			for fam, f := range [2]string{"ipv4", "ipv6"} {
				if i.linkUp(fam) {
					s.Families = append(s.Families, f)
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// Port-sharing: the kernel's tables of UDP sockets in this network
// namespace.
var udpTables = [2]string{"/proc/net/udp", "/proc/net/udp6"}

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
// port 5353 here (Avahi), over IPv4 or IPv6: queries then ask for
// multicast replies. An unreadable IPv4 table keeps the last answer.
func (r *Responder) checkShared() {
	b, err := os.ReadFile(udpTables[fam4])
	if err != nil {
		return
	}
	shared := portSockets(b, mdnsPort) > 1
	if b, err := os.ReadFile(udpTables[fam6]); err == nil && portSockets(b, mdnsPort) > 1 {
		shared = true
	}
	if r.shared.Swap(shared) != shared {
		log.Infof("Port %d shared with another mDNS stack: %t (queries ask for %s replies)", mdnsPort, shared, map[bool]string{true: "multicast", false: "unicast"}[shared])
	}
}
