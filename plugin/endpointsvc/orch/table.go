package orch

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/pkg/pmap"
)

// Table is the immutable table ServeDNS reads through an atomic pointer.
// It is built from one State by BuildTable, or from another table and a
// Patch by Patched, and never changed afterwards. Its maps are persistent
// (pmap): a patch copies only the paths to what it changes. Keys are
// lowercased: namespace and service names, node names.
type Table struct {
	services   *pmap.Map[SvcKey, *svcEntry]
	nodes      *pmap.Map[string, *nodeEntry]
	nServices  int
	nEndpts    int
	nConflicts int // services with more than one CNAME candidate
}

// SvcKey names a service.
type SvcKey struct{ Namespace, Name string }

// compare orders keys by namespace, then name.
func (k SvcKey) compare(o SvcKey) int {
	return feed.CompareNames(k.Namespace, k.Name, o.Namespace, o.Name)
}

type portKey struct{ name, proto string }

// Services, Endpoints and Conflicts are the table's figures: services,
// the endpoints the predicate admitted, services (endpoint mode) with
// more than one CNAME candidate.
func (t *Table) Services() int  { return t.nServices }
func (t *Table) Endpoints() int { return t.nEndpts }
func (t *Table) Conflicts() int { return t.nConflicts }

// addrs are distinct addresses in a fixed order (sorted bytewise), packed
// end to end (4 bytes per IPv4 address, 16 per IPv6 address) in one
// allocation: ServeDNS slices records out of them without copying.
type addrs struct {
	v4 []byte
	v6 []byte
}

func (a addrs) empty() bool { return len(a.v4) == 0 && len(a.v6) == 0 }

// ip4 and ip6 return address i of a family; the capacity is capped, so no
// append through a record can reach the next address.
func (a addrs) ip4(i int) net.IP { return net.IP(a.v4[4*i : 4*i+4 : 4*i+4]) }
func (a addrs) ip6(i int) net.IP { return net.IP(a.v6[16*i : 16*i+16 : 16*i+16]) }
func (a addrs) n4() int          { return len(a.v4) / 4 }
func (a addrs) n6() int          { return len(a.v6) / 16 }

type svcEntry struct {
	addrs             // node mode: the endpoints' nodes' advertise addresses; endpoint mode: the endpoints' own
	cname string      // endpoint mode, FQDN endpoints only: the lexicographically first FQDN
	srv   []srvTarget // one per endpoint and port, every port
	ports []namedPort // one per named service port, in the service's order (few: a linear scan beats a map)

	admitted int32 // endpoints the predicate admitted
	conflict bool  // endpoint mode: more than one CNAME candidate, or FQDNs beside IPs
}

// namedPort is a named service port and its SRV targets.
type namedPort struct {
	key     portKey
	targets []srvTarget
}

