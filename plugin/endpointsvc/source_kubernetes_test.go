package endpointsvc

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
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

// TestKubeConditionsEveryCombination maps every combination of ready,
// serving and terminating (each nil, false, true) onto desired and actual
// status and through the one predicate.
func TestKubeConditionsEveryCombination(t *testing.T) {
	node := kubeNode("n1", "10.0.0.1", corev1.ConditionTrue)
	svc := kubeService("default", "web", corev1.ServiceTypeClusterIP)
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
					wantDesired, wantActual := StatusRunning, StatusUnhealthy
					if tm {
						wantDesired = StatusStopped
					}
					if r {
						wantActual = StatusHealthy
					} else if sv {
						wantActual = StatusRunning
					}
					wantEndpoint := !tm && (r || sv)
					for _, inclUnhealthy := range []bool{false, true} {
						sl := kubeSlice("default", "web-1", "web", discoveryv1.AddressTypeIPv4,
							discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: ptr("n1"),
								Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: term}})
						st := mapObjects(t, []any{svc}, []any{sl}, []any{node}, nil)
						if len(st.Tasks) != 1 {
							t.Fatalf("tasks: %+v", st.Tasks)
						}
						task := st.Tasks[0]
						if task.DesiredStatus != wantDesired || task.ActualStatus != wantActual {
							t.Errorf("desired/actual = %s/%s, want %s/%s", task.DesiredStatus, task.ActualStatus, wantDesired, wantActual)
						}
						want := wantEndpoint || (inclUnhealthy && !tm && wantActual == StatusUnhealthy)
						got := len(EndpointSet(st, inclUnhealthy)[0].Endpoints) == 1
						if got != want {
							t.Errorf("include_unhealthy=%v: endpoint = %v, want %v", inclUnhealthy, got, want)
						}
					}
				})
			}
		}
	}
}

// mapObjects runs the transforms and kubeState on API objects.
func mapObjects(t *testing.T, svcs, slices, nodes []any, nodeAddress []string) *State {
	t.Helper()
	var ks []*kService
	var kl []*kSlice
	var kn []*kNode
	for _, o := range svcs {
		x, _ := transformService(nil)(o)
		ks = append(ks, x.(*kService))
	}
	for _, o := range slices {
		x, _ := transformSlice(nil)(o)
		kl = append(kl, x.(*kSlice))
	}
	for _, o := range nodes {
		x, _ := transformNode(o)
		kn = append(kn, x.(*kNode))
	}
	st := kubeState(ks, kl, kn, nodeAddress)
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	return st
}

func kubeNode(name, ip string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name + ".example.test"}, {Type: corev1.NodeInternalIP, Address: ip}}
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: ready}}
	return n
}

func kubeService(ns, name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1",
		Labels: map[string]string{"app": name}, Annotations: map[string]string{"big": "annotation"}},
		Spec: corev1.ServiceSpec{Type: typ, Ports: ports}}
}

func kubeSlice(ns, name, svc string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
		Endpoints:   eps,
	}
}

func ep(addr, node string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}
	if node != "" {
		e.NodeName = ptr(node)
	}
	return e
}

