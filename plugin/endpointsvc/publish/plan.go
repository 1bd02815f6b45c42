package publish

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ManagedBy is the value of the endpointslice.kubernetes.io/managed-by
// label on the slices the publishers write: the EndpointSlice controller
// leaves slices with another value alone, and the publishers touch no
// other slice.
const ManagedBy = "endpointsvc.meshdns.io"

// inputs is what one reconciliation reads: the cache's view of the
// Service, the replicas' pods and the slices, and this replica's own state.
type inputs struct {
	self     string // this replica's pod name
	serving  bool   // this replica answers from a table
	probed   bool   // this replica's DNS server answered a probe once
	stopping bool   // this replica received SIGTERM: it answers on, but leaves
	draining bool   // stopping, and about to exit: not serving either, when a peer is ready
	service  *corev1.Service
	pods     []*corev1.Pod
	slices   []*discoveryv1.EndpointSlice
	// live names the peers whose Lease this replica saw renewed within
	// the lease duration (by its own clock): they reach the API and write
	// their own slices, so no one else does (see writer).
	live map[string]bool
	// selfLive: this replica's own Lease was renewed within two thirds
	// of the lease duration (by its own clock, from when it sent the
	// renewal), so that its peers count it live for a while yet.
	selfLive bool
	// down names the peers that failed direct probes long enough while
	// their Lease has lapsed: both signals agree that they are gone.
	down map[string]bool
}

// action is one write to the API.
type action struct {
	op    op
	slice *discoveryv1.EndpointSlice // the slice to create or the updated copy; for delete, the one to delete
}

type op int

const (
	opCreate op = iota
	opUpdate
	opDelete
)

func (o op) String() string { return [...]string{"create", "update", "delete"}[o] }

// plan returns the writes that bring the slices to what the inputs call
// for. The rules, which every replica applies alike so that they converge:
//
//   - each replica writes its own endpoint's truth: ready while it serves
//     and is not stopping, serving while it serves, terminating once it
//     stops or its pod is being deleted; shortly before it exits (draining)
//     it stops serving too, when a peer is ready, so that kube-proxy clears
//     the UDP conntrack entries that still lead to it. The pod's Ready condition plays no
//     part: after a long API-server outage the node controller marks every
//     pod of the node not ready until the kubelet reports again, and a
//     replica that answers must not leave the Service for that;
//   - it creates its slice only once it serves and its DNS server answered
//     a probe (a replica with no table would only take queries it cannot
//     answer); a slice it has already is kept ready without waiting for a
//     probe (a reload starts a new publisher on the same server);
//   - for a peer it only ever takes the endpoint out: terminating when the
//     peer's pod is being deleted (the peer may be dead and unable to say
//     so itself), not ready and not serving when it is down (see inputs);
//     it changes nothing else of a peer's slice (the publish policy,
//     deploy/kubernetes/publish-policy.yaml, admits no more);
//   - a slice whose pod is gone or finished is deleted (its owner reference
//     lets the garbage collector do the same; this covers a lagging GC);
//   - one writer decides each slice (writer): its own replica while that
//     one's Lease is live, else one steward for all the silent ones, so
//     that a peer's verdict never fights a replica's own write; a replica
//     whose own Lease has lapsed writes nothing of its own.
//
// Writes are planned only where the result differs from the slice as it is.
func plan(in inputs) []action {
	if in.service == nil {
		return nil
	}
	pods := make(map[string]*corev1.Pod, len(in.pods))
	for _, p := range in.pods {
		pods[p.Name] = p
	}
	var out []action
	have := map[string]bool{}
	steward := stewardOf(in)
	for _, sl := range in.slices {
		have[sl.Name] = true
		pod := pods[slicePod(sl)]
		if writer(in, slicePod(sl), steward) != in.self {
			continue
		}
		switch {
		case pod == nil || pod.UID != sliceOwner(sl) || finished(pod):
			out = append(out, action{opDelete, sl})
		case pod.Name != in.self:
			if want := peerSlice(in, pod, sl); want == nil {
				out = append(out, action{opDelete, sl})
			} else if !sameSlice(sl, want) {
				out = append(out, action{opUpdate, want})
			}
		default:
			want := wantSlice(in, pod, sl.AddressType)
			if want == nil {
				out = append(out, action{opDelete, sl})
				continue
			}
			if !sameSlice(sl, want) {
				upd := sl.DeepCopy()
				upd.Labels, upd.OwnerReferences = want.Labels, want.OwnerReferences
				upd.Ports, upd.Endpoints = want.Ports, want.Endpoints
				out = append(out, action{opUpdate, upd})
			}
		}
	}
	self := pods[in.self]
	if self != nil && writer(in, in.self, steward) == in.self && in.serving && in.probed && !in.stopping && !finished(self) {
		for _, fam := range families(in.service) {
			want := wantSlice(in, self, fam)
			if want != nil && !have[want.Name] {
				out = append(out, action{opCreate, want})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].slice.Name < out[j].slice.Name })
	return out
}

