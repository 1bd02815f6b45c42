package k8sdns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unique"
)

// The model: the parts of Kubernetes objects that the DNS specification
// reads, kept as the API server gives them (names, port names and
// protocols as written; every address of every endpoint with its
// conditions). The kubernetes source stores these as its informers' slim
// objects; the snapshot and the table are made of them. Objects are
// immutable once made: tables and stores share them.

// Kind is what a Service's name answers.
type Kind uint8

const (
	// ClusterIP: its cluster IPs (types ClusterIP, NodePort, LoadBalancer).
	ClusterIP Kind = iota
	// Headless: clusterIP None, its ready endpoints.
	Headless
	// ExternalName: a CNAME to its external name.
	ExternalName
)

var kindNames = [...]string{ClusterIP: "ClusterIP", Headless: "Headless", ExternalName: "ExternalName"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Service is a v1.Service as DNS reads it.
type Service struct {
	Namespace, Name string
	Kind            Kind
	// ClusterIPs are spec.clusterIPs (or spec.clusterIP) of a ClusterIP
	// kind, in the Service's order.
	ClusterIPs []netip.Addr
	// ExternalName is spec.externalName as written (kind ExternalName).
	ExternalName string
	// Ports are spec.ports (name and protocol as written).
	Ports []Port
	// PublishNotReady is spec.publishNotReadyAddresses. The EndpointSlice
	// controller marks such a Service's endpoints ready; DNS reads only the
	// ready condition, as the kubernetes plugin does.
	PublishNotReady bool
}

// Port is a Service's or an EndpointSlice's port: name and protocol as
// written ("TCP"), Port -1 for a slice port without a number.
type Port struct {
	Name, Protocol string
	Port           int32
}

// AddressType is an EndpointSlice's addressType.
type AddressType uint8

// The address types.
const (
	IPv4 AddressType = iota
	IPv6
	FQDN
)

var addressTypeNames = [...]string{IPv4: "IPv4", IPv6: "IPv6", FQDN: "FQDN"}

func (a AddressType) String() string {
	if int(a) < len(addressTypeNames) {
		return addressTypeNames[a]
	}
	return fmt.Sprintf("AddressType(%d)", a)
}

// ParseAddressType reads an addressType.
func ParseAddressType(s string) (AddressType, bool) {
	for i, n := range addressTypeNames {
		if n == s {
			return AddressType(i), true
		}
	}
	return 0, false
}

// Slice is a discovery/v1 EndpointSlice as DNS reads it. Its endpoints'
// addresses are packed in the slice (one allocation for all of them): add
// endpoints with Add.
type Slice struct {
	Namespace, Name string
	// Service is the kubernetes.io/service-name label as written: the
	// slice's endpoints are that Service's (names and PTR); "" none.
	Service   string
	Type      AddressType
	Ports     []Port
	Endpoints []Endpoint

	ips   [][16]byte // IPv4 and IPv6 slices: the addresses (IPv4 v4-mapped), endpoint by endpoint
	fqdns []string   // FQDN slices: the addresses
}

// Endpoint is an EndpointSlice endpoint: its addresses are in its Slice.
type Endpoint struct {
	Hostname  string                // as written; "" none
	TargetRef string                // targetRef.name (a Pod's); "" none
	NodeName  unique.Handle[string] // zero: none
	Ready     Condition
	Serving   Condition
	// Terminating is the terminating condition.
	Terminating Condition

	first int32 // its first address in the slice's addresses
	n     uint8 // its number of addresses
}

// Condition is an endpoint condition: unset, false or true.
type Condition uint8

// The values of a Condition.
const (
	Unset Condition = iota
	False
	True
)

// Cond is the Condition of an API pointer.
func Cond(b *bool) Condition {
	switch {
	case b == nil:
		return Unset
	case *b:
		return True
	}
	return False
}

// IsReady reports whether the endpoint counts: its ready condition, unset
// meaning ready (the API's advice, and the kubernetes plugin's reading).
func (e *Endpoint) IsReady() bool { return e.Ready != False }

// Node is the endpoint's node name, or "".
func (e *Endpoint) Node() string {
	if e.NodeName == (unique.Handle[string]{}) {
		return ""
	}
	return e.NodeName.Value()
}

// Len is the endpoint's number of addresses.
func (e *Endpoint) Len() int { return int(e.n) }

// maxAddresses bounds an endpoint's addresses (the API allows 100).
const maxAddresses = 255

// Add appends endpoint e with addresses (as written). An address that does
// not fit the slice's type (not an IP of its family, not a name in an FQDN
// slice) is an error and nothing is added.
func (s *Slice) Add(e Endpoint, addresses ...string) error {
	if len(addresses) == 0 || len(addresses) > maxAddresses {
		return fmt.Errorf("endpoint with %d addresses: want 1 to %d", len(addresses), maxAddresses)
	}
	start := len(s.ips)
	if s.Type == FQDN {
		start = len(s.fqdns)
	}
	for _, a := range addresses {
		if s.Type == FQDN {
			if a == "" || strings.ContainsAny(a, " /:") {
				return fmt.Errorf("bad FQDN address %q", a)
			}
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" || ip.Unmap().Is4() != (s.Type == IPv4) {
			return fmt.Errorf("bad %s address %q", s.Type, a)
		}
	}
	for _, a := range addresses {
		if s.Type == FQDN {
			s.fqdns = append(s.fqdns, a)
		} else {
			s.ips = append(s.ips, netip.MustParseAddr(a).As16())
		}
	}
	e.first, e.n = int32(start), uint8(len(addresses))
	s.Endpoints = append(s.Endpoints, e)
	return nil
}

// Compact drops the room appends left in the slice's arrays.
func (s *Slice) Compact() {
	if len(s.Endpoints) < cap(s.Endpoints) {
		s.Endpoints = append([]Endpoint(nil), s.Endpoints...)
	}
	if len(s.ips) < cap(s.ips) {
		s.ips = append([][16]byte(nil), s.ips...)
	}
	if len(s.fqdns) < cap(s.fqdns) {
		s.fqdns = append([]string(nil), s.fqdns...)
	}
}

// Addr is address j of endpoint i of an IPv4 or IPv6 slice.
func (s *Slice) Addr(i, j int) netip.Addr {
	return netip.AddrFrom16(s.ips[int(s.Endpoints[i].first)+j]).Unmap()
}

// FQDNAddr is address j of endpoint i of an FQDN slice.
func (s *Slice) FQDNAddr(i, j int) string { return s.fqdns[int(s.Endpoints[i].first)+j] }

// Address is address j of endpoint i as text.
func (s *Slice) Address(i, j int) string {
	if s.Type == FQDN {
		return s.FQDNAddr(i, j)
	}
	return s.Addr(i, j).String()
}

// Addresses are endpoint i's addresses as text.
func (s *Slice) Addresses(i int) []string {
	out := make([]string, s.Endpoints[i].Len())
	for j := range out {
		out[j] = s.Address(i, j)
	}
	return out
}

// Cluster is a whole state: the namespaces that exist, the Services and
// the EndpointSlices (also those of no Service: their addresses have PTR
// records).
type Cluster struct {
	Namespaces []string
	Services   []*Service
	Slices     []*Slice
}

// Len is the number of Services (a cluster without is empty).
func (c *Cluster) Len() int { return len(c.Services) }

// Equal reports whether two Services are the same in every field.
func (s *Service) Equal(o *Service) bool {
	return s.Namespace == o.Namespace && s.Name == o.Name && s.Kind == o.Kind && s.ExternalName == o.ExternalName &&
		s.PublishNotReady == o.PublishNotReady && slices.Equal(s.ClusterIPs, o.ClusterIPs) && slices.Equal(s.Ports, o.Ports)
}

// Equal reports whether two slices are the same in every field, every
// endpoint's addresses included.
func (s *Slice) Equal(o *Slice) bool {
	if s.Namespace != o.Namespace || s.Name != o.Name || s.Service != o.Service || s.Type != o.Type ||
		!slices.Equal(s.Ports, o.Ports) || len(s.Endpoints) != len(o.Endpoints) {
		return false
	}
	for i := range s.Endpoints {
		a, b := &s.Endpoints[i], &o.Endpoints[i]
		if a.Hostname != b.Hostname || a.TargetRef != b.TargetRef || a.NodeName != b.NodeName ||
			a.Ready != b.Ready || a.Serving != b.Serving || a.Terminating != b.Terminating || a.n != b.n {
			return false
		}
		for j := range a.Len() {
			if s.Address(i, j) != o.Address(i, j) {
				return false
			}
		}
	}
	return true
}
