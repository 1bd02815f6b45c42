package kubesource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unique"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	kruntime "k8s.io/apimachinery/pkg/runtime"
)

func ptr[T any](v T) *T { return &v }

// tri is a condition: nil, false or true.
var tri = []*bool{nil, ptr(false), ptr(true)}

func triName(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}

// newStores are empty stores as the source's informers hold them.
func newStores() stores {
	return stores{
		svcs:   cache.NewStore(cache.MetaNamespaceKeyFunc),
		slices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byService: sliceService}),
		nodes:  cache.NewStore(cache.MetaNamespaceKeyFunc),
		nss:    cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
}

// load transforms API objects into st, as the informers do.
func load(t testing.TB, st stores, objs ...any) {
	t.Helper()
	for _, o := range objs {
		var x any
		var store cache.Store
		switch o.(type) {
		case *corev1.Node:
			x, _ = transformNode(o)
			store = st.nodes
		case *corev1.Namespace:
			x, _ = transformNamespace(o)
			store = st.nss
		case *corev1.Service:
			x, _ = transformService(nil)(o)
			store = st.svcs
		case *discoveryv1.EndpointSlice:
			x, _ = transformSlice(nil, false)(o)
			store = st.slices
		}
		if err := store.Add(x); err != nil {
			t.Fatal(err)
		}
	}
}

// mapOrch maps API objects onto the orch model, and checks that the
// mapping's output is valid.
func mapOrch(t *testing.T, nodeAddress []string, objs ...any) *orch.State {
	t.Helper()
	st := newStores()
	load(t, st, objs...)
	mapped := (&orchModel{nodeAddress: nodeAddress}).whole(st).(*orch.State)
	if err := mapped.Validate(); err != nil {
		t.Fatal(err)
	}
	return mapped
}

// TestConditionsEveryCombination maps every combination of ready, serving
// and terminating (each nil, false, true) onto the orch model's desired
// and actual status and through its one predicate, and onto the
// Kubernetes DNS model, which keeps the three as they are.
func TestConditionsEveryCombination(t *testing.T) {
	node := kubefix.Node("n1", "10.0.0.1", corev1.ConditionTrue)
	svc := kubefix.Service("default", "web", corev1.ServiceTypeClusterIP)
	for _, ready := range tri {
		for _, serving := range tri {
			for _, term := range tri {
				name := "ready=" + triName(ready) + "/serving=" + triName(serving) + "/terminating=" + triName(term)
				t.Run(name, func(t *testing.T) {
					r := ready == nil || *ready
					sv := r
					if serving != nil {
						sv = *serving
					}
					tm := term != nil && *term
					wantDesired, wantActual := orch.StatusRunning, orch.StatusUnhealthy
					if tm {
						wantDesired = orch.StatusStopped
					}
					if r {
						wantActual = orch.StatusHealthy
					} else if sv {
						wantActual = orch.StatusRunning
					}
					wantEndpoint := !tm && (r || sv)
					sl := kubefix.Slice("default", "web-1", "web", discoveryv1.AddressTypeIPv4,
						discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: ptr("n1"),
							Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: term}})
					for _, inclUnhealthy := range []bool{false, true} {
						st := mapOrch(t, nil, svc, sl, node)
						if len(st.Tasks) != 1 {
							t.Fatalf("tasks: %+v", st.Tasks)
						}
						task := st.Tasks[0]
						if task.DesiredStatus != wantDesired || task.ActualStatus != wantActual {
							t.Errorf("desired/actual = %s/%s, want %s/%s", task.DesiredStatus, task.ActualStatus, wantDesired, wantActual)
						}
						want := wantEndpoint || (inclUnhealthy && !tm && wantActual == orch.StatusUnhealthy)
						if got := len(orch.EndpointSet(st, inclUnhealthy)[0].Endpoints) == 1; got != want {
							t.Errorf("include_unhealthy=%v: endpoint = %v, want %v", inclUnhealthy, got, want)
						}
					}
					x, _ := transformSlice(nil, false)(sl)
					e := x.(*kSlice).sl.Endpoints[0]
					if e.Ready != k8sdns.Cond(ready) || e.Serving != k8sdns.Cond(serving) || e.Terminating != k8sdns.Cond(term) || e.IsReady() != r {
						t.Errorf("kubernetes DNS model: %+v", e)
					}
				})
			}
		}
	}
}

