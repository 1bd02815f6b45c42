package endpointsvc

import (
	"net/netip"
	"sort"
	"strings"
)

// specTable is the part of a table that schema kubernetes (the Kubernetes
// DNS specification) reads. It is built from one validated State by
// buildSpecTable and never changed afterwards. Keys are lowercased.
type specTable struct {
	namespaces map[string]struct{} // namespaces that exist (State.Namespaces, or those with a service)
	services   map[svcKey]*specSvc // every service, with or without endpoints
	list       []*specSvc          // the services, for the reverse index's numbers
	ptrs       []specPTR           // reverse index: sorted by address, cluster IPs before endpoints
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
func buildSpecTable(st *State) (*specTable, int) {
	t := &specTable{
		namespaces: make(map[string]struct{}, len(st.Namespaces)),
		services:   make(map[svcKey]*specSvc, len(st.Services)),
	}
	for _, ns := range st.Namespaces {
		t.namespaces[ns] = struct{}{}
	}
	nEndpts := 0
	for _, se := range EndpointSet(st, false) {
		svc := se.Service
		if len(st.Namespaces) == 0 { // a state from a source that lists no namespaces
			t.namespaces[svc.Namespace] = struct{}{}
		}
		s := &specSvc{name: svc.Name, namespace: svc.Namespace, external: svc.ExternalName, headless: svc.Headless, ports: svc.Ports}
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
		nEndpts += len(se.Endpoints)
		if len(s.eps) < cap(s.eps) {
			s.eps = append([]specEP(nil), s.eps...) // do not keep append's room
		}
		if s.hostnames != nil && len(s.hostnames) < cap(s.hostnames) {
			s.hostnames = append([]string(nil), s.hostnames...)
		}
		t.services[svcKey{svc.Namespace, svc.Name}] = s
		n := uint32(len(t.list))
		t.list = append(t.list, s)
		for k := range s.clusterIPs {
			t.ptrs = append(t.ptrs, specPTR{svc: n, ep: int32(-1 - k)})
		}
		for i := range s.eps {
			t.ptrs = append(t.ptrs, specPTR{svc: n, ep: int32(i)})
		}
	}
	sort.SliceStable(t.ptrs, func(i, j int) bool {
		if c := t.addr(t.ptrs[i]).Compare(t.addr(t.ptrs[j])); c != 0 {
			return c < 0
		}
		return t.ptrs[i].ep < 0 && t.ptrs[j].ep >= 0
	})
	if len(t.ptrs) < cap(t.ptrs) {
		t.ptrs = append([]specPTR(nil), t.ptrs...)
	}
	return t, nEndpts
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
	i := sort.Search(len(t.ptrs), func(i int) bool { return t.addr(t.ptrs[i]).Compare(ip) >= 0 })
	j := i
	for j < len(t.ptrs) && t.addr(t.ptrs[j]) == ip {
		j++
	}
	if i < j && t.ptrs[i].ep < 0 {
		return t.ptrs[i : i+1]
	}
	return t.ptrs[i:j]
}
