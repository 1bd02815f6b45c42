package mdnsfallback

import (
	"errors"
	"net"
	"testing"
)

// TestCheckInterfaces: an interface that disappears leaves the set; one
// that comes back under a new index rejoins; an unchanged one is kept as
// it is.
func TestCheckInterfaces(t *testing.T) {
	r := newResponder(newTestPlugin(nil), []*net.Interface{{Index: 3, Name: "weave", Flags: net.FlagMulticast}, {Index: 4, Name: "eth1", Flags: net.FlagMulticast}})
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
