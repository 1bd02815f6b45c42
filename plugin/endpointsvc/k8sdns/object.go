package k8sdns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unique"

	"github.com/meshdns/meshdns/plugin/pkg/intern"
)

// nodeNames interns the endpoints' node names: a cluster has a few
// hundred or thousand, and every slice event names ten or more.
var nodeNames intern.Table

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
	// ExternalIPs are spec.externalIPs, then each status.loadBalancer
	// ingress's IP (or its hostname when it has no IP), as written: what
	// k8s_external answers (the kubernetes plugin's reading).
	ExternalIPs []string
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
// addresses, hostnames and target Pod names are packed in the slice (a few
// allocations for all of them, an endpoint itself is 16 bytes): add
// endpoints with Add, then Compact.
type Slice struct {
	Namespace, Name string
	// Service is the kubernetes.io/service-name label as written: the
	// slice's endpoints are that Service's (names and PTR); "" none.
	Service string
	// Import and Cluster are the multicluster.kubernetes.io/service-name
	// and source-cluster labels as written (kept with multicluster only):
	// the slice's endpoints are that ServiceImport's, in the multicluster
	// zones, under <cluster>; "" none.
	Import, Cluster string
	Type            AddressType
	Ports           []Port
	Endpoints       []Endpoint

	ips   [][16]byte       // IPv4 and IPv6 slices: the addresses (IPv4 v4-mapped), endpoint by endpoint
	fqdns []string         // FQDN slices: the addresses
	text  string           // the hostnames and target names, end to end (Compact makes it of build)
	build *strings.Builder // text while endpoints are added
	ends  []uint32         // per endpoint, where its hostname and its target name end in text; nil: none has either
}

// Endpoint is an EndpointSlice endpoint: its addresses, hostname and
// target name are in its Slice (Addr, Hostname, TargetRef).
type Endpoint struct {
	NodeName    unique.Handle[string] // zero: none
	Ready       Condition
	Serving     Condition
	Terminating Condition

	n     uint8 // its number of addresses
	first int32 // its first address in the slice's addresses
}

