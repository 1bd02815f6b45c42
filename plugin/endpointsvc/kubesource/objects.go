package kubesource

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	itab "github.com/meshdns/meshdns/plugin/pkg/intern"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// The slim objects below are what the informers store instead of the API
// objects: the transforms keep only the fields the mappings read (as the
// kubernetes plugin's object package does, coredns#2095). Services and
// EndpointSlices become the Kubernetes DNS model's objects (k8sdns), which
// the table of schema kubernetes shares with the stores; schema orch maps
// the same objects onto its own model (orch.go). Each embeds a kMeta
// holding only name, namespace and resourceVersion (a full ObjectMeta is
// 232 bytes even when empty), enough for the informer's key function and
// the resourceVersion check on updates.

// kService is the slim form of a v1.Service.
type kService struct {
	kMeta
	svc       k8sdns.Service
	nodePorts []int32 // spec.ports[].nodePort, parallel to svc.Ports; nil when none has one (schema orch)
	skip      bool    // outside the configured namespaces
	selector  bool    // spec.selector is set (the service_kind of a headless Service)

	// orch is the Service as schema orch maps it (orchService), made on
	// first use: a stored object never changes (an update stores a new
	// one), so each is mapped once, not on every change of its slices.
	orch atomic.Pointer[orchMapped]
}

// kSlice is the slim form of a discovery/v1 EndpointSlice: every
// endpoint with every address, hostname, node, target Pod and condition.
type kSlice struct {
	kMeta
	sl      k8sdns.Slice
	skip    bool  // outside the configured namespaces
	trigger int64 // last-change-trigger-time, unix nanoseconds; 0: none (programmed.go)
	// initialEventsEnd: a watch-list's closing bookmark (the slim
	// decoder's), which the reflector knows by its annotation
	initialEventsEnd bool
}

// GetAnnotations is the one annotation the informer reads of a slice: the
// closing bookmark's of a watch-list.
func (k *kSlice) GetAnnotations() map[string]string {
	if k.initialEventsEnd {
		return map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return nil
}

// kNode is the slim form of a v1.Node (schema orch).
type kNode struct {
	kMeta
	readyFalse bool                     // the Ready condition is False
	addresses  [nodeAddressTypes]string // the first address of each of NodeAddressTypes ("": none); others are never read
}

// kNamespace is the slim form of a v1.Namespace: its name.
type kNamespace struct{ kMeta }

func slimMeta(m *metav1.ObjectMeta) kMeta {
	return kMeta{Name: m.Name, Namespace: intern(m.Namespace), ResourceVersion: m.ResourceVersion}
}

// intern returns the canonical copy of s, so that the namespace names of
// thousands of objects share their bytes (through a table: one event,
// one lookup).
func intern(s string) string { return namespaceNames.String(s) }

// namespaces interns the objects' namespace names.
var namespaceNames itab.Table

// transformService converts a *v1.Service into a *kService; anything else
// (already slim, a tombstone) passes unchanged. skip marks namespaces
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
		k.svc = modelService(s, k.Namespace)
		k.selector = len(s.Spec.Selector) > 0
		for i, p := range s.Spec.Ports {
			if p.NodePort != 0 && k.nodePorts == nil {
				k.nodePorts = make([]int32, len(s.Spec.Ports))
			}
			if k.nodePorts != nil {
				k.nodePorts[i] = p.NodePort
			}
		}
		return k, nil
	}
}

// modelService is a Service as the model keeps it: the kubernetes plugin's
// reading (type ExternalName first; headless when the first cluster IP is
// None; otherwise its cluster IPs). ns is its namespace, interned.
func modelService(s *corev1.Service, ns string) k8sdns.Service {
	m := k8sdns.Service{Namespace: ns, Name: s.Name, PublishNotReady: s.Spec.PublishNotReadyAddresses}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	switch {
	case s.Spec.Type == corev1.ServiceTypeExternalName:
		m.Kind, m.ExternalName = k8sdns.ExternalName, s.Spec.ExternalName
	case len(ips) > 0 && ips[0] == corev1.ClusterIPNone:
		m.Kind = k8sdns.Headless
	default:
		for _, ip := range ips {
			if a, err := netip.ParseAddr(ip); err == nil && a.Zone() == "" {
				m.ClusterIPs = append(m.ClusterIPs, a.Unmap())
			}
		}
	}
	m.ExternalIPs = externalIPs(s)
	if len(s.Spec.Ports) > 0 {
		m.Ports = make([]k8sdns.Port, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			m.Ports[i] = k8sdns.Port{Name: p.Name, Protocol: k8sdns.Protocol(string(p.Protocol)), Port: p.Port}
		}
	}
	return m
}

// externalIPs are what k8s_external answers for s, as the kubernetes
// plugin reads them: spec.externalIPs, then each LoadBalancer ingress's IP,
// or its hostname when it has none; nil when there are none.
func externalIPs(s *corev1.Service) []string {
	n := len(s.Spec.ExternalIPs) + len(s.Status.LoadBalancer.Ingress)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	out = append(out, s.Spec.ExternalIPs...)
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			out = append(out, in.IP)
			continue
		}
		out = append(out, in.Hostname)
	}
	return out
}