// port returns the targets of named port k and whether the port exists.
func (e *svcEntry) port(k portKey) ([]srvTarget, bool) {
	for i := range e.ports {
		if e.ports[i].key == k {
			return e.ports[i].targets, true
		}
	}
	return nil, false
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

// BuildTable turns a validated state into a table for zones. In endpoint
// mode a service's addresses are its endpoints' own: IPs, or, when it has
// only FQDN endpoints, one CNAME to the lexicographically first FQDN (more
// than one candidate, or FQDNs beside IPs, counts as a conflict). resolved holds
// the addresses of hostname advertise addresses (fully qualified,
// lowercased); a hostname missing from it contributes no address.
func BuildTable(st *State, zones []string, includeUnhealthy, endpointMode bool, resolved map[string][]netip.Addr) *Table {
	t := &Table{}
	byID := newIndex[*nodeEntry](len(st.Nodes))
	names := make([]string, 0, len(st.Nodes))
	entries := make([]*nodeEntry, 0, len(st.Nodes))
	for i := range st.Nodes {
		n := &st.Nodes[i]
		e := newNodeEntry(n, zones, resolved)
		byID.add(n.ID, e)
		names, entries = append(names, n.Name), append(entries, e)
	}
	slices.SortFunc(names, strings.Compare)
	nodes := make([]*nodeEntry, len(names))
	for _, e := range entries {
		i, _ := slices.BinarySearch(names, e.name)
		nodes[i] = e
	}
	var keys []SvcKey
	var svcEntries []*svcEntry
	for _, se := range EndpointSet(st, includeUnhealthy) {
		e := newSvcEntry(se, &byID, endpointMode)
		keys, svcEntries = append(keys, SvcKey{se.Service.Namespace, se.Service.Name}), append(svcEntries, e)
		t.add(e, 1)
	}
	t.services, t.nodes = pmap.Of(SvcKey.compare, keys, svcEntries), pmap.FromSorted(strings.Compare, names, nodes)
	return t
}

// add counts entry e into the table's figures (sign 1) or out of them (-1).
func (t *Table) add(e *svcEntry, sign int) {
	t.nServices += sign
	t.nEndpts += sign * int(e.admitted)
	if e.conflict {
		t.nConflicts += sign
	}
}

// newNodeEntry makes the entry of node n: its names in zones and its
// advertise addresses.
func newNodeEntry(n *Node, zones []string, resolved map[string][]netip.Addr) *nodeEntry {
	e := &nodeEntry{name: n.Name, addrs: nodeAddrs(n.Address, resolved), targets: make([]string, len(zones))}
	for i, z := range zones {
		e.targets[i] = n.Name + ".node." + z
	}
	return e
}

// newSvcEntry makes the records of one service and its endpoint set; byID
// holds the entries of the nodes its endpoints run on.
func newSvcEntry(se ServiceEndpoints, byID *index[*nodeEntry], endpointMode bool) *svcEntry {
	svc := se.Service
	e := &svcEntry{admitted: int32(len(se.Endpoints))}
	var ips []netip.Addr
	if endpointMode {
		ips = make([]netip.Addr, 0, len(se.Endpoints)) // an address each, at most: no growth by doubling
	}
	var fqdns []string
	for _, sp := range svc.Ports {
		if sp.Name != "" {
			if e.ports == nil {
				e.ports = make([]namedPort, 0, len(svc.Ports))
			}
			e.ports = append(e.ports, namedPort{key: portKey{sp.Name, sp.Protocol}})
		}
	}
	for _, ep := range se.Endpoints {
		if endpointMode {
			if ip, host, err := ParseAddress(ep.Task.Address); err == nil && host != "" {
				fqdns = append(fqdns, host)
			} else if err == nil {
				ips = append(ips, ip)
			}
		}
		if ep.Node == nil {
			continue // an external endpoint: no node address, no SRV
		}
		ne, _ := byID.get(ep.Node.ID)
		if !endpointMode {
			ips = appendAddrs(ips, ne.addrs)
		}
		named := 0
		for _, sp := range svc.Ports {
			if sp.Name != "" {
				named++
			}
			port := hostPort(sp, ep.Task)
			if port == 0 {
				continue
			}
			st := srvTarget{node: ne, port: port}
			e.srv = append(e.srv, st)
			if sp.Name != "" {
				e.ports[named-1].targets = append(e.ports[named-1].targets, st)
			}
		}
	}
	for i := range e.ports {
		e.ports[i].targets = sortTargets(e.ports[i].targets)
	}
	e.srv = sortTargets(e.srv)
	e.addrs = toAddrs(ips)
	if len(fqdns) > 0 {
		sort.Strings(fqdns)
		if len(ips) == 0 {
			e.cname = fqdns[0]
		}
		e.conflict = len(ips) > 0 || fqdns[len(fqdns)-1] != fqdns[0]
	}
	return e
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
	for i := range a.n4() {
		ips = append(ips, netip.AddrFrom4([4]byte(a.v4[4*i:])))
	}
	for i := range a.n6() {
		ips = append(ips, netip.AddrFrom16([16]byte(a.v6[16*i:])))
	}
	return ips
}

// toAddrs sorts and deduplicates ips and packs them by family.
func toAddrs(ips []netip.Addr) addrs {
	for i, ip := range ips {
		ips[i] = ip.Unmap()
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	n4, n6 := 0, 0
	for i, ip := range ips {
		switch {
		case i > 0 && ip == ips[i-1]:
		case ip.Is4():
			n4++
		default:
			n6++
		}
	}
	if n4+n6 == 0 {
		return addrs{}
	}
	buf := make([]byte, 0, 4*n4+16*n6)
	for i, ip := range ips { // IPv4 sorts before IPv6
		if i == 0 || ip != ips[i-1] {
			buf = append(buf, ip.AsSlice()...)
		}
	}
	return addrs{v4: buf[: 4*n4 : 4*n4], v6: buf[4*n4:]}
}

// sortTargets orders targets by node name then port and drops duplicates
// (two tasks on one node reached through the same published port).
func sortTargets(ts []srvTarget) []srvTarget {
	slices.SortFunc(ts, func(a, b srvTarget) int {
		return cmp.Or(strings.Compare(a.node.name, b.node.name), cmp.Compare(a.port, b.port))
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
