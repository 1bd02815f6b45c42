package kubesource

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// podEvents replays Pod events as an informer does: the transform,
// then the store, then the handler.
type podEvents struct {
	store cache.Store
	tr    cache.TransformFunc
	w     *watcher
	h     cache.ResourceEventHandlerFuncs
}

func newPodEvents() *podEvents {
	e := &podEvents{store: cache.NewStore(cache.MetaNamespaceKeyFunc), w: &watcher{changed: &dirty{}, kick: make(chan struct{}, 1), pods: newPodIndex()}}
	e.tr, e.h = transformPod(e.store), e.w.podHandler(&Stats{})
	return e
}

func (e *podEvents) apply(op string, p *corev1.Pod) {
	obj, _ := e.tr(p.DeepCopy())
	old, had, _ := e.store.Get(obj)
	switch {
	case op == "delete":
		_ = e.store.Delete(obj)
		e.h.OnDelete(obj)
	case had:
		_ = e.store.Update(obj)
		e.h.OnUpdate(old, obj)
	default:
		_ = e.store.Add(obj)
		e.h.OnAdd(obj, false)
	}
}

func (e *podEvents) index() string {
	var out []string
	for _, p := range e.w.pods.all() {
		out = append(out, fmt.Sprintf("%s%v", p.Addr, p.Namespaces))
	}
	return fmt.Sprint(out)
}

func testPod(ns, name string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// TestPodIndexEvents: the pod index follows the kubernetes plugin's
// reading of Pod events - hostNetwork Pods sharing an address count once
// each; a Pod that becomes terminating keeps its addresses until deleted;
// one first seen terminating is left out; a Pod whose end (a phase the
// field selector leaves out, sent as deleted) comes without its addresses
// still leaves the index; every change marks its addresses.
func TestPodIndexEvents(t *testing.T) {
	e := newPodEvents()
	now := metav1.Now()
	steps := []struct {
		op   string
		pod  *corev1.Pod
		want string
	}{
		{"add", testPod("shop", "web", corev1.PodRunning, "10.244.1.5", "fd00::5"), "[10.244.1.5[shop] fd00::5[shop]]"},
		{"add", testPod("kube-system", "agent-a", corev1.PodRunning, "10.250.0.1"), "[10.244.1.5[shop] 10.250.0.1[kube-system] fd00::5[shop]]"},
		{"add", testPod("kube-system", "agent-b", corev1.PodRunning, "10.250.0.1"), "[10.244.1.5[shop] 10.250.0.1[kube-system kube-system] fd00::5[shop]]"},
		{"add", testPod("default", "agent-c", corev1.PodRunning, "10.250.0.1"), "[10.244.1.5[shop] 10.250.0.1[default kube-system kube-system] fd00::5[shop]]"},
		{"delete", testPod("kube-system", "agent-b", corev1.PodRunning, "10.250.0.1"), "[10.244.1.5[shop] 10.250.0.1[default kube-system] fd00::5[shop]]"},
		{"update", func() *corev1.Pod {
			p := testPod("shop", "web", corev1.PodRunning)
			p.DeletionTimestamp = &now
			return p
		}(), "[10.244.1.5[shop] 10.250.0.1[default kube-system] fd00::5[shop]]"},
		{"delete", testPod("shop", "web", corev1.PodFailed), "[10.250.0.1[default kube-system]]"},
		{"add", func() *corev1.Pod {
			p := testPod("shop", "old", corev1.PodRunning, "10.244.1.9")
			p.DeletionTimestamp = &now
			return p
		}(), "[10.250.0.1[default kube-system]]"},
		{"add", testPod("shop", "starting", corev1.PodPending), "[10.250.0.1[default kube-system]]"},
		{"update", testPod("shop", "starting", corev1.PodRunning, "10.244.2.2"), "[10.244.2.2[shop] 10.250.0.1[default kube-system]]"},
	}
	for i, s := range steps {
		e.w.changed.take()
		e.apply(s.op, s.pod)
		if got := e.index(); got != s.want {
			t.Fatalf("step %d (%s %s/%s): index %s, want %s", i, s.op, s.pod.Namespace, s.pod.Name, got, s.want)
		}
		marked := e.w.changed.take().pods
		for _, ip := range s.pod.Status.PodIPs {
			if a := netip.MustParseAddr(ip.IP); !marked[a] && s.pod.DeletionTimestamp == nil {
				t.Errorf("step %d: %s not marked", i, a)
			}
		}
	}
	if got := DNSPods([]*corev1.Pod{testPod("a", "x", corev1.PodSucceeded, "10.0.0.1"), testPod("a", "y", corev1.PodRunning, "10.0.0.2")}); !slices.EqualFunc(got,
		[]k8sdns.PodAddr{{Addr: netip.MustParseAddr("10.0.0.2"), Namespaces: []string{"a"}}}, func(a, b k8sdns.PodAddr) bool { return a.Addr == b.Addr && slices.Equal(a.Namespaces, b.Namespaces) }) {
		t.Errorf("DNSPods: %v", got)
	}
}
