package endpointsvc

import (
	"net"
	"net/netip"
	"sort"
)

// table is the immutable snapshot ServeDNS reads through an atomic pointer.
// It is built from one State by buildTable and never changed afterwards.
// Keys are lowercased: namespace and service names, node names.
type table struct {
	services  map[svcKey]*svcEntry
	nodes     map[string]*nodeEntry
	serial    uint32 // SOA serial
	nServices int
	nEndpts   int
}

type svcKey struct{ namespace, name string }

type portKey struct{ name, proto string }

// addrs are distinct addresses in a fixed order (sorted bytewise).
type addrs struct {
	v4 []net.IP
	v6 []net.IP
}

func (a addrs) empty() bool { return len(a.v4) == 0 && len(a.v6) == 0 }

type svcEntry struct {
	addrs                         // the advertise addresses of the endpoints' nodes
	srv   []srvTarget             // one per endpoint and port, every port
	ports map[portKey][]srvTarget // named ports; a key exists for every named service port
}

type srvTarget struct {
	node *nodeEntry
	port uint16
}

type nodeEntry struct {
	name    string   // lowercased node name, without .node.<zone>
	targets []string // <name>.node.<zone> for each zone of the plugin, in order
	addrs
}

// buildTable turns a validated state into a table for zones. resolved holds
// the addresses of hostname advertise addresses (fully qualified,
// lowercased); a hostname missing from it contributes no address.
func buildTable(st *State, zones []string, includeUnhealthy bool, resolved map[string][]netip.Addr, serial uint32) *table {
	t := &table{
		services: make(map[svcKey]*svcEntry, len(st.Services)),
		nodes:    make(map[string]*nodeEntry, len(st.Nodes)),
		serial:   serial,
	}
	byID := make(map[string]*nodeEntry, len(st.Nodes))
	for i := range st.Nodes {
		n := &st.Nodes[i]
		e := &nodeEntry{name: n.Name, addrs: nodeAddrs(n.Address, resolved), targets: make([]string, len(zones))}
		for i, z := range zones {
			e.targets[i] = n.Name + ".node." + z
		}
		t.nodes[n.Name] = e
		byID[n.ID] = e
	}
	for _, se := range EndpointSet(st, includeUnhealthy) {
		svc := se.Service
		e := &svcEntry{}
		var ips []netip.Addr
		for _, ep := range se.Endpoints {
			ne := byID[ep.Node.ID]
			ips = appendAddrs(ips, ne.addrs)
			for _, sp := range svc.Ports {
				port := hostPort(sp, ep.Task)
				if port == 0 {
					continue
				}
				st := srvTarget{node: ne, port: port}
				e.srv = append(e.srv, st)
				if sp.Name != "" {
					if e.ports == nil {
						e.ports = make(map[portKey][]srvTarget)
					}
					k := portKey{sp.Name, sp.Protocol}
					e.ports[k] = append(e.ports[k], st)
				}
			}
		}
		for _, sp := range svc.Ports {
			if sp.Name == "" {
				continue
			}
			if e.ports == nil {
				e.ports = make(map[portKey][]srvTarget)
			}
			k := portKey{sp.Name, sp.Protocol}
			e.ports[k] = sortTargets(e.ports[k])
		}
		e.srv = sortTargets(e.srv)
		e.addrs = toAddrs(ips)
		t.services[svcKey{svc.Namespace, svc.Name}] = e
		t.nServices++
		t.nEndpts += len(se.Endpoints)
	}
	return t
}

// hostPort is the port clients reach task t's service port sp on: the
// task's host port for it, else the service's published port, else 0 (not
// reachable on the node; no SRV record).
func hostPort(sp ServicePort, t *Task) uint16 {
	for _, tp := range t.Ports {
		if tp.Protocol != sp.Protocol {
			continue
		}
		if tp.ContainerPort == sp.TargetPort || (sp.Name != "" && tp.Name == sp.Name) {
			if tp.HostPort != 0 {
				return uint16(tp.HostPort)
			}
			break
		}
	}
	return uint16(sp.PublishedPort)
}

// nodeAddrs returns the addresses of an advertise address: the IP itself,
// or what its hostname resolved to.
func nodeAddrs(address string, resolved map[string][]netip.Addr) addrs {
	ip, host, err := ParseAddress(address)
	if err != nil {
		return addrs{}
	}
	if host != "" {
		return toAddrs(append([]netip.Addr(nil), resolved[host]...)) // copy: toAddrs sorts
	}
	return toAddrs([]netip.Addr{ip})
}

func appendAddrs(ips []netip.Addr, a addrs) []netip.Addr {
	for _, ip := range a.v4 {
		x, _ := netip.AddrFromSlice(ip)
		ips = append(ips, x.Unmap())
	}
	for _, ip := range a.v6 {
		x, _ := netip.AddrFromSlice(ip)
		ips = append(ips, x)
	}
	return ips
}

// toAddrs sorts and deduplicates ips and splits them by family.
func toAddrs(ips []netip.Addr) addrs {
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
	var a addrs
	for i, ip := range ips {
		if i > 0 && ip == ips[i-1] {
			continue
		}
		if ip.Is4() || ip.Is4In6() {
			b := ip.Unmap().As4()
			a.v4 = append(a.v4, net.IP(b[:]))
		} else {
			b := ip.As16()
			a.v6 = append(a.v6, net.IP(b[:]))
		}
	}
	return a
}

// sortTargets orders targets by node name then port and drops duplicates
// (two tasks on one node reached through the same published port).
func sortTargets(ts []srvTarget) []srvTarget {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].node.name != ts[j].node.name {
			return ts[i].node.name < ts[j].node.name
		}
		return ts[i].port < ts[j].port
	})
	out := ts[:0]
	for i, x := range ts {
		if i > 0 && x == ts[i-1] {
			continue
		}
		out = append(out, x)
	}
	return out
}

// equalAddrs reports whether two resolution results are the same.
func equalAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
