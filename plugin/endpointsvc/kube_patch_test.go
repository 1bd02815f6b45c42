package endpointsvc

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestKubePatchOneService: among 30 Services, a change to one Service's
// slice maps that Service alone (no whole build), the answer follows, and
// the snapshot written afterwards holds the change.
func TestKubePatchOneService(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}})
	for i := range 30 {
		svc := kubeService("default", fmt.Sprintf("s%d", i), corev1.ServiceTypeClusterIP)
		svc.Spec.ClusterIP = fmt.Sprintf("10.96.0.%d", i+1)
		create(t, client, svc)
		create(t, client, kubeSlice("default", fmt.Sprintf("s%d-a", i), fmt.Sprintf("s%d", i), discoveryv1.AddressTypeIPv4, ep(fmt.Sprintf("10.1.0.%d", i+1), "")))
	}
	snap := filepath.Join(t.TempDir(), "snap.json")
	src := &kubeSource{spec: true}
	e := newSpecKubePlugin(t, client, src, snap)
	expect(t, e, "10.0.1.10.in-addr.arpa.", dns.TypePTR, "10.0.1.10.in-addr.arpa.\t5\tIN\tPTR\t10-1-0-10.s9.default.svc.cluster.test.")
	builds, patches, rebuilt := src.builds.Load(), src.patches.Load(), src.rebuilt.Load()

	ctx := t.Context()
	x, _ := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "s7-a", metav1.GetOptions{})
	x.Endpoints = append(x.Endpoints, ep("10.1.7.7", ""))
	x.ResourceVersion = "9"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		got := ask(t, e, "7.7.1.10.in-addr.arpa.", dns.TypePTR)
		if fmt.Sprint(got) != "[7.7.1.10.in-addr.arpa.\t5\tIN\tPTR\t10-1-7-7.s7.default.svc.cluster.test.]" {
			return fmt.Sprint(got)
		}
		return ""
	})
	if b, p, r := src.builds.Load()-builds, src.patches.Load()-patches, src.rebuilt.Load()-rebuilt; b != 0 || p != 1 || r != 1 {
		t.Errorf("after one slice update: %d whole builds, %d patches, %d services mapped; want 0, 1, 1", b, p, r)
	}
	// the other Services still answer, from the records the patch shared
	expect(t, e, "10.0.1.10.in-addr.arpa.", dns.TypePTR, "10.0.1.10.in-addr.arpa.\t5\tIN\tPTR\t10-1-0-10.s9.default.svc.cluster.test.")

	// a deleted Service is removed by a patch too
	if err := client.CoreV1().Services("default").Delete(ctx, "s3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if got := ask(t, e, "s3.default.svc.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[NXDOMAIN]" {
			return fmt.Sprint(got)
		}
		return ""
	})
	if b := src.builds.Load() - builds; b != 0 {
		t.Errorf("%d whole builds, want 0", b)
	}
	e.stop()
	st := readSnapshot(t, snap)
	if len(st.Services) != 29 || len(st.Tasks) != 30 {
		t.Errorf("snapshot after stop: %d services, %d tasks; want 29, 30", len(st.Services), len(st.Tasks))
	}
}

// newSpecKubePlugin serves the fake cluster with schema kubernetes in zone
// cluster.test. (and its reverse zone), with a snapshot.
func newSpecKubePlugin(t *testing.T, client kubernetes.Interface, src *kubeSource, snap string) *Endpointsvc {
	t.Helper()
	src.newClient = func() (kubernetes.Interface, error) { return client, nil }
	src.debounce = 5 * time.Millisecond
	e := &Endpointsvc{Zones: []string{"cluster.test.", "in-addr.arpa."}, ttl: 5, spec: true, syncer: &syncer{snapshotPath: snap}, source: src}
	e.finish(fakeLookup)
	e.upstream = nil
	e.start(e.source)
	t.Cleanup(e.stop)
	if !e.Ready() {
		t.Fatal("not ready after the informers synced")
	}
	return e
}

// TestKubePatchNodeDown: a Node that goes down yields one patch holding
// exactly the Services with endpoints on it (and that node), and their
// answers drop it while the others' stay.
func TestKubePatchNodeDown(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range fixture() {
		create(t, client, o)
	}
	src := &kubeSource{newClient: func() (kubernetes.Interface, error) { return client, nil }, debounce: time.Millisecond}
	sink := newCollectSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx, sink); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-sink.updated:
	case <-time.After(5 * time.Second):
		t.Fatal("no state after the informers synced")
	}
	n2 := kubeNode("n2", "fd00::2", corev1.ConditionFalse)
	n2.ResourceVersion = "5"
	if _, err := client.CoreV1().Nodes().Update(ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sink.updated:
	case <-time.After(5 * time.Second):
		t.Fatal("no patch after the node went down")
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.patches) != 1 {
		t.Fatalf("%d patches, want 1", len(sink.patches))
	}
	p := sink.patches[0]
	var ids []string
	for _, s := range p.State.Services {
		ids = append(ids, s.ID)
	}
	// web-b and dual-6 have endpoints on n2; api and route do not
	if want := []string{"default/dual", "default/web"}; !slices.Equal(ids, want) {
		t.Errorf("patched services %v, want %v", ids, want)
	}
	if len(p.DirtyNodes) != 1 || !p.DirtyNodes["n2"] || len(p.Removed) != 0 {
		t.Errorf("dirty nodes %v, removed %v; want n2 only", p.DirtyNodes, p.Removed)
	}
	for _, n := range p.State.Nodes {
		if n.Name == "n2" && n.Status != "down" {
			t.Errorf("n2 in the patch: %+v", n)
		}
	}
}

