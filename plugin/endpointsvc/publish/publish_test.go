package publish

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeProbes answers probes by address; unknown addresses fail.
type fakeProbes struct {
	mu  sync.Mutex
	ok  map[string]bool
	got map[string]int
}

func (f *fakeProbes) set(addr string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ok[addr] = ok
}

func (f *fakeProbes) probe(_ context.Context, addr, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got[addr]++
	if f.ok[addr] {
		return nil
	}
	return errors.New("timeout")
}

func (f *fakeProbes) count(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got[addr]
}

// sliceCond returns the conditions of a slice in the fake API, or "" when
// it does not exist.
func sliceCond(t *testing.T, c *fake.Clientset, name string) string {
	t.Helper()
	sl, err := c.DiscoveryV1().EndpointSlices("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cond(sl)
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPublisher(t *testing.T) {
	a, b := testPod("meshdns-a", "10.244.0.5", true), testPod("meshdns-b", "10.244.0.6", true)
	client := fake.NewClientset(testService(), a, b)
	var serving atomic.Bool
	probes := &fakeProbes{ok: map[string]bool{}, got: map[string]int{}}
	sel, _ := labels.Parse("app.kubernetes.io/name=meshdns")
	p := New(Config{Namespace: "kube-system", Service: "meshdns", Pod: "meshdns-a", Pods: sel, Zone: "cluster.local.",
		Interval: 20 * time.Millisecond, DownAfter: 3, LeaseDuration: 300 * time.Millisecond}, client, serving.Load)
	p.probe = probes.probe
	// b holds its Lease from before a starts, as a running peer does
	stopB := renewPeerLease(t, client, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	self := "meshdns-meshdns-a-ipv4"
	// no table: nothing published; a table but its DNS server does not
	// answer yet: still nothing
	time.Sleep(100 * time.Millisecond)
	serving.Store(true)
	time.Sleep(100 * time.Millisecond)
	if c := sliceCond(t, client, self); c != "" {
		t.Fatalf("published before its own probe answered: %s", c)
	}
	probes.set("10.244.0.5:53", true)
	waitFor(t, "own slice ready", func() bool { return sliceCond(t, client, self) == "RS-" })

	// b publishes itself (as its own publisher would)
	peer := plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: testService(), pods: []*corev1.Pod{a, b}})[0].slice
	if _, err := client.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, peer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// a holds its own Lease
	waitFor(t, "own Lease", func() bool {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "meshdns-meshdns-a", metav1.GetOptions{})
		return err == nil && *l.Spec.HolderIdentity == "meshdns-a" && l.Labels[LeaseLabel] == "meshdns"
	})
	// b renews its Lease and does not answer probes, and the API calls
	// its pod not ready (the node controller after an outage): a leaves
	// it alone and does not even probe it - b decides its own state
	b = b.DeepCopy()
	b.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := client.CoreV1().Pods("kube-system").UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if c := sliceCond(t, client, peer.Name); c != "RS-" || probes.count("10.244.0.6:53") > 0 {
		t.Fatalf("peer with a live Lease: %s after %d probes", c, probes.count("10.244.0.6:53"))
	}
	// b's Lease lapses (cut off from the API) but it answers probes: kept
	stopB()
	probes.set("10.244.0.6:53", true)
	waitFor(t, "probes of the peer", func() bool { return probes.count("10.244.0.6:53") >= 5 })
	if c := sliceCond(t, client, peer.Name); c != "RS-" {
		t.Fatalf("peer cut off from the API but answering: %s", c)
	}
	// both agree that b is gone: taken out
	probes.set("10.244.0.6:53", false)
	waitFor(t, "peer taken out", func() bool { return sliceCond(t, client, peer.Name) == "---" })

	// SIGTERM: a's slice is terminating before Terminate returns
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
	defer tcancel()
	if err := p.Terminate(tctx); err != nil {
		t.Fatal(err)
	}
	if c := sliceCond(t, client, self); c != "-ST" {
		t.Fatalf("after Terminate: %s, want -ST", c)
	}
	// about to exit, with no ready peer (b is down): it serves on, as the
	// last resort kube-proxy falls back to
	if err := p.Drain(tctx); err != nil {
		t.Fatal(err)
	}
	if c := sliceCond(t, client, self); c != "-ST" {
		t.Fatalf("drained with no ready peer: %s, want -ST", c)
	}
	// b is back (its Lease renewed, and its own publisher writes its
	// slice): draining stops serving, so that kube-proxy clears the
	// conntrack entries leading here
	defer renewPeerLease(t, client, b)()
	time.Sleep(100 * time.Millisecond) // a's probe round sees b live and forgets its failures
	back, err := client.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, peer.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	back.Endpoints[0].Conditions.Ready, back.Endpoints[0].Conditions.Serving = &yes, &yes
	if _, err := client.DiscoveryV1().EndpointSlices("kube-system").Update(ctx, back, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "drained once a peer is ready", func() bool {
		dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer dcancel()
		_ = p.Drain(dctx)
		return sliceCond(t, client, self) == "--T"
	})
	// the pod is deleted: its slice goes too (the GC would do it as well)
	if err := client.CoreV1().Pods("kube-system").Delete(ctx, "meshdns-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "own slice deleted with its pod", func() bool { return sliceCond(t, client, self) == "" })
}

// renewPeerLease renews pod's Lease every 50 ms, as its own publisher
// would, until the returned function is called.
func renewPeerLease(t *testing.T, client *fake.Clientset, pod *corev1.Pod) (stop func()) {
	t.Helper()
	p := New(Config{Namespace: "kube-system", Service: "meshdns", Pod: pod.Name, LeaseDuration: 150 * time.Millisecond}, client, nil)
	name := LeaseName("meshdns", pod.Name)
	leases := client.CoordinationV1().Leases("kube-system")
	if _, err := leases.Create(context.Background(), p.wantLease(name, pod, metav1.NowMicro()), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			now := metav1.NowMicro()
			l.Spec.RenewTime = &now
			_, _ = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		}
	}()
	return func() { close(done); <-stopped }
}