// transformSlice converts a *discoveryv1.EndpointSlice into a *kSlice;
// with mc (multicluster) it keeps the slice's multicluster labels. A
// *kSlice (the slim decoder's, which keeps them and every namespace) gets
// the same filter and labels; anything else passes unchanged.
func transformSlice(namespaces map[string]bool, mc bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		if k, ok := obj.(*kSlice); ok {
			return filterSlice(k, namespaces, mc), nil
		}
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return obj, nil
		}
		k := &kSlice{kMeta: slimMeta(&s.ObjectMeta)}
		if namespaces != nil && !namespaces[strings.ToLower(s.Namespace)] {
			k.skip = true
			return k, nil
		}
		k.sl = modelSlice(s, k.Namespace)
		k.trigger = triggerTime(&s.ObjectMeta)
		if mc {
			k.sl.Import, k.sl.Cluster = s.Labels[mcsapi.LabelServiceName], s.Labels[mcsapi.LabelSourceCluster]
		}
		return k, nil
	}
}

// filterSlice is transformSlice of a slim decoder's kSlice: skipped
// outside the namespaces, without its multicluster labels unless mc. It
// changes k only where k is the decoder's own, not yet stored (a stored
// kSlice has been filtered already: nothing to change).
func filterSlice(k *kSlice, namespaces map[string]bool, mc bool) *kSlice {
	switch {
	case k.skip:
		return k
	case namespaces != nil && !namespaces[strings.ToLower(k.Namespace)]:
		return &kSlice{kMeta: k.kMeta, skip: true}
	case !mc && (k.sl.Import != "" || k.sl.Cluster != ""):
		k.sl.Import, k.sl.Cluster = "", ""
	}
	return k
}

// modelSlice is a slice as the model keeps it: every endpoint, with the
// addresses that fit its address type (the API admits no other). ns is
// its namespace, interned (slimMeta's: one lookup an event).
func modelSlice(s *discoveryv1.EndpointSlice, ns string) k8sdns.Slice {
	m := k8sdns.Slice{Namespace: ns, Name: s.Name, Service: s.Labels[discoveryv1.LabelServiceName]}
	t, ok := k8sdns.ParseAddressType(string(s.AddressType))
	if !ok {
		return m // an address type we cannot answer with
	}
	m.Type = t
	if len(s.Ports) > 0 {
		m.Ports = make([]k8sdns.Port, len(s.Ports))
		for i, p := range s.Ports {
			m.Ports[i] = k8sdns.Port{Name: deref(p.Name), Port: -1}
			if p.Protocol != nil {
				m.Ports[i].Protocol = k8sdns.Protocol(string(*p.Protocol))
			}
			if p.Port != nil {
				m.Ports[i].Port = *p.Port
			}
		}
	}
	addresses, text := 0, 0
	for _, ep := range s.Endpoints {
		addresses += len(ep.Addresses)
		text += len(deref(ep.Hostname))
		if ep.TargetRef != nil {
			text += len(ep.TargetRef.Name)
		}
	}
	m.Reserve(len(s.Endpoints), addresses, text)
	for _, ep := range s.Endpoints {
		e := k8sdns.EndpointSpec{Addresses: ep.Addresses, Hostname: deref(ep.Hostname), NodeName: deref(ep.NodeName),
			Ready: k8sdns.Cond(ep.Conditions.Ready), Serving: k8sdns.Cond(ep.Conditions.Serving), Terminating: k8sdns.Cond(ep.Conditions.Terminating)}
		if ep.TargetRef != nil {
			e.TargetRef = ep.TargetRef.Name
		}
		addEndpointSpec(&m, e)
	}
	m.Compact()
	return m
}

// addEndpointSpec adds e to sl with the addresses that fit its type (one
// that does not cannot pass the API's validation); an endpoint with none
// left is left out.
func addEndpointSpec(sl *k8sdns.Slice, e k8sdns.EndpointSpec) {
	if sl.Add(e) == nil {
		return
	}
	e.Addresses = slices.DeleteFunc(slices.Clone(e.Addresses), func(a string) bool {
		return (&k8sdns.Slice{Type: sl.Type}).Add(k8sdns.EndpointSpec{Addresses: []string{a}}) != nil
	})
	_ = sl.Add(e)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
		if i := slices.Index(NodeAddressTypes, strings.ToLower(string(a.Type))); i >= 0 && k.addresses[i] == "" {
			k.addresses[i] = a.Address
		}
	}
	return k, nil
}

// address is the node's first address of type t (one of
// NodeAddressTypes), or "".
func (k *kNode) address(t string) string {
	if i := slices.Index(NodeAddressTypes, t); i >= 0 {
		return k.addresses[i]
	}
	return ""
}

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
// transform, so they are shared (and so is its orch mapping).
func (k *kService) DeepCopyObject() runtime.Object {
	c := &kService{kMeta: k.kMeta, svc: k.svc, nodePorts: k.nodePorts, skip: k.skip, selector: k.selector}
	c.orch.Store(k.orch.Load())
	return c
}

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

// compare orders objects by namespace, then name: the order the mappings
// emit, so that the same objects give the same state.
func (m *kMeta) compare(o *kMeta) int {
	return feed.CompareNames(m.Namespace, m.Name, o.Namespace, o.Name)
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
