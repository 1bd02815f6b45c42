package endpointsvc

import (
	"net/netip"
	"sort"
	"strings"
)

// specTable is the part of a table that schema kubernetes (the Kubernetes
// DNS specification) reads. It is built from one validated State by
// buildSpecTable, or from another specTable and a patch by patched (which
// copies only what the patch touches), and never changed afterwards. Keys
// are lowercased.
type specTable struct {
	namespaces map[string]struct{} // namespaces that exist (State.Namespaces, or those with a service)
	derivedNS  bool                // the state listed no namespaces: they are those of the services
	services   map[svcKey]*specSvc // every service, with or without endpoints
	// list gives every service a slot, the number the reverse index
	// refers to it by; a service keeps its slot while a patch replaces it,
	// and a removed service leaves a nil hole (in free) for the next new one.
	list    []*specSvc
	free    []uint32
	ptrs    [ptrShards][]specPTR // reverse index, sharded by address: each shard sorted by address, cluster IPs before endpoints
	nEndpts int                  // endpoints the predicate admitted, over all services
}

// ptrShards is the number of reverse-index shards: a patch copies only the
// shards its services' addresses fall in (~200 entries each at 50,000
// endpoints), not the whole index.
const ptrShards = 256

// ptrShard is the shard of an address (16 bytes, IPv4 v4-mapped):
// multiplicative hashing of its low 8 bytes, where addresses of one network
// differ.
func ptrShard(a [16]byte) int {
	x := uint64(a[8])<<56 | uint64(a[9])<<48 | uint64(a[10])<<40 | uint64(a[11])<<32 |
		uint64(a[12])<<24 | uint64(a[13])<<16 | uint64(a[14])<<8 | uint64(a[15])
	return int((x * 0x9E3779B97F4A7C15) >> 56)
}

// specSvc is one Service as the specification answers it.
type specSvc struct {
	name, namespace string
	clusterIPs      []netip.Addr  // ClusterIP/NodePort/LoadBalancer: in the Service's order
	external        string        // ExternalName: the target, a fully qualified name as written
	headless        bool          // clusterIP None
	cname           string        // headless with FQDN endpoints only (a Knative Route): the first FQDN
	ports           []ServicePort // the Service's ports, in its order
	eps             []specEP      // the endpoints the predicate admits, in slice order
	hostnames       []string      // endpoint i's hostname, parallel to eps; nil when none has one
	epPorts         []epPorts     // the endpoints' ports, by runs of eps (one run per slice)
	slot            uint32        // its number in the table's list
	admitted        int32         // endpoints the predicate admitted (eps and FQDN ones)
}

// specEP is the address of an endpoint the predicate admitted (IPv4
// v4-mapped): 16 bytes; its label is its hostname, or made from the address
// when a query needs it (most endpoints have no hostname).
type specEP [16]byte

// epPorts gives the endpoints eps[previous run's end:end] their ports (a
// slice's ports, shared by its endpoints).
type epPorts struct {
	end   int32
	ports []TaskPort
}

// addr is endpoint i's address.
func (s *specSvc) addr(i int) netip.Addr { return netip.AddrFrom16(s.eps[i]).Unmap() }

// hostname is endpoint i's hostname, or "".
func (s *specSvc) hostname(i int) string {
	if s.hostnames == nil {
		return ""
	}
	return s.hostnames[i]
}

// label is endpoint i's DNS label: its hostname, else its address with dashes.
func (s *specSvc) label(i int) string {
	if h := s.hostname(i); h != "" {
		return h
	}
	return endpointLabel(s.addr(i))
}

// isLabel reports whether endpoint i's label is l (case-insensitively);
// want is l read as an address (invalid when it is none), so that the
// endpoints without a hostname are compared without making their labels.
func (s *specSvc) isLabel(i int, l string, want netip.Addr) bool {
	if h := s.hostname(i); h != "" {
		return strings.EqualFold(h, l)
	}
	return want.IsValid() && s.addr(i) == want && strings.EqualFold(endpointLabel(want), l)
}