// fixture is a small cluster: nodes n1 (ready), n2 (ready, IPv6), n3 (Ready
// False), n4 (no address); a NodePort Service with two IPv4 slices, a
// dual-stack Service, an FQDN Service with two FQDN endpoints, an
// ExternalName Service and a Service in another namespace.
func fixture() []any {
	return []any{
		kubeNode("n1", "10.0.0.1", corev1.ConditionTrue),
		kubeNode("n2", "fd00::2", corev1.ConditionTrue),
		kubeNode("n3", "10.0.0.3", corev1.ConditionFalse),
		kubeNode("n4", "", corev1.ConditionUnknown),
		kubeService("default", "web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}),
		kubeSlice("default", "web-a", "web", discoveryv1.AddressTypeIPv4, ep("10.1.0.1", "n1"), ep("10.1.0.3", "n3")),
		kubeSlice("default", "web-b", "web", discoveryv1.AddressTypeIPv4, ep("10.1.0.2", "n2"), ep("10.1.0.9", "n4")),
		kubeService("default", "dual", corev1.ServiceTypeClusterIP),
		kubeSlice("default", "dual-4", "dual", discoveryv1.AddressTypeIPv4, ep("10.2.0.1", "n1")),
		kubeSlice("default", "dual-6", "dual", discoveryv1.AddressTypeIPv6, ep("fd00:2::1", "n2")),
		kubeService("default", "route", corev1.ServiceTypeClusterIP),
		kubeSlice("default", "route-z", "route", discoveryv1.AddressTypeFQDN, ep("z-ingress.example.test", "")),
		kubeSlice("default", "route-a", "route", discoveryv1.AddressTypeFQDN, ep("A-Ingress.example.test", "")),
		kubeService("default", "ext", corev1.ServiceTypeExternalName),
		kubeService("other", "api", corev1.ServiceTypeClusterIP),
		kubeSlice("other", "api-1", "api", discoveryv1.AddressTypeIPv4, ep("10.3.0.1", "n1")),
	}
}

// collectSink records what a source delivers.
type collectSink struct {
	mu      sync.Mutex
	states  []*State
	patches []*Patch
	fails   []error
	unch    int
	updated chan struct{}
}

func newCollectSink() *collectSink { return &collectSink{updated: make(chan struct{}, 100)} }

func (c *collectSink) Update(st *State) {
	c.mu.Lock()
	c.states = append(c.states, st)
	c.mu.Unlock()
	c.updated <- struct{}{}
}
func (c *collectSink) Patch(p *Patch) {
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

// newKubePlugin serves the fake cluster in zone cluster.test. with a kube
// source over client.
func newKubePlugin(t *testing.T, client kubernetes.Interface, endpointMode bool, src *kubeSource) *Endpointsvc {
	t.Helper()
	src.newClient = func() (kubernetes.Interface, error) { return client, nil }
	src.debounce = 5 * time.Millisecond
	e := &Endpointsvc{Zones: []string{"cluster.test."}, namespace: DefaultNamespace, ttl: 5, syncer: &syncer{}, source: src,
		Next: test.NextHandler(dns.RcodeRefused, nil)}
	e.endpointMode = endpointMode
	e.finish(fakeLookup)
	e.upstream = nil // no server to chase CNAMEs through in unit tests
	e.start(e.source)
	t.Cleanup(e.stop)
	if !e.Ready() {
		t.Fatal("not ready after the informers synced")
	}
	return e
}

func ask(t *testing.T, e *Endpointsvc, name string, qtype uint16) []string {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if _, err := e.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatal(err)
	}
	if rec.Msg.Rcode != dns.RcodeSuccess {
		return []string{dns.RcodeToString[rec.Msg.Rcode]}
	}
	var out []string
	for _, rr := range rec.Msg.Answer {
		out = append(out, rr.String())
	}
	return out
}

func expect(t *testing.T, e *Endpointsvc, name string, qtype uint16, want ...string) {
	t.Helper()
	got := ask(t, e, name, qtype)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s %s = %q, want %q", name, dns.TypeToString[qtype], got, want)
	}
}

func TestKubeSourceNodeMode(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range fixture() {
		create(t, client, o)
	}
	e := newKubePlugin(t, client, false, &kubeSource{})
	// n3 is down (Ready False), n4 has no address: web is on n1 and n2
	expect(t, e, "web.default.cluster.test.", dns.TypeA, "web.default.cluster.test.\t5\tIN\tA\t10.0.0.1")
	expect(t, e, "web.default.cluster.test.", dns.TypeAAAA, "web.default.cluster.test.\t5\tIN\tAAAA\tfd00::2")
	// the host port is the Service's nodePort
	expect(t, e, "_http._tcp.web.default.cluster.test.", dns.TypeSRV,
		"_http._tcp.web.default.cluster.test.\t5\tIN\tSRV\t0 10 30080 n1.node.cluster.test.",
		"_http._tcp.web.default.cluster.test.\t5\tIN\tSRV\t0 10 30080 n2.node.cluster.test.")
	// no nodePort: no SRV record, but the port name exists
	expect(t, e, "_http._tcp.dual.default.cluster.test.", dns.TypeSRV)
	expect(t, e, "n3.node.cluster.test.", dns.TypeA, "n3.node.cluster.test.\t5\tIN\tA\t10.0.0.3")
	expect(t, e, "n4.node.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "ext.default.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "api.other.cluster.test.", dns.TypeA, "api.other.cluster.test.\t5\tIN\tA\t10.0.0.1")
	// FQDN endpoints run on no node: nothing to answer in node mode
	expect(t, e, "route.default.cluster.test.", dns.TypeA)

	// node n3 becomes Ready: its endpoint counts
	n3 := kubeNode("n3", "10.0.0.3", corev1.ConditionTrue)
	n3.ResourceVersion = "2"
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		got := ask(t, e, "web.default.cluster.test.", dns.TypeA)
		if len(got) != 2 {
			return fmt.Sprint(got)
		}
		return ""
	})
	// delete a slice: its endpoints go
	if err := client.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprint(got)
		}
		return ""
	})
	// delete the Service: NXDOMAIN
	if err := client.CoreV1().Services("default").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[NXDOMAIN]" {
			return fmt.Sprint(got)
		}
		return ""
	})
}