func TestNodeAddressPreference(t *testing.T) {
	n := kubefix.Node("n1", "10.0.0.1", corev1.ConditionTrue)
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.1"})
	for _, tc := range []struct {
		pref []string
		want string
	}{
		{nil, "10.0.0.1"},
		{[]string{"externalip", "internalip"}, "203.0.113.1"},
		{[]string{"hostname"}, "n1.example.test"},
		{[]string{"internaldns"}, ""},
	} {
		st := mapOrch(t, tc.pref, n)
		got := ""
		if len(st.Nodes) == 1 {
			got = st.Nodes[0].Address
		}
		if got != tc.want {
			t.Errorf("node_address %v: %q, want %q", tc.pref, got, tc.want)
		}
	}
}

// TestNodeAddressTypes: a kNode holds one address of each type a node
// can report, the first of each, whatever the case the API wrote it in.
func TestNodeAddressTypes(t *testing.T) {
	if len(NodeAddressTypes) != nodeAddressTypes {
		t.Fatalf("%d node address types, kNode holds %d", len(NodeAddressTypes), nodeAddressTypes)
	}
	n := kubefix.Node("n1", "10.0.0.1", corev1.ConditionTrue)
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: "INTERNALIP", Address: "10.0.0.2"},
		corev1.NodeAddress{Type: corev1.NodeExternalDNS, Address: "n1.example.net"}, corev1.NodeAddress{Type: "Other", Address: "x"})
	o, _ := transformNode(n)
	k := o.(*kNode)
	for typ, want := range map[string]string{"internalip": "10.0.0.1", "externaldns": "n1.example.net", "externalip": "", "other": ""} {
		if got := k.address(typ); got != want {
			t.Errorf("%s: %q, want %q", typ, got, want)
		}
	}
}