// TestPublisherNoFight: a peer whose Lease is live is never written by
// this replica, even while its probes fail and its pod is not ready - the
// case in which two writers fought at the client's rate limit.
func TestPublisherNoFight(t *testing.T) {
	a, b := testPod("meshdns-a", "10.244.0.5", true), testPod("meshdns-b", "10.244.0.6", false)
	client := fake.NewClientset(testService(), a, b)
	peer := plan(inputs{selfLive: true, self: "meshdns-b", serving: true, probed: true, service: testService(), pods: []*corev1.Pod{a, b}})[0].slice
	if _, err := client.DiscoveryV1().EndpointSlices("kube-system").Create(context.Background(), peer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer renewPeerLease(t, client, b)()
	var writes atomic.Int32
	client.PrependReactor("*", "endpointslices", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := act.(k8stesting.UpdateAction); ok && u.GetObject().(*discoveryv1.EndpointSlice).Name == peer.Name {
			writes.Add(1)
		}
		if d, ok := act.(k8stesting.DeleteAction); ok && d.GetName() == peer.Name {
			writes.Add(1)
		}
		return false, nil, nil
	})
	p := New(Config{Namespace: "kube-system", Service: "meshdns", Pod: "meshdns-a", Zone: "cluster.local.",
		Interval: 20 * time.Millisecond, DownAfter: 2, LeaseDuration: 300 * time.Millisecond}, client, func() bool { return true })
	p.probe = func(_ context.Context, addr, _ string) error {
		if addr == "10.244.0.5:53" {
			return nil
		}
		return errors.New("timeout") // b cannot be reached from a
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "own slice", func() bool { return sliceCond(t, client, "meshdns-meshdns-a-ipv4") == "RS-" })
	time.Sleep(time.Second) // 50 rounds, 3 lease durations
	if n := writes.Load(); n != 0 || sliceCond(t, client, peer.Name) != "RS-" {
		t.Fatalf("a wrote the slice of b, whose Lease is live, %d times (now %s)", n, sliceCond(t, client, peer.Name))
	}
}

// TestPublisherAPIDown: writes that fail are retried, and the slices as
// they are keep serving meanwhile (nothing is deleted for an error).
func TestPublisherAPIDown(t *testing.T) {
	a := testPod("meshdns-a", "10.244.0.5", true)
	client := fake.NewClientset(testService(), a)
	var fail atomic.Bool
	fail.Store(true)
	client.PrependReactor("create", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	p := New(Config{Namespace: "kube-system", Service: "meshdns", Pod: "meshdns-a", Zone: "cluster.local.", Interval: 20 * time.Millisecond},
		client, func() bool { return true })
	p.probe = func(context.Context, string, string) error { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(150 * time.Millisecond)
	if c := sliceCond(t, client, "meshdns-meshdns-a-ipv4"); c != "" {
		t.Fatalf("created while the API fails: %s", c)
	}
	fail.Store(false)
	waitFor(t, "own slice after the API returned", func() bool { return sliceCond(t, client, "meshdns-meshdns-a-ipv4") == "RS-" })
}

// TestPublisherMisfit: a replica whose pod exists but is left out by the
// selector writes nothing and holds no Lease - it would take every peer it
// does not see for gone and delete their slices - while a replica that is
// no pod at all still deletes the slice of a pod that is gone.
func TestPublisherMisfit(t *testing.T) {
	a, b := testPod("meshdns-a", "10.244.0.5", true), testPod("meshdns-b", "10.244.0.6", true)
	client := fake.NewClientset(testService(), a, b)
	for _, self := range []string{"meshdns-a", "meshdns-b"} {
		sl := plan(inputs{selfLive: true, self: self, serving: true, probed: true, service: testService(), pods: []*corev1.Pod{a, b}})[0].slice
		if _, err := client.DiscoveryV1().EndpointSlices("kube-system").Create(context.Background(), sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(pod, selector string) func() {
		sel, _ := labels.Parse(selector)
		p := New(Config{Namespace: "kube-system", Service: "meshdns", Pod: pod, Pods: sel, Zone: "cluster.local.",
			Interval: 20 * time.Millisecond, LeaseDuration: 300 * time.Millisecond}, client, func() bool { return true })
		p.probe = func(context.Context, string, string) error { return nil }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.Run(ctx); close(done) }()
		return func() { cancel(); <-done }
	}
	stop := run("meshdns-a", "app.kubernetes.io/name=other")
	time.Sleep(300 * time.Millisecond)
	stop()
	for _, name := range []string{"meshdns-meshdns-a-ipv4", "meshdns-meshdns-b-ipv4"} {
		if c := sliceCond(t, client, name); c != "RS-" {
			t.Errorf("misfit replica: %s is %q, want it left as it was", name, c)
		}
	}
	if l, _ := client.CoordinationV1().Leases("kube-system").List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("misfit replica holds a Lease: %v", l.Items)
	}
	// b's pod is gone: a process that is no pod deletes b's slice
	if err := client.CoreV1().Pods("kube-system").Delete(context.Background(), "meshdns-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer run("ghost", "app.kubernetes.io/name=meshdns")()
	waitFor(t, "the slice of the gone pod deleted", func() bool { return sliceCond(t, client, "meshdns-meshdns-b-ipv4") == "" })
}