func TestKubeSourceEndpointMode(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range fixture() {
		create(t, client, o)
	}
	e := newKubePlugin(t, client, true, &kubeSource{})
	// endpoints' own addresses, from several slices; n3's endpoint is out
	// (node down), n4's (node unknown) counts
	expect(t, e, "web.default.cluster.test.", dns.TypeA,
		"web.default.cluster.test.\t5\tIN\tA\t10.1.0.1", "web.default.cluster.test.\t5\tIN\tA\t10.1.0.2", "web.default.cluster.test.\t5\tIN\tA\t10.1.0.9")
	expect(t, e, "dual.default.cluster.test.", dns.TypeA, "dual.default.cluster.test.\t5\tIN\tA\t10.2.0.1")
	expect(t, e, "dual.default.cluster.test.", dns.TypeAAAA, "dual.default.cluster.test.\t5\tIN\tAAAA\tfd00:2::1")
	// two FQDN endpoints: ONE CNAME, the lexicographically first, conflict counted
	expect(t, e, "route.default.cluster.test.", dns.TypeA, "route.default.cluster.test.\t5\tIN\tCNAME\ta-ingress.example.test.")
	expect(t, e, "route.default.cluster.test.", dns.TypeCNAME, "route.default.cluster.test.\t5\tIN\tCNAME\ta-ingress.example.test.")
	if n := e.tbl.Load().nConflicts; n != 1 {
		t.Errorf("conflicts = %d, want 1", n)
	}
	// the first FQDN endpoint stops being ready: the other one is the CNAME
	sl := kubeSlice("default", "route-a", "route", discoveryv1.AddressTypeFQDN, ep("A-Ingress.example.test", ""))
	sl.Endpoints[0].Conditions.Ready = ptr(false)
	sl.ResourceVersion = "2"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		got := ask(t, e, "route.default.cluster.test.", dns.TypeA)
		if fmt.Sprint(got) != "[route.default.cluster.test.\t5\tIN\tCNAME\tz-ingress.example.test.]" {
			return fmt.Sprint(got)
		}
		if e.tbl.Load().nConflicts != 0 {
			return "conflict still counted"
		}
		return ""
	})
}