// TestTransformsAreSlim: the slim objects keep what DNS reads as the API
// wrote it - every address of every endpoint, hostnames, nodes, target
// Pods, conditions, port names and protocols - and nothing else.
func TestTransformsAreSlim(t *testing.T) {
	svc := kubefix.Service("default", "web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "HTTP", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053})
	x, _ := transformService(nil)(svc)
	k := x.(*kService)
	if k.GetLabels() != nil || k.GetAnnotations() != nil || k.Name != "web" || k.ResourceVersion != "1" ||
		!slices.Equal(k.svc.Ports, []k8sdns.Port{{Name: "HTTP", Protocol: "UDP", Port: 53}}) || !slices.Equal(k.nodePorts, []int32{30053}) {
		t.Errorf("slim service: %+v", k)
	}
	if y, _ := transformService(nil)(k); y != k {
		t.Error("an already slim object must pass unchanged")
	}
	x, _ = transformService(map[string]bool{"other": true})(svc)
	if !x.(*kService).skip {
		t.Error("a Service outside the namespaces must be marked skip")
	}
	multi := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1", "10.0.0.2"}, NodeName: ptr("N1"), Hostname: ptr("web-0"),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Terminating: ptr(true)}}
	sl := kubefix.Slice("default", "web-1", "Web", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{}, multi)
	y, _ := transformSlice(nil, false)(sl)
	ks := y.(*kSlice)
	e := &ks.sl.Endpoints[0]
	if ks.sl.Service != "Web" || len(ks.sl.Endpoints) != 1 || fmt.Sprint(ks.sl.Addresses(0)) != "[10.0.0.1 10.0.0.2]" ||
		e.Node() != "N1" || ks.sl.Hostname(0) != "web-0" || ks.sl.TargetRef(0) != "web-0" || e.Ready != k8sdns.False || e.Serving != k8sdns.Unset ||
		e.Terminating != k8sdns.True || ks.GetLabels() != nil {
		t.Errorf("slim slice: %+v %+v", ks, e)
	}
	// the node name is interned: thousands of endpoints share a few nodes
	sl2 := kubefix.Slice("default", "web-3", "web", discoveryv1.AddressTypeIPv6, discoveryv1.Endpoint{Addresses: []string{"FD00::2"}, NodeName: ptr("N1")})
	y, _ = transformSlice(nil, false)(sl2)
	if ks2 := y.(*kSlice); ks2.sl.Endpoints[0].NodeName != unique.Make("N1") || ks2.sl.Address(0, 0) != "fd00::2" || ks2.sl.Type != k8sdns.IPv6 {
		t.Errorf("slim IPv6 slice: %+v", ks2)
	}
	fq := kubefix.Slice("default", "web-4", "web", discoveryv1.AddressTypeFQDN, kubefix.EP("ingress.example.com", ""))
	y, _ = transformSlice(nil, false)(fq)
	if kf := y.(*kSlice); len(kf.sl.Endpoints) != 1 || kf.sl.Address(0, 0) != "ingress.example.com" || kf.sl.Endpoints[0].Node() != "" {
		t.Errorf("slim FQDN slice: %+v", kf)
	}
	// addresses that do not fit the slice's type are dropped by the
	// transform (the API admits none), and so never mapped
	bad := kubefix.Slice("default", "web-2", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("fd00::1", "n1"), kubefix.EP("not-an-ip", "n1"),
		discoveryv1.Endpoint{Addresses: []string{"10.9.9.9", "fd00::9"}})
	y, _ = transformSlice(nil, false)(bad)
	if kb := y.(*kSlice); len(kb.sl.Endpoints) != 1 || fmt.Sprint(kb.sl.Addresses(0)) != "[10.9.9.9]" {
		t.Errorf("bad addresses kept: %+v", kb.sl)
	}
}

// collectSink records what a source delivers.
type collectSink struct {
	mu      sync.Mutex
	states  []feed.State
	patches []feed.Patch
	fails   []error
	unch    int
	updated chan struct{}
}

func newCollectSink() *collectSink { return &collectSink{updated: make(chan struct{}, 100)} }

func (c *collectSink) Update(st feed.State) {
	c.mu.Lock()
	c.states = append(c.states, st)
	c.mu.Unlock()
	c.updated <- struct{}{}
}

func (c *collectSink) Patch(p feed.Patch) {
	c.mu.Lock()
	c.patches = append(c.patches, p)
	c.mu.Unlock()
	c.updated <- struct{}{}
}

func (c *collectSink) Unchanged() { c.mu.Lock(); c.unch++; c.mu.Unlock() }

func (c *collectSink) Failed(err error) {
	c.mu.Lock()
	c.fails = append(c.fails, err)
	c.mu.Unlock()
}

// runSource runs src over client into sink until the test ends and waits
// for its first state.
func runSource(t *testing.T, src *Source, client kubernetes.Interface, sink *collectSink) {
	t.Helper()
	src.NewClient = func() (kubernetes.Interface, error) { return client, nil }
	if src.Debounce == 0 {
		src.Debounce = time.Millisecond
	}
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

// TestSourceLifecycle: Run returns when stopped and leaves no goroutine.
func TestSourceLifecycle(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range kubefix.Fixture() {
		kubefix.Create(t, client, o)
	}
	before := runtime.NumGoroutine()
	src := NewOrch(Config{})
	src.NewClient, src.Debounce = func() (kubernetes.Interface, error) { return client, nil }, time.Millisecond
	sink := newCollectSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx, sink); close(done) }()
	select {
	case <-sink.updated:
	case <-time.After(5 * time.Second):
		t.Fatal("no state after the informers synced")
	}
	// an update that changes nothing the mapping reads: skipped, no build
	svc := kubefix.Service("default", "dual", corev1.ServiceTypeClusterIP)
	svc.Annotations["other"] = "x"
	svc.ResourceVersion = "7"
	if _, err := client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if src.Stats.Skipped.Load() != 1 || len(sink.states) != 1 {
			return fmt.Sprintf("skipped=%d states=%d", src.Stats.Skipped.Load(), len(sink.states))
		}
		return ""
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	kubefix.Eventually(t, func() string {
		if n := runtime.NumGoroutine(); n > before+2 {
			return fmt.Sprintf("goroutines: %d, before %d", n, before)
		}
		return ""
	})
}

// TestPatchNodeDown: a Node that goes down yields one patch holding
// exactly the Services with endpoints on it (and that node).
func TestPatchNodeDown(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range kubefix.Fixture() {
		kubefix.Create(t, client, o)
	}
	sink := newCollectSink()
	runSource(t, NewOrch(Config{}), client, sink)
	n2 := kubefix.Node("n2", "fd00::2", corev1.ConditionFalse)
	n2.ResourceVersion = "5"
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n2, metav1.UpdateOptions{}); err != nil {
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
	p := sink.patches[0].(*orch.Patch)
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

// TestSnapshotIsTheMapping: the snapshot the source writes from its
// stores, without mapping them whole, decodes to what the whole mapping
// makes, for both models.
func TestSnapshotIsTheMapping(t *testing.T) {
	st := newStores()
	load(t, st, kubefix.Fixture()...)
	load(t, st, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}})

	om := &orchModel{}
	var buf bytes.Buffer
	if err := om.snapshot(&buf, st); err != nil {
		t.Fatal(err)
	}
	got, err := orch.DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatalf("orch: %v\n%s", err, buf.String())
	}
	want := om.whole(st).(*orch.State)
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Services, want.Services) || !reflect.DeepEqual(got.Nodes, want.Nodes) || len(got.Tasks) != len(want.Tasks) || len(want.Tasks) == 0 {
		t.Errorf("orch: the snapshot differs from the mapping:\n%s", buf.String())
	}

	buf.Reset()
	dm := &dnsModel{}
	if err := dm.snapshot(&buf, st); err != nil {
		t.Fatal(err)
	}
	c, err := k8sdns.DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatalf("kubernetes: %v\n%s", err, buf.String())
	}
	if a, b := k8sdns.Build(c).Describe(), k8sdns.Build(dm.whole(st).(*k8sdns.Cluster)).Describe(); a != b {
		t.Errorf("kubernetes: the snapshot's table differs from the mapping's:\n%s\nwant:\n%s", a, b)
	}
}

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
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		err := deny(a)
		return err != nil, nil, err
	})
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		err := deny(a)
		return err != nil, nil, err
	})
}

