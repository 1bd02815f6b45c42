package endpointsvc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// rbac makes client refuse every request on a resource that granted does
// not name, as an API server with only the documented RBAC rules does;
// refusals counts them.
func rbac(client *fake.Clientset, refusals *atomic.Int64, granted ...string) {
	ok := map[string]bool{}
	for _, r := range granted {
		ok[r] = true
	}
	deny := func(a k8stesting.Action) error {
		if ok[a.GetResource().Resource] {
			return nil
		}
		refusals.Add(1)
		return apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("not in the role"))
	}
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		err := deny(a)
		return err != nil, nil, err
	})
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		err := deny(a)
		return err != nil, nil, err
	})
}

// TestKubeSourceDocumentedRBAC: with exactly the permissions the README
// documents for each schema (schema kubernetes: Services, EndpointSlices,
// Namespaces; orch: Services, EndpointSlices, Nodes), the source syncs,
// its health probe is never refused, and patches report no failure (the
// probe used to list Nodes, which schema kubernetes does not grant: every
// probe failed, and each patch logged a recovery the next probe took back).
func TestKubeSourceDocumentedRBAC(t *testing.T) {
	for _, c := range []struct {
		name    string
		spec    bool
		granted []string
	}{
		{"kubernetes", true, []string{"services", "endpointslices", "namespaces"}},
		{"orch", false, []string{"services", "endpointslices", "nodes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}},
				kubeNode("n1", "10.0.0.1", corev1.ConditionTrue))
			var refusals atomic.Int64
			rbac(client, &refusals, c.granted...)
			svc := kubeService("default", "web", corev1.ServiceTypeClusterIP)
			svc.Spec.ClusterIP = "10.96.0.5"
			create(t, client, svc)
			src := &kubeSource{spec: c.spec, newClient: func() (kubernetes.Interface, error) { return client, nil }, debounce: time.Millisecond}
			sink := newCollectSink()
			runSource(t, src, sink)
			for i := range 3 { // patches
				sl := kubeSlice("default", fmt.Sprintf("web-%d", i), "web", discoveryv1.AddressTypeIPv4, ep(fmt.Sprintf("10.1.0.%d", i+1), "n1"))
				create(t, client, sl)
				select {
				case <-sink.updated:
				case <-time.After(5 * time.Second):
					t.Fatal("no patch")
				}
			}
			time.Sleep(300 * time.Millisecond) // the first probe runs 100 ms after the start
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if len(sink.fails) != 0 || refusals.Load() != 0 {
				t.Errorf("%d refused requests, failures %v; want none", refusals.Load(), sink.fails)
			}
			if len(sink.states) != 1 || len(sink.patches) != 3 {
				t.Errorf("%d states, %d patches; want 1, 3", len(sink.states), len(sink.patches))
			}
		})
	}
}

// TestKubeSourcePermissionKeepsWaiting: a permission error (Namespaces
// refused at first, as while a role binding is being created) is no
// outage: it does not end the start-up wait, which lasts until the
// informers sync once the request is allowed.
func TestKubeSourcePermissionKeepsWaiting(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}})
	svc := kubeService("shop", "web", corev1.ServiceTypeClusterIP)
	svc.Spec.ClusterIP = "10.96.0.5"
	create(t, client, svc)
	var refused atomic.Int64
	forbid := func(a k8stesting.Action) error {
		if a.GetResource().Resource == "namespaces" && refused.Load() == 0 {
			refused.Add(1)
			return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errors.New("no binding yet"))
		}
		return nil
	}
	client.PrependReactor("list", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		err := forbid(a)
		return err != nil, nil, err
	})
	client.PrependWatchReactor("namespaces", func(a k8stesting.Action) (bool, watch.Interface, error) {
		err := forbid(a)
		return err != nil, nil, err
	})
	src := &kubeSource{spec: true, newClient: func() (kubernetes.Interface, error) { return client, nil }, debounce: time.Millisecond}
	e := &Endpointsvc{Zones: []string{"cluster.test."}, ttl: 5, spec: true, syncer: &syncer{}, source: src}
	e.finish(fakeLookup)
	e.upstream = nil
	e.start(e.source)
	t.Cleanup(e.stop)
	if refused.Load() == 0 {
		t.Fatal("the namespaces request was never refused")
	}
	if !e.Ready() {
		t.Fatal("start-up ended at the permission error, before the informers synced")
	}
	expect(t, e, "web.shop.svc.cluster.test.", dns.TypeA, "web.shop.svc.cluster.test.\t5\tIN\tA\t10.96.0.5")
}

// runSource runs src into sink until the test ends and waits for its
// first state.
func runSource(t *testing.T, src *kubeSource, sink *collectSink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx, sink); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-sink.updated:
	case <-time.After(5 * time.Second):
		t.Fatal("no state after the informers synced")
	}
}