func TestKubeSourceFilters(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range fixture() {
		create(t, client, o)
	}
	labelled := kubeService("other", "picked", corev1.ServiceTypeClusterIP)
	labelled.Labels["tier"] = "edge"
	create(t, client, labelled)
	create(t, client, kubeSlice("other", "picked-1", "picked", discoveryv1.AddressTypeIPv4, ep("10.4.0.1", "n1")))
	e := newKubePlugin(t, client, true, &kubeSource{namespaces: []string{"other"}})
	expect(t, e, "web.default.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "api.other.cluster.test.", dns.TypeA, "api.other.cluster.test.\t5\tIN\tA\t10.3.0.1")
	e.stop()

	e = newKubePlugin(t, client, true, &kubeSource{labels: "tier=edge", namespaces: []string{"default", "other"}})
	expect(t, e, "api.other.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "picked.other.cluster.test.", dns.TypeA, "picked.other.cluster.test.\t5\tIN\tA\t10.4.0.1")
}

func TestKubeNodeAddressPreference(t *testing.T) {
	n := kubeNode("n1", "10.0.0.1", corev1.ConditionTrue)
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
		st := mapObjects(t, nil, nil, []any{n}, tc.pref)
		got := ""
		if len(st.Nodes) == 1 {
			got = st.Nodes[0].Address
		}
		if got != tc.want {
			t.Errorf("node_address %v: %q, want %q", tc.pref, got, tc.want)
		}
	}
}

func TestKubeTransformsAreSlim(t *testing.T) {
	svc := kubeService("default", "web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "HTTP", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053})
	x, _ := transformService(nil)(svc)
	k := x.(*kService)
	if k.GetLabels() != nil || k.GetAnnotations() != nil || k.Name != "web" || k.ResourceVersion != "1" ||
		len(k.ports) != 1 || k.ports[0] != (kServicePort{"http", "udp", 53, 30053}) {
		t.Errorf("slim service: %+v", k)
	}
	if y, _ := transformService(nil)(k); y != k {
		t.Error("an already slim object must pass unchanged")
	}
	x, _ = transformService(map[string]bool{"other": true})(svc)
	if !x.(*kService).skip {
		t.Error("a Service outside the namespaces must be marked skip")
	}
	sl := kubeSlice("default", "web-1", "Web", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{}, ep("10.0.0.1", "N1"))
	y, _ := transformSlice(nil)(sl)
	ks := y.(*kSlice)
	if ks.service != "default/web" || len(ks.endpoints) != 1 || ks.endpoints[0].nodeName() != "n1" || ks.address(0) != "10.0.0.1" || ks.GetLabels() != nil {
		t.Errorf("slim slice: %+v", ks)
	}
	// no endpoint keeps strings of its own: the node name is interned
	sl2 := kubeSlice("default", "web-3", "web", discoveryv1.AddressTypeIPv6, ep("FD00::2", "n1"))
	y, _ = transformSlice(nil)(sl2)
	if ks2 := y.(*kSlice); ks2.endpoints[0].node != ks.endpoints[0].node || ks2.address(0) != "fd00::2" || ks2.addressType != addressIPv6 {
		t.Errorf("slim IPv6 slice: %+v", ks2)
	}
	fq := kubeSlice("default", "web-4", "web", discoveryv1.AddressTypeFQDN, ep("ingress.example.com", ""))
	y, _ = transformSlice(nil)(fq)
	if kf := y.(*kSlice); len(kf.endpoints) != 1 || kf.address(0) != "ingress.example.com" || kf.endpoints[0].nodeName() != "" {
		t.Errorf("slim FQDN slice: %+v", kf)
	}
	// addresses that do not fit the slice's type are dropped by the
	// transform, and so never mapped
	bad := kubeSlice("default", "web-2", "web", discoveryv1.AddressTypeIPv4, ep("fd00::1", "n1"), ep("not-an-ip", "n1"))
	if y, _ := transformSlice(nil)(bad); len(y.(*kSlice).endpoints) != 0 {
		t.Errorf("bad addresses kept: %+v", y)
	}
	st := mapObjects(t, []any{kubeService("default", "web", corev1.ServiceTypeClusterIP)}, []any{bad}, nil, nil)
	if len(st.Tasks) != 0 {
		t.Errorf("bad addresses mapped: %+v", st.Tasks)
	}
}

// TestKubeSourceLifecycle: Run returns when stopped and leaves no goroutine.
func TestKubeSourceLifecycle(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range fixture() {
		create(t, client, o)
	}
	before := runtime.NumGoroutine()
	src := &kubeSource{newClient: func() (kubernetes.Interface, error) { return client, nil }, debounce: time.Millisecond}
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
	svc := kubeService("default", "dual", corev1.ServiceTypeClusterIP)
	svc.Annotations["other"] = "x"
	svc.ResourceVersion = "7"
	if _, err := client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if src.skipped.Load() != 1 || len(sink.states) != 1 {
			return fmt.Sprintf("skipped=%d states=%d", src.skipped.Load(), len(sink.states))
		}
		return ""
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	eventually(t, func() string {
		if n := runtime.NumGoroutine(); n > before+2 {
			return fmt.Sprintf("goroutines: %d, before %d", n, before)
		}
		return ""
	})
}

func create(t *testing.T, c *fake.Clientset, o any) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch x := o.(type) {
	case *corev1.Node:
		_, err = c.CoreV1().Nodes().Create(ctx, x, metav1.CreateOptions{})
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, x, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = c.CoreV1().Services(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
	case *discoveryv1.EndpointSlice:
		_, err = c.DiscoveryV1().EndpointSlices(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
