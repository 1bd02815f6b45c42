package publish

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns", Namespace: "kube-system"},
		Spec: corev1.ServiceSpec{
			ClusterIP:  "10.96.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromString("dns-tcp")},
				{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9153},
			},
		},
	}
}

func testPod(name, ip string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID("uid-" + name),
			Labels: map[string]string{"app.kubernetes.io/name": "meshdns"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "meshdns", Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// cond is a slice's first endpoint's conditions as a string.
func cond(sl *discoveryv1.EndpointSlice) string {
	c := sl.Endpoints[0].Conditions
	s := ""
	for _, x := range []struct {
		n string
		v *bool
	}{{"R", c.Ready}, {"S", c.Serving}, {"T", c.Terminating}} {
		if x.v != nil && *x.v {
			s += x.n
		} else {
			s += "-"
		}
	}
	return s
}

// applied returns the slices after the actions.
func applied(slices []*discoveryv1.EndpointSlice, acts []action) []*discoveryv1.EndpointSlice {
	by := map[string]*discoveryv1.EndpointSlice{}
	for _, sl := range slices {
		by[sl.Name] = sl
	}
	for _, a := range acts {
		if a.op == opDelete {
			delete(by, a.slice.Name)
		} else {
			by[a.slice.Name] = a.slice
		}
	}
	out := []*discoveryv1.EndpointSlice{}
	for _, sl := range by {
		out = append(out, sl)
	}
	return out
}

func TestPlanSelf(t *testing.T) {
	svc := testService()
	a, b := testPod("meshdns-a", "10.244.0.5", true), testPod("meshdns-b", "10.244.0.6", true)
	pods := []*corev1.Pod{a, b}

	// not serving yet: nothing published
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", service: svc, pods: pods}); len(acts) != 0 {
		t.Fatalf("not serving: %v actions, want none", len(acts))
	}
	// serving: its own slice, with the Service's ports (the named
	// targetPort resolved, the unset one the Service's port)
	acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods})
	if len(acts) != 1 || acts[0].op != opCreate {
		t.Fatalf("serving: %+v, want one create", acts)
	}
	sl := acts[0].slice
	if sl.Name != "meshdns-meshdns-a-ipv4" || sl.Labels[discoveryv1.LabelServiceName] != "meshdns" ||
		sl.Labels[discoveryv1.LabelManagedBy] != ManagedBy || sl.OwnerReferences[0].UID != a.UID {
		t.Errorf("slice meta: %+v", sl.ObjectMeta)
	}
	if got := sl.Endpoints[0].Addresses[0]; got != "10.244.0.5" || cond(sl) != "RS-" || *sl.Endpoints[0].NodeName != "node-1" {
		t.Errorf("endpoint %s %s, want 10.244.0.5 RS-", got, cond(sl))
	}
	if len(sl.Ports) != 3 || *sl.Ports[1].Port != 53 || *sl.Ports[2].Port != 9153 {
		t.Errorf("ports %+v", sl.Ports)
	}
	slices := []*discoveryv1.EndpointSlice{sl}

	// nothing changed: nothing to write
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices}); len(acts) != 0 {
		t.Errorf("unchanged: %d actions", len(acts))
	}
	// a reload starts a new publisher that has not probed yet: the slice
	// it has stays as it is
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, service: svc, pods: pods, slices: slices}); len(acts) != 0 {
		t.Errorf("not probed yet, slice exists: %d actions, want none", len(acts))
	}
	// the node controller marks the pod not ready after an API outage: the
	// replica answers, so its endpoint stays ready
	a.Status.Conditions[0].Status = corev1.ConditionFalse
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices}); len(acts) != 0 {
		t.Errorf("pod marked not ready while serving: %d actions, want none", len(acts))
	}
	// SIGTERM: terminating, still serving, not ready
	acts = plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, stopping: true, service: svc, pods: pods, slices: slices})
	if len(acts) != 1 || acts[0].op != opUpdate || cond(acts[0].slice) != "-ST" {
		t.Fatalf("stopping: %+v", acts)
	}
	// about to exit: still serving while no peer is ready (kube-proxy's
	// last resort), not serving once one is
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, stopping: true, draining: true, service: svc, pods: pods, slices: slices}); len(acts) != 1 || cond(acts[0].slice) != "-ST" {
		t.Errorf("draining alone: %+v", acts)
	}
	peer := plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: svc, pods: pods})[0].slice
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, stopping: true, draining: true, service: svc, pods: pods, slices: append(slices, peer)}); len(acts) != 1 || cond(acts[0].slice) != "--T" {
		t.Errorf("draining beside a ready peer: %+v", acts)
	}
	// the pod is gone: its slice is deleted (by whoever sees it first)
	acts = plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: svc, pods: []*corev1.Pod{b}, slices: slices})
	if got := applied(slices, acts); len(got) != 1 || got[0].Name != "meshdns-meshdns-b-ipv4" {
		t.Errorf("pod gone: slices after %v", got)
	}
}

