package endpointsvc

import (
	"net/netip"
	"testing"
)

func TestStateHash(t *testing.T) {
	base := func() *State {
		return &State{
			Services: []Service{{ID: "default/web", Name: "web", Namespace: "default", Status: "active", Ports: []ServicePort{{Name: "http", Protocol: "tcp", TargetPort: 80, PublishedPort: 30080}}}},
			Tasks:    []Task{{ID: "t1", ServiceID: "default/web", NodeID: "n1", DesiredStatus: StatusRunning, ActualStatus: StatusHealthy, Address: "10.0.0.1"}},
			Nodes:    []Node{{ID: "n1", Name: "n1", Address: "192.0.2.1", Status: "ready"}},
		}
	}
	h := base().hash()
	if base().hash() != h {
		t.Fatal("the same state hashes differently")
	}
	changes := map[string]func(*State){
		"service port":  func(s *State) { s.Services[0].Ports[0].PublishedPort = 30081 },
		"task status":   func(s *State) { s.Tasks[0].ActualStatus = StatusUnhealthy },
		"task address":  func(s *State) { s.Tasks[0].Address = "10.0.0.2" },
		"task port":     func(s *State) { s.Tasks[0].Ports = []TaskPort{{ContainerPort: 80}} },
		"node status":   func(s *State) { s.Nodes[0].Status = "down" },
		"extra node":    func(s *State) { s.Nodes = append(s.Nodes, Node{ID: "n2"}) },
		"no tasks":      func(s *State) { s.Tasks = nil },
		"string bounds": func(s *State) { s.Services[0].Name, s.Services[0].Namespace = "webd", "efault" },
	}
	for name, change := range changes {
		st := base()
		change(st)
		if st.hash() == h {
			t.Errorf("%s: same hash", name)
		}
	}
}

func TestToAddrsPacked(t *testing.T) {
	var ips []netip.Addr
	for _, s := range []string{"fd00::2", "10.0.0.2", "::ffff:10.0.0.1", "10.0.0.2", "fd00::1", "10.0.0.1"} {
		ips = append(ips, netip.MustParseAddr(s))
	}
	a := toAddrs(ips)
	if a.n4() != 2 || a.n6() != 2 {
		t.Fatalf("n4 %d n6 %d, want 2 and 2", a.n4(), a.n6())
	}
	got := []string{a.ip4(0).String(), a.ip4(1).String(), a.ip6(0).String(), a.ip6(1).String()}
	want := []string{"10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("addresses %v, want %v", got, want)
		}
	}
	if ip := a.ip4(0); cap(ip) != 4 {
		t.Errorf("record slice has capacity %d: an append could overwrite the next address", cap(ip))
	}
	if b := appendAddrs(nil, a); len(b) != 4 || b[0] != netip.MustParseAddr("10.0.0.1") || b[3] != netip.MustParseAddr("fd00::2") {
		t.Errorf("appendAddrs: %v", b)
	}
	if e := toAddrs(nil); !e.empty() {
		t.Error("no addresses must be empty")
	}
}