// labelAddr reads an endpoint label as the address it is made of
// (10-244-1-5, fd00--1), as the kubernetes plugin's pod names are read.
func labelAddr(l string) netip.Addr {
	var s string
	if strings.Count(l, "-") == 3 && !strings.Contains(l, "--") {
		s = strings.ReplaceAll(l, "-", ".")
	} else {
		s = strings.ReplaceAll(l, "-", ":")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// specPTR maps an address onto service number svc of the table's list:
// its endpoint ep, or, ep < 0, its cluster IP number -1-ep. 8 bytes: the
// address is read from the service.
type specPTR struct {
	svc uint32
	ep  int32
}

// addr is the address p indexes.
func (t *specTable) addr(p specPTR) netip.Addr {
	s := t.list[p.svc]
	if p.ep < 0 {
		return s.clusterIPs[-1-p.ep]
	}
	return s.addr(int(p.ep))
}

// endpointLabel is the DNS label of an endpoint without a hostname, as the
// kubernetes plugin writes it: the IPv4 address with dashes for dots, the
// IPv6 address with dashes for colons (and a trailing 0 when it would end
// in a dash).
func endpointLabel(ip netip.Addr) string {
	s := ip.String()
	if ip.Is4() {
		return strings.ReplaceAll(s, ".", "-")
	}
	s = strings.ReplaceAll(s, ":", "-")
	if strings.HasSuffix(s, "-") {
		s += "0"
	}
	return s
}

// buildSpecTable turns a validated state into the specification's records.
// The endpoints are those IsEndpoint admits (for a Kubernetes state: the
// ready ones, or all with publishNotReadyAddresses); ExternalName and
// cluster-IP services keep theirs only for endpoint names and PTR, as the
// kubernetes plugin does.
func buildSpecTable(st *State) *specTable {
	t := &specTable{
		namespaces: make(map[string]struct{}, len(st.Namespaces)),
		derivedNS:  len(st.Namespaces) == 0,
		services:   make(map[svcKey]*specSvc, len(st.Services)),
	}
	for _, ns := range st.Namespaces {
		t.namespaces[ns] = struct{}{}
	}
	for _, se := range EndpointSet(st, false) {
		s := newSpecSvc(se)
		if t.derivedNS {
			t.namespaces[s.namespace] = struct{}{}
		}
		s.slot = uint32(len(t.list))
		t.list = append(t.list, s)
		t.services[svcKey{s.namespace, s.name}] = s
		t.nEndpts += int(s.admitted)
		for _, p := range s.reverseEntries() {
			sh := ptrShard(p.key)
			t.ptrs[sh] = append(t.ptrs[sh], p.ptr)
		}
	}
	for i := range t.ptrs {
		t.sortShard(t.ptrs[i])
		if len(t.ptrs[i]) < cap(t.ptrs[i]) {
			t.ptrs[i] = append([]specPTR(nil), t.ptrs[i]...)
		}
	}
	return t
}

// newSpecSvc makes the records of one service and its endpoint set.
func newSpecSvc(se ServiceEndpoints) *specSvc {
	svc := se.Service
	s := &specSvc{name: svc.Name, namespace: svc.Namespace, external: svc.ExternalName, headless: svc.Headless,
		ports: svc.Ports, admitted: int32(len(se.Endpoints))}
	for _, a := range svc.ClusterIPs {
		s.clusterIPs = append(s.clusterIPs, netip.MustParseAddr(a)) // validated
	}
	var fqdns []string
	var ports []TaskPort
	for _, ep := range se.Endpoints {
		ip, host, err := ParseAddress(ep.Task.Address)
		if err != nil {
			continue
		}
		if host != "" {
			fqdns = append(fqdns, host)
			continue
		}
		if len(s.eps) == 0 || !samePorts(ports, ep.Task.Ports) {
			if len(s.eps) > 0 {
				s.epPorts = append(s.epPorts, epPorts{end: int32(len(s.eps)), ports: ports})
			}
			ports = ep.Task.Ports
		}
		if h := ep.Task.Hostname; h != "" && s.hostnames == nil {
			s.hostnames = make([]string, len(s.eps), len(se.Endpoints))
		}
		if s.hostnames != nil {
			s.hostnames = append(s.hostnames, ep.Task.Hostname)
		}
		s.eps = append(s.eps, specEP(ip.As16()))
	}
	if len(s.eps) > 0 {
		s.epPorts = append(s.epPorts, epPorts{end: int32(len(s.eps)), ports: ports})
	}
	if len(fqdns) > 0 && len(s.eps) == 0 && s.headless {
		sort.Strings(fqdns)
		s.cname = fqdns[0]
	}
	if len(s.eps) < cap(s.eps) {
		s.eps = append([]specEP(nil), s.eps...) // do not keep append's room
	}
	if s.hostnames != nil && len(s.hostnames) < cap(s.hostnames) {
		s.hostnames = append([]string(nil), s.hostnames...)
	}
	return s
}

// keyedPTR is a reverse-index entry with the address it indexes.
type keyedPTR struct {
	key [16]byte
	ptr specPTR
}

// reverseEntries are the reverse-index entries of s (in its slot): its
// cluster IPs, then its endpoints.
func (s *specSvc) reverseEntries() []keyedPTR {
	out := make([]keyedPTR, 0, len(s.clusterIPs)+len(s.eps))
	for k, a := range s.clusterIPs {
		out = append(out, keyedPTR{a.As16(), specPTR{svc: s.slot, ep: int32(-1 - k)}})
	}
	for i, a := range s.eps {
		out = append(out, keyedPTR{a, specPTR{svc: s.slot, ep: int32(i)}})
	}
	return out
}

// sortShard orders a shard by address, cluster IPs before endpoints, and
// otherwise by slot and endpoint number, so that a patched table and one
// built whole order equal entries alike.
func (t *specTable) sortShard(ps []specPTR) {
	sort.Slice(ps, func(i, j int) bool { return t.ptrLess(ps[i], ps[j]) })
}

// ptrLess is the order of a shard.
func (t *specTable) ptrLess(a, b specPTR) bool {
	if c := t.addr(a).Compare(t.addr(b)); c != 0 {
		return c < 0
	}
	ca, cb := a.ep < 0, b.ep < 0
	if ca != cb {
		return ca
	}
	if a.svc != b.svc {
		return t.list[a.svc].less(t.list[b.svc])
	}
	return a.ep < b.ep
}

// less orders services by namespace and name (the state's order of a
// Kubernetes state), for entries of one address.
func (s *specSvc) less(o *specSvc) bool {
	if s.namespace != o.namespace {
		return s.namespace < o.namespace
	}
	return s.name < o.name
}

// samePorts reports whether two tasks share their ports: the same slice
// (the tasks of one EndpointSlice), or equal ones.
func samePorts(a, b []TaskPort) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// reverse returns the PTR entries of ip: the Service whose cluster IP it
// is, else every endpoint with that address.
func (t *specTable) reverse(ip netip.Addr) []specPTR {
	ip = ip.Unmap()
	ps := t.ptrs[ptrShard(ip.As16())]
	i := sort.Search(len(ps), func(i int) bool { return t.addr(ps[i]).Compare(ip) >= 0 })
	j := i
	for j < len(ps) && t.addr(ps[j]) == ip {
		j++
	}
	if i < j && ps[i].ep < 0 {
		return ps[i : i+1]
	}
	return ps[i:j]
}