func TestPlanPeers(t *testing.T) {
	svc := testService()
	a, b := testPod("meshdns-a", "10.244.0.5", true), testPod("meshdns-b", "10.244.0.6", true)
	pods := []*corev1.Pod{a, b}
	var slices []*discoveryv1.EndpointSlice
	for _, self := range []string{"meshdns-a", "meshdns-b"} {
		slices = applied(slices, plan(inputs{selfLive: true, self: self, serving: true, probed: true, service: svc, pods: pods, slices: slices}))
	}
	if len(slices) != 2 {
		t.Fatalf("%d slices, want 2", len(slices))
	}
	// a peer never publishes another replica that has no slice, and never
	// marks a peer ready
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices[:1]}); len(acts) > 0 && acts[0].slice.Name == "meshdns-meshdns-b-ipv4" && acts[0].op == opCreate {
		t.Errorf("a created b's slice")
	}
	// b is being deleted: a marks it terminating (b may be dead)
	now := metav1.NewTime(time.Now())
	b.DeletionTimestamp = &now
	acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices})
	if len(acts) != 1 || acts[0].slice.Name != "meshdns-meshdns-b-ipv4" || cond(acts[0].slice) != "-ST" {
		t.Errorf("peer deleting: %+v", acts)
	}
	b.DeletionTimestamp = nil
	// b is down (probes and the API agree): a takes it out
	acts = plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices, down: map[string]bool{"meshdns-b": true}})
	if len(acts) != 1 || cond(acts[0].slice) != "---" {
		t.Fatalf("peer down: %+v", acts)
	}
	slices = applied(slices, acts)
	// a's view of b's slice is kept as it is once b is no longer down: b
	// itself puts it back
	if acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices}); len(acts) != 0 {
		t.Errorf("a rewrote b's slice: %+v", acts)
	}
	acts = plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: svc, pods: pods, slices: slices})
	if len(acts) != 1 || cond(acts[0].slice) != "RS-" {
		t.Errorf("b back: %+v", acts)
	}
}

func TestPlanFamiliesAndStale(t *testing.T) {
	svc := testService()
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	a := testPod("meshdns-a", "10.244.0.5", true)
	a.Status.PodIPs = append(a.Status.PodIPs, corev1.PodIP{IP: "fd00:244::5"})
	acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: []*corev1.Pod{a}})
	if len(acts) != 2 || acts[1].slice.AddressType != discoveryv1.AddressTypeIPv6 || acts[1].slice.Endpoints[0].Addresses[0] != "fd00:244::5" {
		t.Fatalf("dual stack: %+v", acts)
	}
	// a slice of a pod with the same name but another UID (a new pod of a
	// StatefulSet-like name) is stale
	old := acts[0].slice.DeepCopy()
	old.OwnerReferences[0].UID = "uid-old"
	acts = plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: []*corev1.Pod{a}, slices: []*discoveryv1.EndpointSlice{old}})
	if len(acts) != 2 || acts[0].op != opDelete {
		t.Errorf("stale owner: %+v", acts)
	}
	// a finished pod's slice goes
	a.Status.Phase = corev1.PodFailed
	acts = plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: svc, pods: []*corev1.Pod{a}, slices: []*discoveryv1.EndpointSlice{old}})
	if len(acts) != 1 || acts[0].op != opDelete {
		t.Errorf("finished pod: %+v", acts)
	}
}

