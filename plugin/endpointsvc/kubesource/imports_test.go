package kubesource

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/typed/apis/v1alpha1"
)

// mcsSlice is an EndpointSlice of ServiceImport imp from cluster, as an
// MCS implementation writes it (no kubernetes.io/service-name label).
func mcsSlice(name, imp, cluster string, addrs ...string) *discoveryv1.EndpointSlice {
	sl := kubefix.Slice("shop", name, "", discoveryv1.AddressTypeIPv4)
	sl.Labels = map[string]string{mcsapi.LabelServiceName: imp, mcsapi.LabelSourceCluster: cluster}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, kubefix.EP(a, ""))
	}
	return sl
}

// fakeMCS is the MCS API's fake client, which (generated before
// client-go's streaming lists) says nothing of them: it does not send
// their bookmark, as client-go's own fakes declare.
type fakeMCS struct {
	mcsv1alpha1.MulticlusterV1alpha1Interface
}

func (fakeMCS) IsWatchListSemanticsUnSupported() bool { return true }

func serviceImport(name string, typ mcsapi.ServiceImportType, ips ...string) *mcsapi.ServiceImport {
	return &mcsapi.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: "1"},
		Spec: mcsapi.ServiceImportSpec{Type: typ, IPs: ips, Ports: []mcsapi.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
}

// importsOfState describes a whole state's imports and the slices' labels.
func importsOfState(c *k8sdns.Cluster) string {
	s := ""
	for _, i := range c.Imports {
		s += fmt.Sprintf("import %s/%s %v %v; ", i.Namespace, i.Name, i.Kind, i.ClusterIPs)
	}
	for _, sl := range c.Slices {
		s += fmt.Sprintf("slice %s service=%q import=%q cluster=%q; ", sl.Name, sl.Service, sl.Import, sl.Cluster)
	}
	return s
}

// TestMulticlusterSource: with multicluster the source watches
// ServiceImports and keeps the slices' multicluster labels; the whole
// state has them, a change of an import or of a slice's labels patches
// the import's name (Key.Import) with its whole content, and the
// snapshot of the stores has them too.
func TestMulticlusterSource(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}})
	kubefix.Create(t, client, mcsSlice("db-c1", "db", "c1", "10.8.0.1"))
	mcs := mcsfake.NewSimpleClientset(serviceImport("db", mcsapi.Headless), serviceImport("web", mcsapi.ClusterSetIP, "10.100.0.9"))
	// The fake's watch sees only what is created after it starts, and the
	// informer lists before it watches: an import created between the two
	// was never seen (the test failed now and then, api missing). The
	// import below is created once the watch has started.
	watching := make(chan struct{})
	var once sync.Once
	mcs.PrependWatchReactor("serviceimports", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := mcs.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(watching) })
		return true, w, err
	})
	src := NewDNS(Config{Multicluster: true})
	src.NewMCSClient = func() (mcsv1alpha1.MulticlusterV1alpha1Interface, error) {
		return fakeMCS{mcs.MulticlusterV1alpha1()}, nil
	}
	sink := newCollectSink()
	runSource(t, src, client, sink)

	sink.mu.Lock()
	whole := sink.states[0].(*k8sdns.Cluster)
	sink.mu.Unlock()
	want := `import shop/db Headless []; import shop/web ClusterIP [10.100.0.9]; slice db-c1 service="" import="db" cluster="c1"; `
	if got := importsOfState(whole); got != want {
		t.Fatalf("first state: %s\nwant %s", got, want)
	}
	tbl := k8sdns.Build(whole)

	ctx := context.Background()
	select {
	case <-watching:
	case <-time.After(5 * time.Second):
		t.Fatal("the ServiceImports are not watched")
	}
	if _, err := mcs.MulticlusterV1alpha1().ServiceImports("shop").Create(ctx, serviceImport("api", mcsapi.ClusterSetIP, "10.100.0.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := mcsSlice("db-c1", "db", "c2", "10.8.0.1") // another source cluster
	moved.ResourceVersion = "2"
	if _, err := client.DiscoveryV1().EndpointSlices("shop").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *k8sdns.Patch
	kubefix.Eventually(t, func() string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, p := range sink.patches {
			last = p.(*k8sdns.Patch)
			tbl = tbl.Patched(last)
		}
		sink.patches = nil
		got := importsOfState(tbl.Whole())
		want := `import shop/api ClusterIP [10.100.0.10]; import shop/db Headless []; import shop/web ClusterIP [10.100.0.9]; slice db-c1 service="" import="db" cluster="c2"; `
		if got != want {
			return "patched: " + got + "\nwant     " + want
		}
		return ""
	})
	if n := tbl.Imports(); n != 3 {
		t.Errorf("%d imports, want 3", n)
	}
	var buf bytes.Buffer
	if err := last.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := k8sdns.DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if got, want := k8sdns.Build(back).Describe(), tbl.Describe(); got != want {
		t.Errorf("the stores' snapshot:\n%s\nwant the patched table:\n%s", got, want)
	}
}

// TestMulticlusterWithoutCRD: an API server without the ServiceImport
// resource (404) has no imports: the source syncs, serves the rest and
// reports no failure.
func TestMulticlusterWithoutCRD(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}})
	kubefix.Create(t, client, kubefix.Service("shop", "web", corev1.ServiceTypeClusterIP))
	mcs := mcsfake.NewSimpleClientset()
	notFound := func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: mcsapi.GroupName, Resource: "serviceimports"}, "")
	}
	mcs.PrependReactor("list", "serviceimports", notFound)
	mcs.PrependWatchReactor("serviceimports", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: mcsapi.GroupName, Resource: "serviceimports"}, "")
	})
	src := NewDNS(Config{Multicluster: true})
	src.NewMCSClient = func() (mcsv1alpha1.MulticlusterV1alpha1Interface, error) {
		return fakeMCS{mcs.MulticlusterV1alpha1()}, nil
	}
	sink := newCollectSink()
	runSource(t, src, client, sink)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if c := sink.states[0].(*k8sdns.Cluster); len(c.Services) != 1 || len(c.Imports) != 0 || len(sink.fails) != 0 {
		t.Errorf("without the CRD: %d Services, %d imports, failures %v", len(c.Services), len(c.Imports), sink.fails)
	}
}