// writer is the one replica that writes pod's slices, or "": the replica
// itself while its Lease is live, else the steward - but never a replica
// whose own Lease has lapsed for its own slices (its peers may already
// count it silent). Replicas with the same view of the Leases never both
// plan a write to one slice. Views differ by when each saw a renewal, and
// always in the safe direction: a replica's own view of its Lease lapses
// before any peer's does (it counts from when it sent the renewal, they
// from when they saw it), and a steward confirms the lapse with the API
// before it writes (Publisher.confirmLapsed).
func writer(in inputs, pod, steward string) string {
	switch {
	case pod == in.self && in.selfLive, pod != in.self && in.live[pod]:
		return pod
	case pod == in.self && steward == in.self:
		return ""
	}
	return steward
}

// stewardOf is the replica that writes the slices of the silent ones (no
// live Lease: dead, cut off from the API, or of a version before Leases):
// the first by name of the replicas with a live Lease whose pods are not
// being deleted or finished (every replica's view of which agrees); this
// replica when there is none. Several stewards (no live replica, as
// before Leases) write alike: a steward only takes endpoints out, and
// writes nothing of its own slices.
func stewardOf(in inputs) string {
	best := ""
	for _, pod := range in.pods {
		cand := (pod.Name == in.self && in.selfLive) || (pod.Name != in.self && in.live[pod.Name])
		if cand && pod.DeletionTimestamp == nil && !finished(pod) && (best == "" || pod.Name < best) {
			best = pod.Name
		}
	}
	if best == "" {
		return in.self
	}
	return best
}

// wantSlice is this replica's slice (pod) for address type fam as the rules want it,
// or nil when the pod has no address of that family or the Service no
// such family.
func wantSlice(in inputs, pod *corev1.Pod, fam discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	addr := podAddr(pod, fam)
	if addr == "" || !hasFamily(in.service, fam) {
		return nil
	}
	ready, serving, terminating := conditions(in, pod)
	ep := discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.NodeName != "" {
		node := pod.Spec.NodeName
		ep.NodeName = &node
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SliceName(in.service.Name, pod.Name, fam),
			Namespace: in.service.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: in.service.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		AddressType: fam,
		Endpoints:   []discoveryv1.Endpoint{ep},
		Ports:       slicePorts(in.service, pod),
	}
}

// conditions are the endpoint conditions of this replica's own slice:
// its own state.
func conditions(in inputs, pod *corev1.Pod) (ready, serving, terminating bool) {
	serving = in.serving && !(in.draining && peerReady(in))
	terminating = in.stopping || pod.DeletionTimestamp != nil
	return serving && !terminating, serving, terminating
}

// peerSlice is a peer's slice sl as this replica leaves it, or nil when
// the Service no longer has its family: as it is, with its endpoints taken
// out where the peer's pod is being deleted (terminating, not ready) or
// the peer is down (not ready, not serving). A condition is never put
// back, and nothing else changes.
func peerSlice(in inputs, pod *corev1.Pod, sl *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	if !hasFamily(in.service, sl.AddressType) {
		return nil
	}
	out := sl.DeepCopy()
	for i := range out.Endpoints {
		c := &out.Endpoints[i].Conditions
		if pod.DeletionTimestamp != nil {
			setCond(&c.Ready, false, true)
			setCond(&c.Terminating, true, false)
		}
		if in.down[pod.Name] && !in.live[pod.Name] {
			setCond(&c.Ready, false, true)
			setCond(&c.Serving, false, true)
		}
	}
	return out
}