// TestDocumentedRBAC: with exactly the permissions the README
// documents for each schema (schema kubernetes: Services, EndpointSlices,
// Namespaces; orch: Services, EndpointSlices, Nodes), the source syncs,
// its health probe is never refused, and patches report no failure (the
// probe used to list Nodes, which schema kubernetes does not grant: every
// probe failed, and each patch logged a recovery the next probe took back).
func TestDocumentedRBAC(t *testing.T) {
	for _, c := range []struct {
		name    string
		spec    bool
		granted []string
	}{
		{"kubernetes", true, []string{"services", "endpointslices", "namespaces"}},
		{"orch", false, []string{"services", "endpointslices", "nodes"}},
		{"pods verified", true, []string{"services", "endpointslices", "namespaces", "pods"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}},
				kubefix.Node("n1", "10.0.0.1", corev1.ConditionTrue))
			var refusals atomic.Int64
			rbac(client, &refusals, c.granted...)
			svc := kubefix.Service("default", "web", corev1.ServiceTypeClusterIP)
			svc.Spec.ClusterIP = "10.96.0.5"
			kubefix.Create(t, client, svc)
			src := NewOrch(Config{})
			if c.spec {
				src = NewDNS(Config{Pods: slices.Contains(c.granted, "pods")})
			}
			sink := newCollectSink()
			runSource(t, src, client, sink)
			for i := range 3 { // patches
				sl := kubefix.Slice("default", fmt.Sprintf("web-%d", i), "web", discoveryv1.AddressTypeIPv4, kubefix.EP(fmt.Sprintf("10.1.0.%d", i+1), "n1"))
				kubefix.Create(t, client, sl)
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

// TestTransformReusesStoredObject: a relist replays every object; an
// object whose slim form equals the stored one is not a new copy (the
// table shares the stored objects: a copy would double them until each
// name changed), while a changed one is.
func TestTransformReusesStoredObject(t *testing.T) {
	st := newStores()
	sl := kubefix.Slice("default", "web-1", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.0.0.1", "n1"))
	load(t, st, sl)
	stored, _, _ := st.slices.GetByKey("default/web-1")
	fn := reuse(st.slices, transformSlice(nil, false))
	again := sl.DeepCopy()
	again.ResourceVersion, again.Labels["unrelated"] = "9", "x"
	if got, _ := fn(again); got != stored {
		t.Error("a replayed slice with the same fields is a new copy")
	}
	changed := sl.DeepCopy()
	changed.Endpoints[0].Addresses = []string{"10.0.0.2"}
	if got, _ := fn(changed); got == stored {
		t.Error("a changed slice was replaced by the stored one")
	}
}

// TestProbeIsOneObject: the health probe asks for one Service at the
// latest version. With resourceVersion 0 the API server answers from its
// watch cache and ignores the limit: each probe carried every Service.
func TestProbeIsOneObject(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	var probes []metav1.ListOptions
	client.PrependReactor("list", "services", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if l, ok := a.(k8stesting.ListActionImpl); ok && l.ListOptions.Limit == 1 { // the informers list 500 at a time
			mu.Lock()
			probes = append(probes, l.ListOptions)
			mu.Unlock()
		}
		return false, nil, nil
	})
	runSource(t, NewDNS(Config{}), client, newCollectSink())
	kubefix.Eventually(t, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(probes) == 0 {
			return "no probe"
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range probes {
		if p.ResourceVersion != "" {
			t.Errorf("probe at resourceVersion %q: want the latest version (\"\"), where the limit holds", p.ResourceVersion)
		}
	}
}
