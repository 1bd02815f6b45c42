package endpointsvc

import (
	"net/netip"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The slim objects below are what the informers store instead of the API
// objects: the transforms keep only the fields the mapping reads (as the
// kubernetes plugin's object package does, coredns#2095). Each embeds a
// kMeta holding only name, namespace and resourceVersion (a full ObjectMeta
// is 232 bytes even when empty), enough for the informer's key function,
// its namespace index and the resourceVersion check on updates.

// kService is the slim form of a v1.Service.
type kService struct {
	kMeta
	externalName bool     // type ExternalName (schema orch leaves it to the kubernetes plugin)
	skip         bool     // outside the configured namespaces
	headless     bool     // clusterIP None
	notReady     bool     // publishNotReadyAddresses
	target       string   // type ExternalName: spec.externalName
	clusterIPs   []string // spec.clusterIPs (spec.clusterIP when that is empty), not "None"
	ports        []kServicePort
}

type kServicePort struct {
	name, protocol string // lowercased
	port, nodePort int32
}

// kSlice is the slim form of a discovery/v1 EndpointSlice.
type kSlice struct {
	kMeta
	service     string // "namespace/name" from the kubernetes.io/service-name label, lowercased
	addressType string // IPv4, IPv6, FQDN (one of the constants: never the decoder's copy)
	ports       []kSlicePort
	endpoints   []kEndpoint
	fqdns       []string // addressType FQDN only: endpoint i's name, parallel to endpoints
	hostnames   []string // endpoint i's hostname, parallel to endpoints; nil when none has one
}

type kSlicePort struct {
	name, protocol string // lowercased
	port           int32
}

// kEndpoint keeps the first address (the API declares an endpoint's
// addresses fungible) and the conditions, resolved: ready nil means true,
// serving nil means the same as ready, terminating nil means false. It holds
// no string of its own, so 50,000 endpoints are one allocation per slice:
// the address is packed (IPv4 v4-mapped; an FQDN slice's name is in
// kSlice.fqdns) and the node name is interned, as
// thousands of endpoints share a few hundred nodes.
type kEndpoint struct {
	ip                          [16]byte
	node                        unique.Handle[string] // lowercased nodeName; zero: none
	ready, serving, terminating bool
}

// nodeName is the endpoint's lowercased node name, or "".
func (e *kEndpoint) nodeName() string {
	if e.node == (unique.Handle[string]{}) {
		return ""
	}
	return e.node.Value()
}

// hostname is endpoint i's hostname, or "".
func (s *kSlice) hostname(i int) string {
	if s.hostnames == nil {
		return ""
	}
	return s.hostnames[i]
}

// address is endpoint i of slice s as text.
func (s *kSlice) address(i int) string {
	if s.addressType == addressFQDN {
		return s.fqdns[i]
	}
	return netip.AddrFrom16(s.endpoints[i].ip).Unmap().String()
}

// The address types the transform keeps (constants, so that no slice holds
// its own copy of the word).
const (
	addressIPv4 = "IPv4"
	addressIPv6 = "IPv6"
	addressFQDN = "FQDN"
)

// intern returns the canonical copy of s, so that the namespace names of
// thousands of objects share their bytes.
func intern(s string) string { return unique.Make(s).Value() }

// kNode is the slim form of a v1.Node.
type kNode struct {
	kMeta
	readyFalse bool              // the Ready condition is False
	addresses  map[string]string // address type (lowercased) → first address of that type
}

func slimMeta(m *metav1.ObjectMeta) kMeta {
	return kMeta{Name: m.Name, Namespace: intern(m.Namespace), ResourceVersion: m.ResourceVersion}
}

// transformService converts a *v1.Service into a *kService; anything else
// (already slim, a tombstone) passes unchanged. skip reports namespaces
// outside the configured ones (nil: all).
func transformService(namespaces map[string]bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		s, ok := obj.(*corev1.Service)
		if !ok {
			return obj, nil
		}
		k := &kService{kMeta: slimMeta(&s.ObjectMeta)}
		if namespaces != nil && !namespaces[strings.ToLower(s.Namespace)] {
			k.skip = true
			return k, nil
		}
		k.externalName = s.Spec.Type == corev1.ServiceTypeExternalName
		if k.externalName {
			k.target = s.Spec.ExternalName // answered as written
		}
		k.notReady = s.Spec.PublishNotReadyAddresses
		ips := s.Spec.ClusterIPs
		if len(ips) == 0 && s.Spec.ClusterIP != "" {
			ips = []string{s.Spec.ClusterIP}
		}
		for _, ip := range ips {
			if ip == corev1.ClusterIPNone {
				k.headless = true
			} else if !k.externalName {
				k.clusterIPs = append(k.clusterIPs, ip)
			}
		}
		if len(s.Spec.Ports) > 0 {
			k.ports = make([]kServicePort, len(s.Spec.Ports))
			for i, p := range s.Spec.Ports {
				k.ports[i] = kServicePort{name: strings.ToLower(p.Name), protocol: strings.ToLower(string(p.Protocol)), port: p.Port, nodePort: p.NodePort}
			}
		}
		return k, nil
	}
}