// TestPlanOneWriter: on generated replica sets (pods ready or not, being
// deleted or finished, slices of present and gone pods with any
// conditions, any Leases live, any peers down, replicas stopping), where
// the replicas share one view of the Leases:
//   - no replica writes the slice of a peer whose Lease is live, nor its
//     own slices while its own Lease has lapsed;
//   - while some replica with a live Lease can steward (not being deleted
//     or finished), no two replicas plan a write to the same slice;
//   - otherwise (every replica its own steward, as before Leases) the
//     replicas that write one slice plan the same write, and it only takes
//     endpoints out: ready or serving never go from false to true.
//
// Seeds: MESHDNS_PUBLISH_SEEDS (default 300).
func TestPlanOneWriter(t *testing.T) {
	seeds := 300
	if s := os.Getenv("MESHDNS_PUBLISH_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	svc := testService()
	for seed := 1; seed <= seeds; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 31))
		pods, live, down, stopping := genReplicas(r)
		slices := genSlices(r, svc, pods)
		steward := false
		for _, pod := range pods {
			steward = steward || (live[pod.Name] && pod.DeletionTimestamp == nil && !finished(pod))
		}
		writes := map[string][]action{}
		writers := map[string][]string{}
		for _, self := range pods {
			if finished(self) {
				continue
			}
			view := map[string]bool{}
			for k, v := range live {
				if k != self.Name && v {
					view[k] = true
				}
			}
			in := inputs{self: self.Name, serving: r.IntN(4) > 0, probed: true, stopping: stopping[self.Name], service: svc,
				pods: pods, slices: slices, live: view, selfLive: live[self.Name], down: down}
			for _, a := range plan(in) {
				owner := slicePod(a.slice)
				if owner != self.Name && live[owner] {
					t.Fatalf("seed %d: %s plans %s of %s, whose Lease is live", seed, self.Name, a.op, a.slice.Name)
				}
				if owner == self.Name && !live[owner] {
					t.Fatalf("seed %d: %s plans %s of its own %s with its Lease lapsed", seed, self.Name, a.op, a.slice.Name)
				}
				writers[a.slice.Name] = append(writers[a.slice.Name], self.Name)
				writes[a.slice.Name] = append(writes[a.slice.Name], a)
			}
		}
		for name, w := range writers {
			if steward && len(w) > 1 {
				t.Fatalf("seed %d: slice %s written by %v", seed, name, w)
			}
			if len(w) < 2 {
				continue
			}
			for _, a := range writes[name][1:] {
				if a.op != writes[name][0].op || !sameSlice(a.slice, writes[name][0].slice) {
					t.Fatalf("seed %d: stewards %v plan different writes of %s", seed, w, name)
				}
			}
			if a := writes[name][0]; a.op == opUpdate && raises(slices, a.slice) {
				t.Fatalf("seed %d: stewards %v put %s back in (%s)", seed, w, name, cond(a.slice))
			}
		}
	}
}