// TestKubePatchNodeDownServed: the same through the plugin: the Services
// on the node lose its address, the others keep theirs, without a whole
// build.
func TestKubePatchNodeDownServed(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range fixture() {
		create(t, client, o)
	}
	src := &kubeSource{}
	e := newKubePlugin(t, client, false, src)
	builds := src.builds.Load()
	n1 := kubeNode("n1", "10.0.0.1", corev1.ConditionFalse)
	n1.ResourceVersion = "5"
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if got := ask(t, e, "api.other.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprint(got)
		}
		return ""
	})
	expect(t, e, "web.default.cluster.test.", dns.TypeA)
	expect(t, e, "web.default.cluster.test.", dns.TypeAAAA, "web.default.cluster.test.\t5\tIN\tAAAA\tfd00::2")
	expect(t, e, "_http._tcp.web.default.cluster.test.", dns.TypeSRV,
		"_http._tcp.web.default.cluster.test.\t5\tIN\tSRV\t0 10 30080 n2.node.cluster.test.")
	expect(t, e, "n1.node.cluster.test.", dns.TypeA, "n1.node.cluster.test.\t5\tIN\tA\t10.0.0.1")
	if n := src.builds.Load() - builds; n != 0 {
		t.Errorf("%d whole builds, want 0", n)
	}
}

// TestKubeSnapshotIsTheMapping: the snapshot the kubernetes source writes
// from its stores, without mapping them whole, decodes to the state the
// whole mapping makes (but for task ids), for both schemas.
func TestKubeSnapshotIsTheMapping(t *testing.T) {
	orch := kubeStores{
		svcs:   cache.NewStore(cache.MetaNamespaceKeyFunc),
		slices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byService: sliceService}),
		nodes:  cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	for _, o := range fixture() {
		var x any
		var store cache.Store
		switch o.(type) {
		case *corev1.Node:
			x, _ = transformNode(o)
			store = orch.nodes
		case *corev1.Service:
			x, _ = transformService(nil)(o)
			store = orch.svcs
		case *discoveryv1.EndpointSlice:
			x, _ = transformSlice(nil)(o)
			store = orch.slices
		}
		if err := store.Add(x); err != nil {
			t.Fatal(err)
		}
	}
	spec := benchStores(60, 4)
	// one Service publishes not-ready addresses, with an unready endpoint
	o, _, _ := spec.svcs.GetByKey("ns-1/svc-1")
	o.(*kService).notReady = true
	sl, _, _ := spec.slices.GetByKey("ns-1/svc-1-abcde")
	sl.(*kSlice).endpoints[0].ready = false
	for _, c := range []struct {
		name string
		k    *kubeSource
		st   kubeStores
	}{{"orch", &kubeSource{}, orch}, {"spec", &kubeSource{spec: true}, spec}} {
		var buf bytes.Buffer
		if err := c.k.writeSnapshot(&buf, c.st); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, buf.String())
		}
		want := c.k.state(c.st)
		if err := want.Validate(); err != nil {
			t.Fatal(err)
		}
		if len(want.Nodes) == 0 {
			want.Nodes = []Node{} // the document lists none
		}
		if !reflect.DeepEqual(got.Services, want.Services) || !reflect.DeepEqual(got.Nodes, want.Nodes) || !reflect.DeepEqual(got.Namespaces, want.Namespaces) {
			t.Errorf("%s: services, nodes or namespaces differ:\n%s", c.name, buf.String())
		}
		if a, b := tasksByService(got), tasksByService(want); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: tasks differ:\n%v\n%v", c.name, a, b)
		}
		if len(want.Tasks) == 0 {
			t.Errorf("%s: no tasks", c.name)
		}
	}
}

// TestKubePatchHostnameNodesRebuildWhole: with hostname advertise addresses
// (re-resolved from a whole state), a change still reaches the answers:
// the patch falls back to the source's whole state.
func TestKubePatchHostnameNodesRebuildWhole(t *testing.T) {
	client := fake.NewClientset(
		kubeNode("node4", "10.0.0.4", corev1.ConditionTrue),
		kubeService("default", "web", corev1.ServiceTypeClusterIP),
		kubeSlice("default", "web-a", "web", discoveryv1.AddressTypeIPv4, ep("10.1.0.1", "node4")))
	src := &kubeSource{nodeAddress: []string{"hostname"}}
	e := newKubePlugin(t, client, false, src)
	eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[web.default.cluster.test.\t5\tIN\tA\t198.51.100.4]" {
			return fmt.Sprint(got)
		}
		return ""
	})
	x, _ := client.DiscoveryV1().EndpointSlices("default").Get(t.Context(), "web-a", metav1.GetOptions{})
	x.Endpoints[0].Conditions.Ready, x.ResourceVersion = ptr(false), "9"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(t.Context(), x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprint(got)
		}
		return ""
	})
	if p := src.patches.Load(); p != 1 {
		t.Errorf("%d patches, want 1", p)
	}
}