// transformSlice converts a *discoveryv1.EndpointSlice into a *kSlice.
func transformSlice(namespaces map[string]bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return obj, nil
		}
		k := &kSlice{kMeta: slimMeta(&s.ObjectMeta)}
		svc := s.Labels[discoveryv1.LabelServiceName]
		if svc == "" || (namespaces != nil && !namespaces[strings.ToLower(s.Namespace)]) {
			return k, nil // belongs to no Service we serve
		}
		k.service = strings.ToLower(s.Namespace + "/" + svc)
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
			k.addressType = addressIPv4
		case discoveryv1.AddressTypeIPv6:
			k.addressType = addressIPv6
		case discoveryv1.AddressTypeFQDN:
			k.addressType = addressFQDN
		default:
			return k, nil // an address type we cannot answer with
		}
		if len(s.Ports) > 0 {
			k.ports = make([]kSlicePort, 0, len(s.Ports))
			for _, p := range s.Ports {
				if p.Port == nil {
					continue // "all ports": nothing to publish
				}
				sp := kSlicePort{port: *p.Port, protocol: "tcp"}
				if p.Name != nil {
					sp.name = strings.ToLower(*p.Name)
				}
				if p.Protocol != nil {
					sp.protocol = strings.ToLower(string(*p.Protocol))
				}
				k.ports = append(k.ports, sp)
			}
		}
		k.endpoints = make([]kEndpoint, 0, len(s.Endpoints))
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 || !validEndpointAddress(k.addressType, ep.Addresses[0]) {
				continue // nothing to answer with
			}
			e := kEndpoint{ready: true}
			if ep.Hostname != nil && *ep.Hostname != "" {
				if k.hostnames == nil {
					k.hostnames = make([]string, len(k.endpoints), cap(k.endpoints))
				}
				k.hostnames = append(k.hostnames, strings.ToLower(*ep.Hostname))
			} else if k.hostnames != nil {
				k.hostnames = append(k.hostnames, "")
			}
			if k.addressType == addressFQDN {
				k.fqdns = append(k.fqdns, strings.Clone(ep.Addresses[0]))
			} else {
				e.ip = netip.MustParseAddr(ep.Addresses[0]).As16() // validated above; IPv4 is v4-mapped
			}
			if ep.NodeName != nil && *ep.NodeName != "" {
				e.node = unique.Make(strings.ToLower(*ep.NodeName))
			}
			c := ep.Conditions
			if c.Ready != nil {
				e.ready = *c.Ready
			}
			e.serving = e.ready
			if c.Serving != nil {
				e.serving = *c.Serving
			}
			if c.Terminating != nil {
				e.terminating = *c.Terminating
			}
			k.endpoints = append(k.endpoints, e)
		}
		if len(k.endpoints) < cap(k.endpoints)/2 {
			k.endpoints = append([]kEndpoint(nil), k.endpoints...) // most were dropped: do not keep the room
			if k.hostnames != nil {
				k.hostnames = append([]string(nil), k.hostnames...)
			}
		}
		return k, nil
	}
}