// genReplicas draws 2-5 replicas, some ready, being deleted or finished,
// with their Leases live or not, down (only with a lapsed Lease) and
// stopping.
func genReplicas(r *rand.Rand) (pods []*corev1.Pod, live, down, stopping map[string]bool) {
	live, down, stopping = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range 2 + r.IntN(4) {
		pod := testPod(fmt.Sprintf("meshdns-%c", 'a'+i), fmt.Sprintf("10.244.0.%d", 5+i), r.IntN(2) == 0)
		if r.IntN(5) == 0 {
			now := metav1.NewTime(time.Now())
			pod.DeletionTimestamp = &now
		}
		if r.IntN(8) == 0 {
			pod.Status.Phase = corev1.PodFailed
		}
		live[pod.Name] = r.IntN(3) > 0
		down[pod.Name] = !live[pod.Name] && r.IntN(2) == 0
		stopping[pod.Name] = r.IntN(6) == 0
		pods = append(pods, pod)
	}
	return pods, live, down, stopping
}

// genSlices draws the slices as some earlier rounds left them (any
// conditions), plus one of a pod that is gone.
func genSlices(r *rand.Rand, svc *corev1.Service, pods []*corev1.Pod) []*discoveryv1.EndpointSlice {
	var slices []*discoveryv1.EndpointSlice
	gone := testPod("meshdns-z", "10.244.0.99", true)
	for _, pod := range append(append([]*corev1.Pod{}, pods...), gone) {
		if r.IntN(4) == 0 {
			continue
		}
		sl := plan(inputs{selfLive: true, self: pod.Name, serving: true, probed: true, service: svc, pods: []*corev1.Pod{pod}})
		if len(sl) == 0 {
			continue
		}
		s := sl[0].slice
		c := &s.Endpoints[0].Conditions
		ready, serving := r.IntN(2) == 0, r.IntN(2) == 0
		c.Ready, c.Serving = &ready, &serving
		slices = append(slices, s)
	}
	return slices
}

// raises reports whether upd makes an endpoint of its slice in slices
// ready or serving that was not.
func raises(slices []*discoveryv1.EndpointSlice, upd *discoveryv1.EndpointSlice) bool {
	for _, sl := range slices {
		if sl.Name != upd.Name {
			continue
		}
		was, now := sl.Endpoints[0].Conditions, upd.Endpoints[0].Conditions
		on := func(b *bool) bool { return b == nil || *b }
		return (!on(was.Ready) && on(now.Ready)) || (!on(was.Serving) && on(now.Serving))
	}
	return false
}

// TestPlanSelfLapsed: a replica whose own Lease has lapsed writes nothing
// of its own (its peers may already steward it), and a steward changes
// only the conditions of a peer's slice - not its ports, when the
// Service's changed (the owner writes those).
func TestPlanSelfLapsed(t *testing.T) {
	svc := testService()
	a, b := testPod("meshdns-a", "10.244.0.5", true), testPod("meshdns-b", "10.244.0.6", true)
	pods := []*corev1.Pod{a, b}
	own := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods})[0].slice
	peer := plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: svc, pods: pods})[0].slice
	if acts := plan(inputs{self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods}); len(acts) != 0 {
		t.Errorf("lapsed, no slice: %+v, want nothing created", acts)
	}
	slices := []*discoveryv1.EndpointSlice{own, peer}
	if acts := plan(inputs{self: "meshdns-a", serving: true, probed: true, stopping: true, service: svc, pods: pods, slices: slices,
		live: map[string]bool{"meshdns-b": true}}); len(acts) != 0 {
		t.Errorf("lapsed, stopping: %+v, want nothing written", acts)
	}
	// b lapsed and down, and the Service has a new port: a takes b out
	// and leaves the rest of b's slice as b wrote it
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "extra", Protocol: corev1.ProtocolTCP, Port: 8080})
	acts := plan(inputs{selfLive: true, self: "meshdns-a", serving: true, probed: true, service: svc, pods: pods, slices: slices,
		down: map[string]bool{"meshdns-b": true}})
	var got *discoveryv1.EndpointSlice
	for _, x := range acts {
		if x.slice.Name == peer.Name {
			got = x.slice
		}
	}
	if got == nil || cond(got) != "---" || len(got.Ports) != len(peer.Ports) {
		t.Fatalf("steward's write of b: %+v", got)
	}
}
