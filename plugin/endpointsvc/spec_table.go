package endpointsvc

import (
	"bytes"
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
	ptrs       []specPTR           // reverse index: sorted by address, cluster IPs before endpoints
}

// specSvc is one Service as the specification answers it.
type specSvc struct {
	name, namespace string
	clusterIPs      []netip.Addr  // ClusterIP/NodePort/LoadBalancer: in the Service's order
	external        string        // ExternalName: the target, a lowercased FQDN
	headless        bool          // clusterIP None
	cname           string        // headless with FQDN endpoints only (a Knative Route): the first FQDN
	ports           []ServicePort // the Service's ports, in its order
	eps             []specEP      // the endpoints the predicate admits, in slice order
}

// specEP is one endpoint the predicate admitted.
type specEP struct {
	label string     // the hostname, or the address with its dots or colons as dashes
	ip    netip.Addr // unmapped
	ports []TaskPort // the slice's ports (shared by the slice's endpoints)
}

// specPTR maps an address onto a Service (ep -1: its cluster IP) or one of
// its endpoints.
type specPTR struct {
	ip  [16]byte
	svc *specSvc
	ep  int32
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
		for _, ep := range se.Endpoints {
			ip, host, err := ParseAddress(ep.Task.Address)
			if err != nil {
				continue
			}
			if host != "" {
				fqdns = append(fqdns, host)
				continue
			}
			label := ep.Task.Hostname
			if label == "" {
				label = endpointLabel(ip)
			}
			s.eps = append(s.eps, specEP{label: label, ip: ip, ports: ep.Task.Ports})
		}
		if len(fqdns) > 0 && len(s.eps) == 0 && s.headless {
			sort.Strings(fqdns)
			s.cname = fqdns[0]
		}
		nEndpts += len(se.Endpoints)
		if len(s.eps) == 0 {
			s.eps = nil
		}
		t.services[svcKey{svc.Namespace, svc.Name}] = s
		for _, ip := range s.clusterIPs {
			t.ptrs = append(t.ptrs, specPTR{ip: ip.As16(), svc: s, ep: -1})
		}
		for i := range s.eps {
			t.ptrs = append(t.ptrs, specPTR{ip: s.eps[i].ip.As16(), svc: s, ep: int32(i)})
		}
	}
	sort.SliceStable(t.ptrs, func(i, j int) bool {
		if c := bytes.Compare(t.ptrs[i].ip[:], t.ptrs[j].ip[:]); c != 0 {
			return c < 0
		}
		return t.ptrs[i].ep < 0 && t.ptrs[j].ep >= 0
	})
	return t, nEndpts
}

// reverse returns the PTR entries of ip: the Service whose cluster IP it
// is, else every endpoint with that address.
func (t *specTable) reverse(ip netip.Addr) []specPTR {
	k := ip.Unmap().As16()
	i := sort.Search(len(t.ptrs), func(i int) bool { return bytes.Compare(t.ptrs[i].ip[:], k[:]) >= 0 })
	j := i
	for j < len(t.ptrs) && t.ptrs[j].ip == k {
		j++
	}
	if i < j && t.ptrs[i].ep < 0 {
		return t.ptrs[i : i+1]
	}
	return t.ptrs[i:j]
}