// EndpointSpec is an endpoint as the API writes it, for Add.
type EndpointSpec struct {
	Addresses   []string
	Hostname    string // "" none
	TargetRef   string // targetRef.name (a Pod's); "" none
	NodeName    string // "" none
	Ready       Condition
	Serving     Condition
	Terminating Condition
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

// Add appends endpoint e. An address that does not fit the slice's type
// (not an IP of its family, not a name in an FQDN slice), or no address,
// is an error and nothing is added.
func (s *Slice) Add(e EndpointSpec) error {
	if len(e.Addresses) == 0 || len(e.Addresses) > maxAddresses {
		return fmt.Errorf("endpoint with %d addresses: want 1 to %d", len(e.Addresses), maxAddresses)
	}
	ep := Endpoint{Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating, n: uint8(len(e.Addresses))}
	if s.Type == FQDN {
		for _, a := range e.Addresses {
			if err := s.Type.check(a); err != nil {
				return err
			}
		}
		ep.first = int32(len(s.fqdns))
		s.fqdns = append(s.fqdns, e.Addresses...)
	} else {
		// each address parsed once, appended as it passes; on an error
		// the ones appended go again
		ep.first = int32(len(s.ips))
		for _, a := range e.Addresses {
			ip, err := s.Type.parse(a)
			if err != nil {
				s.ips = s.ips[:ep.first]
				return err
			}
			s.ips = append(s.ips, ip.As16())
		}
	}
	if s.text != "" && s.build == nil { // adding after Compact
		s.build = &strings.Builder{}
		s.build.WriteString(s.text)
		s.text = ""
	}
	if e.NodeName != "" {
		ep.NodeName = nodeNames.Handle(e.NodeName)
	}
	if (e.Hostname != "" || e.TargetRef != "") && s.ends == nil {
		s.ends = make([]uint32, 2*len(s.Endpoints), 2*cap(s.Endpoints))
	}
	if s.ends != nil {
		if s.build == nil {
			s.build = &strings.Builder{}
		}
		s.build.WriteString(e.Hostname)
		s.ends = append(s.ends, uint32(s.build.Len()))
		s.build.WriteString(e.TargetRef)
		s.ends = append(s.ends, uint32(s.build.Len()))
	}
	s.Endpoints = append(s.Endpoints, ep)
	return nil
}

// check reports whether address a fits the address type.
func (a AddressType) check(address string) error {
	if a == FQDN {
		if address == "" || strings.ContainsAny(address, " /:") {
			return fmt.Errorf("bad FQDN address %q", address)
		}
		return nil
	}
	_, err := a.parse(address)
	return err
}

// parse parses an address of an IPv4 or IPv6 slice.
func (a AddressType) parse(address string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(address)
	if err != nil || ip.Zone() != "" || ip.Unmap().Is4() != (a == IPv4) {
		return netip.Addr{}, fmt.Errorf("bad %s address %q", a, address)
	}
	return ip, nil
}

// Reserve makes room for endpoints more endpoints with addresses
// addresses and text bytes of hostnames and target names in all, so that
// adding them allocates each array once.
func (s *Slice) Reserve(endpoints, addresses, text int) {
	s.Endpoints = slices.Grow(s.Endpoints, endpoints)
	if s.Type == FQDN {
		s.fqdns = slices.Grow(s.fqdns, addresses)
	} else {
		s.ips = slices.Grow(s.ips, addresses)
	}
	if text > 0 {
		if s.ends == nil {
			s.ends = make([]uint32, 2*len(s.Endpoints), 2*(len(s.Endpoints)+endpoints))
		} else {
			s.ends = slices.Grow(s.ends, 2*endpoints)
		}
		if s.build == nil {
			s.build = &strings.Builder{}
		}
		s.build.Grow(text)
	}
}

// Compact ends the adding: it drops the room appends left in the slice's
// arrays and makes its text one string.
func (s *Slice) Compact() {
	s.Endpoints = slices.Clip(clone(s.Endpoints))
	s.ips = slices.Clip(clone(s.ips))
	s.fqdns = slices.Clip(clone(s.fqdns))
	s.ends = slices.Clip(clone(s.ends))
	if s.build != nil {
		s.text, s.build = s.build.String(), nil
	}
}

// clone copies a slice with room left over into one that has none.
func clone[T any](a []T) []T {
	if len(a) == cap(a) {
		return a
	}
	return append([]T(nil), a...)
}

// Hostname is endpoint i's hostname as written, or "".
func (s *Slice) Hostname(i int) string {
	if s.ends == nil {
		return ""
	}
	start := uint32(0)
	if i > 0 {
		start = s.ends[2*i-1]
	}
	return s.textOf(start, s.ends[2*i])
}

// TargetRef is endpoint i's target name (a Pod's), or "".
func (s *Slice) TargetRef(i int) string {
	if s.ends == nil {
		return ""
	}
	return s.textOf(s.ends[2*i], s.ends[2*i+1])
}

func (s *Slice) textOf(start, end uint32) string {
	if s.build != nil {
		return s.build.String()[start:end]
	}
	return s.text[start:end]
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
	// Pods is the pod index (pods verified): the namespaces of the
	// running Pods of each address; nil without it.
	Pods []PodAddr
	// Imports are the ServiceImports (multicluster.x-k8s.io/v1alpha1, with
	// multicluster), each read as a Service: kind ClusterIP for type
	// ClusterSetIP (ClusterIPs: spec.ips), Headless for Headless, and
	// spec.ports; nil without multicluster.
	Imports []*Service

	// Origin is where a replicated cluster stands in its replication
	// stream (package replica: "<epoch>/<generation>"); "" for a cluster
	// of the source's own. Its table and snapshot keep it.
	Origin string
}

// Len is the number of Services (a cluster without is empty).
func (c *Cluster) Len() int { return len(c.Services) }

// Equal reports whether two Services are the same in every field.
func (s *Service) Equal(o *Service) bool {
	return s.Namespace == o.Namespace && s.Name == o.Name && s.Kind == o.Kind && s.ExternalName == o.ExternalName &&
		s.PublishNotReady == o.PublishNotReady && slices.Equal(s.ClusterIPs, o.ClusterIPs) && slices.Equal(s.Ports, o.Ports) &&
		slices.Equal(s.ExternalIPs, o.ExternalIPs)
}

// Equal reports whether two slices are the same in every field, every
// endpoint's addresses included.
func (s *Slice) Equal(o *Slice) bool {
	if s.Namespace != o.Namespace || s.Name != o.Name || s.Service != o.Service || s.Import != o.Import || s.Cluster != o.Cluster || s.Type != o.Type ||
		!slices.Equal(s.Ports, o.Ports) || len(s.Endpoints) != len(o.Endpoints) {
		return false
	}
	for i := range s.Endpoints {
		a, b := &s.Endpoints[i], &o.Endpoints[i]
		if a.NodeName != b.NodeName || a.Ready != b.Ready || a.Serving != b.Serving || a.Terminating != b.Terminating ||
			a.n != b.n || s.Hostname(i) != o.Hostname(i) || s.TargetRef(i) != o.TargetRef(i) {
			return false
		}
		for j := range a.Len() {
			if s.Type == FQDN && s.FQDNAddr(i, j) != o.FQDNAddr(i, j) || s.Type != FQDN && s.Addr(i, j) != o.Addr(i, j) {
				return false // addresses compared as they are, not as text (two strings an address: a no-op update's garbage)
			}
		}
	}
	return true
}
