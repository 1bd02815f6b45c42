package kubesource

import (
	"context"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// withTrigger sets a slice's trigger time and resourceVersion.
func withTrigger(sl *discoveryv1.EndpointSlice, at time.Time, rv string) *discoveryv1.EndpointSlice {
	sl.ResourceVersion = rv
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at.UTC().Format(time.RFC3339Nano)}
	return sl
}

// patchTriggers waits for the next patch and returns its triggers.
func patchTriggers(t *testing.T, sink *collectSink) []feed.Trigger {
	t.Helper()
	select {
	case <-sink.updated:
	case <-time.After(5 * time.Second):
		t.Fatal("no patch")
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	p := sink.patches[len(sink.patches)-1]
	tp, ok := p.(feed.Triggered)
	if !ok {
		t.Fatalf("%T carries no triggers", p)
	}
	return tp.Triggers()
}

// TestPatchCarriesTriggers: with either model, a slice change after the
// first build hands the patch its trigger time with its Service's kind;
// the first build, an update of the trigger time alone (skipped: no
// patch), a deletion and an ExternalName's slice carry none.
func TestPatchCarriesTriggers(t *testing.T) {
	for _, model := range []string{"kubernetes", "orch"} {
		t.Run(model, func(t *testing.T) {
			client := fake.NewClientset()
			old := time.Now().Add(-time.Hour)
			hl := kubefix.Service("default", "hl", corev1.ServiceTypeClusterIP)
			hl.Spec.ClusterIP, hl.Spec.ClusterIPs, hl.Spec.Selector = "None", []string{"None"}, map[string]string{"app": "hl"}
			ext := kubefix.Service("default", "ext", corev1.ServiceTypeExternalName)
			ext.Spec.ExternalName = "example.test"
			web := kubefix.Service("default", "web", corev1.ServiceTypeClusterIP)
			web.Spec.ClusterIP, web.Spec.ClusterIPs = "10.96.0.1", []string{"10.96.0.1"}
			for _, o := range []any{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}},
				kubefix.Node("n1", "10.0.0.1", corev1.ConditionTrue), hl, ext, web,
				withTrigger(kubefix.Slice("default", "hl-1", "hl", discoveryv1.AddressTypeIPv4, kubefix.EP("10.1.0.1", "n1")), old, "1"),
				withTrigger(kubefix.Slice("default", "ext-1", "ext", discoveryv1.AddressTypeIPv4, kubefix.EP("10.2.0.1", "n1")), old, "1"),
				withTrigger(kubefix.Slice("default", "web-1", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.3.0.1", "n1")), old, "1"),
			} {
				kubefix.Create(t, client, o)
			}
			src := NewDNS(Config{})
			if model == "orch" {
				src = NewOrch(Config{})
			}
			sink := newCollectSink()
			runSource(t, src, client, sink)
			update := func(sl *discoveryv1.EndpointSlice) {
				t.Helper()
				if _, err := client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			at := time.Now().Add(-time.Second).Truncate(time.Nanosecond)
			update(withTrigger(kubefix.Slice("default", "hl-1", "hl", discoveryv1.AddressTypeIPv4, kubefix.EP("10.1.0.2", "n1")), at, "2"))
			if got := patchTriggers(t, sink); len(got) != 1 || got[0].Kind != feed.KindHeadlessWithSelector || !got[0].At.Equal(at) {
				t.Fatalf("headless with selector: %v, want one at %v", got, at)
			}
			update(withTrigger(kubefix.Slice("default", "web-1", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.3.0.2", "n1")), at, "2"))
			if got := patchTriggers(t, sink); len(got) != 1 || got[0].Kind != feed.KindClusterIP {
				t.Fatalf("cluster IP: %v", got)
			}
			// the trigger time alone: skipped, no patch; then a deletion
			skipped := src.Stats.Skipped.Load()
			update(withTrigger(kubefix.Slice("default", "web-1", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.3.0.2", "n1")), time.Now(), "3"))
			kubefix.Eventually(t, func() string {
				if src.Stats.Skipped.Load() == skipped {
					return "the update of the trigger time alone was not skipped"
				}
				return ""
			})
			if err := client.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), "hl-1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := patchTriggers(t, sink); len(got) != 0 {
				t.Fatalf("a deletion: %v", got)
			}
			update(withTrigger(kubefix.Slice("default", "ext-1", "ext", discoveryv1.AddressTypeIPv4, kubefix.EP("10.2.0.2", "n1")), at, "2"))
			if got := patchTriggers(t, sink); len(got) != 0 {
				t.Fatalf("an ExternalName's slice: %v", got)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if n := len(sink.patches); n != 4 {
				t.Errorf("%d patches, want 4", n)
			}
		})
	}
}
