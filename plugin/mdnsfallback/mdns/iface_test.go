package mdns

import (
	"errors"
	"net"
	"testing"
)

// TestCheckInterfaces: an interface that disappears leaves the set; one
// that comes back under a new index rejoins; an unchanged one is kept as
// it is.
func TestCheckInterfaces(t *testing.T) {
	r := newResponder(testNode(), []*net.Interface{{Index: 3, Name: "weave", Flags: net.FlagMulticast}, {Index: 4, Name: "eth1", Flags: net.FlagMulticast}})
	eth1 := r.ifs()[4]
	present := map[string]*net.Interface{"eth1": {Index: 4, Name: "eth1", Flags: net.FlagMulticast}}
	byName := func(n string) (*net.Interface, error) {
		if i, ok := present[n]; ok {
			return i, nil
		}
		return nil, errors.New("no such interface")
	}
	r.checkInterfaces(byName)
	if got := r.ifs(); len(got) != 1 || got[4] != eth1 {
		t.Fatalf("after weave went: %v", got)
	}
	present["weave"] = &net.Interface{Index: 9, Name: "weave", Flags: net.FlagMulticast}
	r.checkInterfaces(byName)
	if got := r.ifs(); len(got) != 2 || got[9] == nil || got[9].ifi.Name != "weave" || got[4] != eth1 {
		t.Fatalf("after weave came back as 9: %v", got)
	}
	present["eth1"] = &net.Interface{Index: 4, Name: "eth1"} // no multicast any more
	r.checkInterfaces(byName)
	if got := r.ifs(); len(got) != 1 || got[9] == nil {
		t.Fatalf("after eth1 lost multicast: %v", got)
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