// transformNode converts a *v1.Node into a *kNode.
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	k := &kNode{kMeta: slimMeta(&n.ObjectMeta)}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse {
			k.readyFalse = true
		}
	}
	for _, a := range n.Status.Addresses {
		t := strings.ToLower(string(a.Type))
		if _, ok := k.addresses[t]; ok || a.Address == "" {
			continue
		}
		if k.addresses == nil {
			k.addresses = make(map[string]string, 2)
		}
		k.addresses[t] = a.Address
	}
	return k, nil
}

// kNamespace is the slim form of a v1.Namespace: its name.
type kNamespace struct{ kMeta }

// transformNamespace converts a *v1.Namespace into a *kNamespace.
func transformNamespace(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &kNamespace{kMeta: slimMeta(&n.ObjectMeta)}, nil
}

// runtime.Object for the informer's store.

func (k *kNamespace) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies k.
func (k *kNamespace) DeepCopyObject() runtime.Object { c := *k; return &c }

func (k *kService) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (k *kSlice) GetObjectKind() schema.ObjectKind   { return schema.EmptyObjectKind }
func (k *kNode) GetObjectKind() schema.ObjectKind    { return schema.EmptyObjectKind }

// DeepCopyObject copies k; the slices inside are never modified after the
// transform, so they are shared.
func (k *kService) DeepCopyObject() runtime.Object { c := *k; return &c }

// DeepCopyObject copies k (shared, never modified, inner slices).
func (k *kSlice) DeepCopyObject() runtime.Object { c := *k; return &c }

// DeepCopyObject copies k (shared, never modified, address map).
func (k *kNode) DeepCopyObject() runtime.Object { c := *k; return &c }

// kMeta is the part of an object's metadata the informers need. It
// implements metav1.Object: the three fields it keeps read and write, every
// other getter returns the zero value and every other setter does nothing.
type kMeta struct {
	Name, Namespace, ResourceVersion string
}

var _ metav1.Object = (*kMeta)(nil)

// less orders objects by namespace, then name: the order the mappings
// emit, so that the same objects give the same state.
func (m *kMeta) less(o *kMeta) bool {
	if m.Namespace != o.Namespace {
		return m.Namespace < o.Namespace
	}
	return m.Name < o.Name
}

func (m *kMeta) GetNamespace() string                  { return m.Namespace }
func (m *kMeta) SetNamespace(ns string)                { m.Namespace = ns }
func (m *kMeta) GetName() string                       { return m.Name }
func (m *kMeta) SetName(name string)                   { m.Name = name }
func (m *kMeta) GetResourceVersion() string            { return m.ResourceVersion }
func (m *kMeta) SetResourceVersion(v string)           { m.ResourceVersion = v }
func (m *kMeta) GetGenerateName() string               { return "" }
func (m *kMeta) SetGenerateName(string)                {}
func (m *kMeta) GetUID() types.UID                     { return "" }
func (m *kMeta) SetUID(types.UID)                      {}
func (m *kMeta) GetGeneration() int64                  { return 0 }
func (m *kMeta) SetGeneration(int64)                   {}
func (m *kMeta) GetSelfLink() string                   { return "" }
func (m *kMeta) SetSelfLink(string)                    {}
func (m *kMeta) GetCreationTimestamp() metav1.Time     { return metav1.Time{} }
func (m *kMeta) SetCreationTimestamp(metav1.Time)      {}
func (m *kMeta) GetDeletionTimestamp() *metav1.Time    { return nil }
func (m *kMeta) SetDeletionTimestamp(*metav1.Time)     {}
func (m *kMeta) GetDeletionGracePeriodSeconds() *int64 { return nil }
func (m *kMeta) SetDeletionGracePeriodSeconds(*int64)  {}
func (m *kMeta) GetLabels() map[string]string          { return nil }
func (m *kMeta) SetLabels(map[string]string)           {}
func (m *kMeta) GetAnnotations() map[string]string     { return nil }
func (m *kMeta) SetAnnotations(map[string]string)      {}
func (m *kMeta) GetFinalizers() []string               { return nil }
func (m *kMeta) SetFinalizers([]string)                {}
func (m *kMeta) GetOwnerReferences() []metav1.OwnerReference {
	return nil
}
func (m *kMeta) SetOwnerReferences([]metav1.OwnerReference) {}
func (m *kMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	return nil
}
func (m *kMeta) SetManagedFields([]metav1.ManagedFieldsEntry) {}