// setCond sets the condition *c to v unless it means v already (nil means
// def).
func setCond(c **bool, v, def bool) {
	if (*c == nil && v != def) || (*c != nil && **c != v) {
		*c = &v
	}
}

// peerReady reports whether another replica's endpoint is ready, so that
// this one may stop serving before it exits. kube-proxy deletes the UDP
// conntrack entries of an endpoint only once it is not serving; an entry
// left to a replica that has exited sends every later query that happens to
// reuse its source port there (and into a timeout) for the entry's 30 s.
func peerReady(in inputs) bool {
	for _, sl := range in.slices {
		if slicePod(sl) == in.self {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				return true
			}
		}
	}
	return false
}

// SliceName is the name of pod's slice of address type fam for service:
// one per replica and family, so that each replica writes its own.
func SliceName(service, pod string, fam discoveryv1.AddressType) string {
	suffix := "ipv4"
	if fam == discoveryv1.AddressTypeIPv6 {
		suffix = "ipv6"
	}
	return fmt.Sprintf("%s-%s-%s", service, pod, suffix)
}

// slicePod is the pod a slice of ours publishes (its owner's name).
func slicePod(sl *discoveryv1.EndpointSlice) string {
	for _, o := range sl.OwnerReferences {
		if o.Kind == "Pod" {
			return o.Name
		}
	}
	return ""
}

// sliceOwner is the UID of the pod that owns a slice of ours.
func sliceOwner(sl *discoveryv1.EndpointSlice) types.UID {
	for _, o := range sl.OwnerReferences {
		if o.Kind == "Pod" {
			return o.UID
		}
	}
	return ""
}

// finished reports whether pod will run no more (or has no address yet to
// publish).
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// families are the address types the Service serves, in its order.
func families(svc *corev1.Service) []discoveryv1.AddressType {
	if len(svc.Spec.IPFamilies) == 0 {
		return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
	}
	out := make([]discoveryv1.AddressType, 0, len(svc.Spec.IPFamilies))
	for _, f := range svc.Spec.IPFamilies {
		if f == corev1.IPv6Protocol {
			out = append(out, discoveryv1.AddressTypeIPv6)
		} else {
			out = append(out, discoveryv1.AddressTypeIPv4)
		}
	}
	return out
}

func hasFamily(svc *corev1.Service, fam discoveryv1.AddressType) bool {
	for _, f := range families(svc) {
		if f == fam {
			return true
		}
	}
	return false
}

// podAddr is the pod's first address of family fam, or "".
func podAddr(pod *corev1.Pod, fam discoveryv1.AddressType) string {
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil {
			continue
		}
		if a.Unmap().Is4() == (fam == discoveryv1.AddressTypeIPv4) {
			return a.Unmap().String()
		}
	}
	return ""
}

// slicePorts are the Service's ports as the pod serves them: a numeric
// targetPort as it is, a named one looked up in the pod's container ports
// (a port the pod does not have is left out, as the EndpointSlice
// controller does).
func slicePorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		var port int32
		switch tp := sp.TargetPort; {
		case tp.Type == intstr.String:
			port = containerPort(pod, tp.StrVal, sp.Protocol)
		case tp.IntVal != 0:
			port = tp.IntVal
		default:
			port = sp.Port // no targetPort: the Service's port
		}
		if port == 0 {
			continue
		}
		name, proto, p := sp.Name, sp.Protocol, port
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &p})
	}
	return out
}

// containerPort is the number of the pod's container port named name with
// protocol proto, or 0.
func containerPort(pod *corev1.Pod, name string, proto corev1.Protocol) int32 {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			pp := p.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if p.Name == name && pp == proto {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// sameSlice reports whether a slice already is as wanted (the fields the
// publishers own).
func sameSlice(have, want *discoveryv1.EndpointSlice) bool {
	return have.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have.Labels, want.Labels) &&
		apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		apiequality.Semantic.DeepEqual(have.Ports, want.Ports) &&
		apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints)
}
