package endpointsvc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// observed is the programming latency histogram's sample count and sum
// of kind (the metric is the process's: tests compare before and after).
func observed(t *testing.T, kind string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := programmingLatency.WithLabelValues(kind).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// counts are the sample counts of every kind.
func counts(t *testing.T) map[string]uint64 {
	out := map[string]uint64{}
	for _, k := range feed.Kinds {
		out[k], _ = observed(t, k)
	}
	return out
}

// triggered is a slice of svc with endpoint addr whose trigger time is at
// (zero: none), resourceVersion rv.
func triggered(name, svc, addr string, at time.Time, rv string) *discoveryv1.EndpointSlice {
	sl := kubefix.Slice("default", name, svc, discoveryv1.AddressTypeIPv4, kubefix.EP(addr, ""))
	sl.ResourceVersion = rv
	if !at.IsZero() {
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at.UTC().Format(time.RFC3339Nano)}
	}
	return sl
}

// programmedCluster is a fake cluster of one Service of each kind, each
// with a slice whose trigger time is an hour old.
func programmedCluster(t *testing.T) *fake.Clientset {
	client := fake.NewClientset()
	kubefix.Create(t, client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}})
	old := time.Now().Add(-time.Hour)
	web := kubefix.Service("default", "web", corev1.ServiceTypeClusterIP)
	web.Spec.ClusterIP, web.Spec.ClusterIPs, web.Spec.Selector = "10.96.0.10", []string{"10.96.0.10"}, map[string]string{"app": "web"}
	hl := kubefix.Service("default", "hl", corev1.ServiceTypeClusterIP)
	hl.Spec.ClusterIP, hl.Spec.ClusterIPs, hl.Spec.Selector = "None", []string{"None"}, map[string]string{"app": "hl"}
	manual := kubefix.Service("default", "manual", corev1.ServiceTypeClusterIP)
	manual.Spec.ClusterIP, manual.Spec.ClusterIPs = "None", []string{"None"}
	ext := kubefix.Service("default", "ext", corev1.ServiceTypeExternalName)
	ext.Spec.ExternalName = "example.test"
	for _, o := range []any{web, hl, manual, ext,
		triggered("web-1", "web", "10.1.0.1", old, "1"), triggered("hl-1", "hl", "10.2.0.1", old, "1"),
		triggered("manual-1", "manual", "10.3.0.1", old, "1"), triggered("ext-1", "ext", "10.4.0.1", old, "1")} {
		kubefix.Create(t, client, o)
	}
	return client
}

// startDebounced is startLeader with the source's debounce set.
func startDebounced(t *testing.T, client kubernetes.Interface, debounce time.Duration) (*Endpointsvc, string) {
	t.Helper()
	e := parseTest(t, strings.Replace(ourCorefile, " ttl 30\n", " ttl 30\n replicate 127.0.0.1:0\n", 1))
	src := e.source.(*kubesource.Source)
	src.NewClient = func() (kubernetes.Interface, error) { return client, nil }
	src.Debounce = debounce
	e.start(e.source)
	t.Cleanup(e.stop)
	if err := e.replicating.server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.replicating.server.Stop)
	return e, "http://" + e.replicating.server.Addr()
}

func updateSlice(t *testing.T, client kubernetes.Interface, sl *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := client.DiscoveryV1().EndpointSlices(sl.Namespace).Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAnswer waits until e answers name's A query with addr.
func waitAnswer(t *testing.T, e *Endpointsvc, name, addr string) {
	t.Helper()
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, name, dns.TypeA); !strings.Contains(fmt.Sprint(got), addr) {
			return fmt.Sprintf("%s: %v, want %s", name, got, addr)
		}
		return ""
	})
}

// waitCounts waits until the sample counts are want.
func waitCounts(t *testing.T, want map[string]uint64, what string) {
	t.Helper()
	kubefix.Eventually(t, func() string {
		if got := counts(t); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("%s: observations %v, want %v", what, got, want)
		}
		return ""
	})
}

// TestProgrammingLatency: a slice change with a trigger time is observed
// with its Service's kind once on the replica that watches the API and
// once on its follower, each when its table serves it; the first list,
// an update that changes nothing served, a deletion and an ExternalName's
// slice are not observed.
func TestProgrammingLatency(t *testing.T) {
	client := programmedCluster(t)
	before := counts(t)
	leader, base := startDebounced(t, client, time.Second)
	follower := startFollower(t, base, "")
	waitAnswer(t, follower, "web.default.svc.cluster.local.", "10.96.0.10")
	waitAnswer(t, follower, "hl.default.svc.cluster.local.", "10.2.0.1")
	if got := counts(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("the first list was observed: %v, before %v", got, before)
	}

	want := counts(t)
	// one change of each kind (and of an ExternalName's slice), 2 s after
	// its trigger: observed on both, the sums at least 2 s each
	at := time.Now().Add(-2 * time.Second)
	_, sumBefore := observed(t, feed.KindClusterIP)
	updateSlice(t, client, triggered("web-1", "web", "10.1.0.2", at, "2"))
	updateSlice(t, client, triggered("hl-1", "hl", "10.2.0.2", at, "2"))
	updateSlice(t, client, triggered("manual-1", "manual", "10.3.0.2", at, "2"))
	updateSlice(t, client, triggered("ext-1", "ext", "10.4.0.2", at, "2"))
	for _, k := range feed.Kinds {
		want[k] += 2
	}
	waitCounts(t, want, "a change of each kind")
	waitAnswer(t, follower, "hl.default.svc.cluster.local.", "10.2.0.2")
	if _, sum := observed(t, feed.KindClusterIP); sum-sumBefore < 4 || sum-sumBefore > 60 {
		t.Errorf("cluster_ip: %.3f s observed for two changes triggered 2 s before", sum-sumBefore)
	}

	// not observed: an update of the trigger time alone, a deletion (each
	// followed by a change of hl, observed, that shows they were handled)
	updateSlice(t, client, triggered("web-1", "web", "10.1.0.2", time.Now(), "3"))
	if err := client.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), "manual-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	updateSlice(t, client, triggered("hl-1", "hl", "10.2.0.3", time.Now(), "3"))
	want[feed.KindHeadlessWithSelector] += 2
	waitCounts(t, want, "a no-op update and a deletion")
	waitAnswer(t, follower, "hl.default.svc.cluster.local.", "10.2.0.3")

	// observed at the swap, not when the event came: a change right
	// after a patch waits out the debounce (1 s); when the leader's
	// observation is counted, the leader answers with it already
	cnt, _ := observed(t, feed.KindHeadlessWithSelector)
	updateSlice(t, client, triggered("hl-1", "hl", "10.2.0.4", time.Now(), "4"))
	want[feed.KindHeadlessWithSelector] += 2
	waitCounts(t, want, "a change")
	waitAnswer(t, follower, "hl.default.svc.cluster.local.", "10.2.0.4")
	updateSlice(t, client, triggered("hl-1", "hl", "10.2.0.5", time.Now(), "5"))
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := observed(t, feed.KindHeadlessWithSelector); n < cnt+3; n, _ = observed(t, feed.KindHeadlessWithSelector) {
		if time.Now().After(deadline) {
			t.Fatal("the second change was not observed")
		}
		time.Sleep(time.Millisecond)
	}
	if got := ask(t, leader, "hl.default.svc.cluster.local.", dns.TypeA); !strings.Contains(fmt.Sprint(got), "10.2.0.5") {
		t.Errorf("observed before the table served it: %v", got)
	}
}
