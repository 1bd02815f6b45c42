package endpointsvc

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/pkg/persist"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The kubernetes source with the plugin: a fake cluster, served through
// ServeDNS, changed, and served again.

// newKubePlugin serves the fake cluster in zone cluster.test. with schema
// orch over source src.
func newKubePlugin(t *testing.T, client kubernetes.Interface, endpointMode bool, src *kubesource.Source) *Endpointsvc {
	t.Helper()
	e := orchPlugin(5, &syncer{}, "cluster.test.")
	orchOf(e).endpointMode = endpointMode
	orchOf(e).srv.Upstream = nil // no server to chase CNAMEs through in unit tests
	return startOver(t, e, client, src)
}

// newSpecKubePlugin serves the fake cluster with schema kubernetes in zone
// cluster.test. (and its reverse zone), with a snapshot when snap is set.
func newSpecKubePlugin(t *testing.T, client kubernetes.Interface, src *kubesource.Source, snap string) *Endpointsvc {
	t.Helper()
	return startOver(t, dnsPlugin(5, &syncer{snapshotPath: snap}, "cluster.test.", "in-addr.arpa."), client, src)
}

// startOver starts e with source src over client, stopped when the test
// ends, and waits until it serves.
func startOver(t *testing.T, e *Endpointsvc, client kubernetes.Interface, src *kubesource.Source) *Endpointsvc {
	t.Helper()
	src.NewClient = func() (kubernetes.Interface, error) { return client, nil }
	src.Debounce = 5 * time.Millisecond
	e.source = src
	e.start(e.source)
	t.Cleanup(e.stop)
	if !e.Ready() {
		t.Fatal("not ready after the informers synced")
	}
	return e
}

// ask returns the answer's records as text, or the rcode when not NOERROR.
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

// readClusterSnapshot decodes a snapshot of schema kubernetes.
func readClusterSnapshot(t *testing.T, path string) *k8sdns.Cluster {
	t.Helper()
	b, err := persist.ReadFile(path)
	if err != nil || b == nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	c, err := k8sdns.DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKubeSourceNodeMode(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range kubefix.Fixture() {
		kubefix.Create(t, client, o)
	}
	e := newKubePlugin(t, client, false, kubesource.NewOrch(kubesource.Config{}))
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
	n3 := kubefix.Node("n3", "10.0.0.3", corev1.ConditionTrue)
	n3.ResourceVersion = "2"
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
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
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprint(got)
		}
		return ""
	})
	// delete the Service: NXDOMAIN
	if err := client.CoreV1().Services("default").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[NXDOMAIN]" {
			return fmt.Sprint(got)
		}
		return ""
	})
}

func TestKubeSourceEndpointMode(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range kubefix.Fixture() {
		kubefix.Create(t, client, o)
	}
	e := newKubePlugin(t, client, true, kubesource.NewOrch(kubesource.Config{}))
	// endpoints' own addresses, from several slices; n3's endpoint is out
	// (node down), n4's (node unknown) counts
	expect(t, e, "web.default.cluster.test.", dns.TypeA,
		"web.default.cluster.test.\t5\tIN\tA\t10.1.0.1", "web.default.cluster.test.\t5\tIN\tA\t10.1.0.2", "web.default.cluster.test.\t5\tIN\tA\t10.1.0.9")
	expect(t, e, "dual.default.cluster.test.", dns.TypeA, "dual.default.cluster.test.\t5\tIN\tA\t10.2.0.1")
	expect(t, e, "dual.default.cluster.test.", dns.TypeAAAA, "dual.default.cluster.test.\t5\tIN\tAAAA\tfd00:2::1")
	// two FQDN endpoints: ONE CNAME, the lexicographically first, conflict counted
	expect(t, e, "route.default.cluster.test.", dns.TypeA, "route.default.cluster.test.\t5\tIN\tCNAME\ta-ingress.example.test.")
	expect(t, e, "route.default.cluster.test.", dns.TypeCNAME, "route.default.cluster.test.\t5\tIN\tCNAME\ta-ingress.example.test.")
	if n := e.tbl.Load().model.Conflicts(); n != 1 {
		t.Errorf("conflicts = %d, want 1", n)
	}
	// the first FQDN endpoint stops being ready: the other one is the CNAME
	sl := kubefix.Slice("default", "route-a", "route", discoveryv1.AddressTypeFQDN, kubefix.EP("A-Ingress.example.test", ""))
	sl.Endpoints[0].Conditions.Ready = kubefix.Ptr(false)
	sl.ResourceVersion = "2"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		got := ask(t, e, "route.default.cluster.test.", dns.TypeA)
		if fmt.Sprint(got) != "[route.default.cluster.test.\t5\tIN\tCNAME\tz-ingress.example.test.]" {
			return fmt.Sprint(got)
		}
		if e.tbl.Load().model.Conflicts() != 0 {
			return "conflict still counted"
		}
		return ""
	})
}

func TestKubeSourceFilters(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range kubefix.Fixture() {
		kubefix.Create(t, client, o)
	}
	labelled := kubefix.Service("other", "picked", corev1.ServiceTypeClusterIP)
	labelled.Labels["tier"] = "edge"
	kubefix.Create(t, client, labelled)
	kubefix.Create(t, client, kubefix.Slice("other", "picked-1", "picked", discoveryv1.AddressTypeIPv4, kubefix.EP("10.4.0.1", "n1")))
	e := newKubePlugin(t, client, true, kubesource.NewOrch(kubesource.Config{Namespaces: []string{"other"}}))
	expect(t, e, "web.default.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "api.other.cluster.test.", dns.TypeA, "api.other.cluster.test.\t5\tIN\tA\t10.3.0.1")
	e.stop()

	e = newKubePlugin(t, client, true, kubesource.NewOrch(kubesource.Config{Labels: "tier=edge", Namespaces: []string{"default", "other"}}))
	expect(t, e, "api.other.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "picked.other.cluster.test.", dns.TypeA, "picked.other.cluster.test.\t5\tIN\tA\t10.4.0.1")
}

// TestKubeSourceSpec follows a fake cluster with schema kubernetes: cluster
// IPs, headless endpoints with hostnames, publishNotReadyAddresses,
// ExternalName, namespaces that exist, and changes of each.
func TestKubeSourceSpec(t *testing.T) {
	web := kubefix.Service("shop", "web", corev1.ServiceTypeClusterIP)
	web.Spec.ClusterIP, web.Spec.ClusterIPs = "10.96.0.20", []string{"10.96.0.20", "fd00:96::20"}
	db := kubefix.Service("shop", "db", corev1.ServiceTypeClusterIP)
	db.Spec.ClusterIP, db.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	pnra := kubefix.Service("shop", "pnra", corev1.ServiceTypeClusterIP)
	pnra.Spec.ClusterIP, pnra.Spec.PublishNotReadyAddresses = corev1.ClusterIPNone, true
	ext := kubefix.Service("shop", "ext", corev1.ServiceTypeExternalName)
	ext.Spec.ExternalName = "Web.Shop.svc.Cluster.Local"
	extIP := kubefix.Service("shop", "extip", corev1.ServiceTypeExternalName)
	extIP.Spec.ExternalName = "192.0.2.1"
	host := func(e discoveryv1.Endpoint, h string) discoveryv1.Endpoint { e.Hostname = &h; return e }
	notReady := func(e discoveryv1.Endpoint) discoveryv1.Endpoint { e.Conditions.Ready = kubefix.Ptr(false); return e }
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "empty", ResourceVersion: "1"}},
		web, db, pnra, ext, extIP,
		kubefix.Slice("shop", "web-a", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.244.1.5", "n1")),
		kubefix.Slice("shop", "db-a", "db", discoveryv1.AddressTypeIPv4, host(kubefix.EP("10.244.2.1", ""), "db-0"), notReady(host(kubefix.EP("10.244.2.2", ""), "db-1"))),
		kubefix.Slice("shop", "pnra-a", "pnra", discoveryv1.AddressTypeIPv4, notReady(kubefix.EP("10.244.3.1", ""))),
	)
	e := newSpecKubePlugin(t, client, kubesource.NewDNS(kubesource.Config{}), "")

	expect(t, e, "web.shop.svc.cluster.test.", dns.TypeA, "web.shop.svc.cluster.test.\t5\tIN\tA\t10.96.0.20")
	expect(t, e, "web.shop.svc.cluster.test.", dns.TypeAAAA, "web.shop.svc.cluster.test.\t5\tIN\tAAAA\tfd00:96::20")
	expect(t, e, "db.shop.svc.cluster.test.", dns.TypeA, "db.shop.svc.cluster.test.\t5\tIN\tA\t10.244.2.1")
	expect(t, e, "db-0.db.shop.svc.cluster.test.", dns.TypeA, "db-0.db.shop.svc.cluster.test.\t5\tIN\tA\t10.244.2.1")
	expect(t, e, "db-1.db.shop.svc.cluster.test.", dns.TypeA, "NXDOMAIN")
	// publishNotReadyAddresses: the EndpointSlice controller marks such
	// endpoints ready; a slice that does not is read as the kubernetes
	// plugin reads it (the ready condition only)
	expect(t, e, "pnra.shop.svc.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "ext.shop.svc.cluster.test.", dns.TypeCNAME, "ext.shop.svc.cluster.test.\t5\tIN\tCNAME\tWeb.Shop.svc.Cluster.Local.")
	expect(t, e, "extip.shop.svc.cluster.test.", dns.TypeCNAME, "NXDOMAIN")
	expect(t, e, "empty.svc.cluster.test.", dns.TypeA)
	expect(t, e, "nope.svc.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "1.2.244.10.in-addr.arpa.", dns.TypePTR, "1.2.244.10.in-addr.arpa.\t5\tIN\tPTR\tdb-0.db.shop.svc.cluster.test.")

	// the endpoint becomes ready, a namespace and a Service come
	sl, _ := client.DiscoveryV1().EndpointSlices("shop").Get(t.Context(), "db-a", metav1.GetOptions{})
	sl.Endpoints[1].Conditions.Ready, sl.ResourceVersion = kubefix.Ptr(true), "2"
	if _, err := client.DiscoveryV1().EndpointSlices("shop").Update(t.Context(), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Create(t, client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late", ResourceVersion: "1"}})
	api := kubefix.Service("late", "api", corev1.ServiceTypeClusterIP)
	api.Spec.ClusterIP = "10.96.0.30"
	kubefix.Create(t, client, api)
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "api.late.svc.cluster.test.", dns.TypeA); len(got) != 1 || got[0] != "api.late.svc.cluster.test.\t5\tIN\tA\t10.96.0.30" {
			return "api.late: " + got[0]
		}
		if got := ask(t, e, "db-1.db.shop.svc.cluster.test.", dns.TypeA); got[0] != "db-1.db.shop.svc.cluster.test.\t5\tIN\tA\t10.244.2.2" {
			return "db-1: " + got[0]
		}
		return ""
	})
}

// TestKubeSourceNoOpUpdates: updates that change nothing the mapping reads
// (labels, annotations, a Node heartbeat) cost a comparison and no build
// or patch; a real change is one patch of one Service.
func TestKubeSourceNoOpUpdates(t *testing.T) {
	node := kubefix.Node("n1", "10.0.0.1", corev1.ConditionTrue)
	svc := kubefix.Service("default", "web", corev1.ServiceTypeClusterIP)
	sl := kubefix.Slice("default", "web-a", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.1.0.1", "n1"))
	client := fake.NewClientset(node, svc, sl)
	src := kubesource.NewOrch(kubesource.Config{})
	e := newKubePlugin(t, client, false, src)
	expect(t, e, "web.default.cluster.test.", dns.TypeA, "web.default.cluster.test.\t5\tIN\tA\t10.0.0.1")
	builds, patches := src.Stats.Builds.Load(), src.Stats.Patches.Load()

	ctx := t.Context()
	for i := range 20 {
		s, _ := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		s.Annotations = map[string]string{"touched": fmt.Sprint(i)}
		s.ResourceVersion = fmt.Sprint(100 + i)
		if _, err := client.CoreV1().Services("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		x, _ := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-a", metav1.GetOptions{})
		x.Labels["touched"], x.ResourceVersion = fmt.Sprint(i), fmt.Sprint(100+i)
		if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, x, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		n.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
		n.ResourceVersion = fmt.Sprint(100 + i)
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubefix.Eventually(t, func() string {
		if n := src.Stats.Skipped.Load(); n != 60 {
			return fmt.Sprintf("%d no-op updates seen, want 60", n)
		}
		return ""
	})
	time.Sleep(50 * time.Millisecond) // longer than the debounce
	if n, p := src.Stats.Builds.Load()-builds, src.Stats.Patches.Load()-patches; n != 0 || p != 0 {
		t.Errorf("%d builds, %d patches after 60 no-op updates, want 0", n, p)
	}

	// a real change: one more build, and the answer follows
	x, _ := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-a", metav1.GetOptions{})
	x.Endpoints[0].Conditions.Ready, x.ResourceVersion = kubefix.Ptr(false), "500"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprintf("web after the endpoint went unready: %q", got)
		}
		return ""
	})
	if n, p := src.Stats.Builds.Load()-builds, src.Stats.Patches.Load()-patches; n != 0 || p != 1 {
		t.Errorf("%d builds, %d patches after one real change, want 0, 1", n, p)
	}
}

// TestKubePatchOneService: among 30 Services, a change to one Service's
// slice maps that Service alone (no whole build), the answer follows, and
// the snapshot written afterwards holds the change.
func TestKubePatchOneService(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}})
	for i := range 30 {
		svc := kubefix.Service("default", fmt.Sprintf("s%d", i), corev1.ServiceTypeClusterIP)
		svc.Spec.ClusterIP = fmt.Sprintf("10.96.0.%d", i+1)
		kubefix.Create(t, client, svc)
		kubefix.Create(t, client, kubefix.Slice("default", fmt.Sprintf("s%d-a", i), fmt.Sprintf("s%d", i), discoveryv1.AddressTypeIPv4, kubefix.EP(fmt.Sprintf("10.1.0.%d", i+1), "")))
	}
	snap := filepath.Join(t.TempDir(), "snap.json")
	src := kubesource.NewDNS(kubesource.Config{})
	e := newSpecKubePlugin(t, client, src, snap)
	expect(t, e, "10.0.1.10.in-addr.arpa.", dns.TypePTR, "10.0.1.10.in-addr.arpa.\t5\tIN\tPTR\t10-1-0-10.s9.default.svc.cluster.test.")
	builds, patches, rebuilt := src.Stats.Builds.Load(), src.Stats.Patches.Load(), src.Stats.Rebuilt.Load()

	ctx := t.Context()
	x, _ := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "s7-a", metav1.GetOptions{})
	x.Endpoints = append(x.Endpoints, kubefix.EP("10.1.7.7", ""))
	x.ResourceVersion = "9"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		got := ask(t, e, "7.7.1.10.in-addr.arpa.", dns.TypePTR)
		if fmt.Sprint(got) != "[7.7.1.10.in-addr.arpa.\t5\tIN\tPTR\t10-1-7-7.s7.default.svc.cluster.test.]" {
			return fmt.Sprint(got)
		}
		return ""
	})
	if b, p, r := src.Stats.Builds.Load()-builds, src.Stats.Patches.Load()-patches, src.Stats.Rebuilt.Load()-rebuilt; b != 0 || p != 1 || r != 1 {
		t.Errorf("after one slice update: %d whole builds, %d patches, %d services mapped; want 0, 1, 1", b, p, r)
	}
	// the other Services still answer, from the records the patch shared
	expect(t, e, "10.0.1.10.in-addr.arpa.", dns.TypePTR, "10.0.1.10.in-addr.arpa.\t5\tIN\tPTR\t10-1-0-10.s9.default.svc.cluster.test.")

	// a deleted Service is removed by a patch too
	if err := client.CoreV1().Services("default").Delete(ctx, "s3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "s3.default.svc.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[NXDOMAIN]" {
			return fmt.Sprint(got)
		}
		return ""
	})
	if b := src.Stats.Builds.Load() - builds; b != 0 {
		t.Errorf("%d whole builds, want 0", b)
	}
	e.stop()
	c := readClusterSnapshot(t, snap)
	eps := 0
	for _, sl := range c.Slices {
		eps += len(sl.Endpoints)
	}
	if len(c.Services) != 29 || len(c.Slices) != 30 || eps != 31 {
		t.Errorf("snapshot after stop: %d services, %d slices, %d endpoints; want 29, 30, 31", len(c.Services), len(c.Slices), eps)
	}
}

// TestKubePatchNodeDownServed: the same through the plugin: the Services
// on the node lose its address, the others keep theirs, without a whole
// build.
func TestKubePatchNodeDownServed(t *testing.T) {
	client := fake.NewClientset()
	for _, o := range kubefix.Fixture() {
		kubefix.Create(t, client, o)
	}
	src := kubesource.NewOrch(kubesource.Config{})
	e := newKubePlugin(t, client, false, src)
	builds := src.Stats.Builds.Load()
	n1 := kubefix.Node("n1", "10.0.0.1", corev1.ConditionFalse)
	n1.ResourceVersion = "5"
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
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
	if n := src.Stats.Builds.Load() - builds; n != 0 {
		t.Errorf("%d whole builds, want 0", n)
	}
}

// TestKubePatchHostnameNodesRebuildWhole: with hostname advertise addresses
// (re-resolved from a whole state), a change still reaches the answers:
// the patch falls back to the source's whole state.
func TestKubePatchHostnameNodesRebuildWhole(t *testing.T) {
	client := fake.NewClientset(
		kubefix.Node("node4", "10.0.0.4", corev1.ConditionTrue),
		kubefix.Service("default", "web", corev1.ServiceTypeClusterIP),
		kubefix.Slice("default", "web-a", "web", discoveryv1.AddressTypeIPv4, kubefix.EP("10.1.0.1", "node4")))
	src := kubesource.NewOrch(kubesource.Config{NodeAddress: []string{"hostname"}})
	e := newKubePlugin(t, client, false, src)
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[web.default.cluster.test.\t5\tIN\tA\t198.51.100.4]" {
			return fmt.Sprint(got)
		}
		return ""
	})
	x, _ := client.DiscoveryV1().EndpointSlices("default").Get(t.Context(), "web-a", metav1.GetOptions{})
	x.Endpoints[0].Conditions.Ready, x.ResourceVersion = kubefix.Ptr(false), "9"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(t.Context(), x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubefix.Eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprint(got)
		}
		return ""
	})
	if p := src.Stats.Patches.Load(); p != 1 {
		t.Errorf("%d patches, want 1", p)
	}
}

// TestKubeSourcePermissionKeepsWaiting: a permission error (Namespaces
// refused at first, as while a role binding is being created) is no
// outage: it does not end the start-up wait, which lasts until the
// informers sync once the request is allowed.
func TestKubeSourcePermissionKeepsWaiting(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}})
	svc := kubefix.Service("shop", "web", corev1.ServiceTypeClusterIP)
	svc.Spec.ClusterIP = "10.96.0.5"
	kubefix.Create(t, client, svc)
	var refused atomic.Int64
	forbid := func(a k8stesting.Action) error {
		if a.GetResource().Resource == "namespaces" && refused.Load() == 0 {
			refused.Add(1)
			return apierrors.NewForbidden(k8sschema.GroupResource{Resource: "namespaces"}, "", errors.New("no binding yet"))
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
	src := kubesource.NewDNS(kubesource.Config{})
	src.NewClient, src.Debounce = func() (kubernetes.Interface, error) { return client, nil }, time.Millisecond
	e := dnsPlugin(5, &syncer{}, "cluster.test.")
	e.source = src
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

// TestKubeSnapshotRestartSchemaWords: namespaces named like words of the
// orch schema (node) or of the specification (pod, svc) are ordinary
// namespaces: the snapshot the source writes loads at the next start, so a
// restart while the API server is unreachable answers as before (such a
// snapshot used to be rejected - "Ignoring snapshot" - and the restart
// answered SERVFAIL for the whole cluster).
func TestKubeSnapshotRestartSchemaWords(t *testing.T) {
	client := fake.NewClientset()
	var names []string
	for i, ns := range []string{"node", "pod", "svc"} {
		kubefix.Create(t, client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, ResourceVersion: "1"}})
		web := kubefix.Service(ns, "web", corev1.ServiceTypeClusterIP)
		web.Spec.ClusterIP = fmt.Sprintf("10.96.0.%d", i+1)
		kubefix.Create(t, client, web)
		db := kubefix.Service(ns, "db", corev1.ServiceTypeClusterIP)
		db.Spec.ClusterIP = corev1.ClusterIPNone
		kubefix.Create(t, client, db)
		kubefix.Create(t, client, kubefix.Slice(ns, "db-1", "db", discoveryv1.AddressTypeIPv4, kubefix.EP(fmt.Sprintf("10.244.%d.1", i), "n1")))
		names = append(names, "web."+ns+".svc.cluster.test.", "db."+ns+".svc.cluster.test.", ns+".svc.cluster.test.",
			fmt.Sprintf("1.%d.244.10.in-addr.arpa.", i))
	}
	snap := filepath.Join(t.TempDir(), "snap.json")
	live := newSpecKubePlugin(t, client, kubesource.NewDNS(kubesource.Config{}), snap)
	want := map[string]string{}
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypePTR} {
			want[n+dns.TypeToString[qt]] = fmt.Sprint(ask(t, live, n, qt))
		}
	}
	live.stop() // writes the final snapshot

	down := kubesource.NewDNS(kubesource.Config{})
	down.NewClient = func() (kubernetes.Interface, error) { return nil, errors.New("API server unreachable") }
	e := dnsPlugin(5, &syncer{snapshotPath: snap}, "cluster.test.", "in-addr.arpa.")
	e.source = down
	e.start(e.source)
	defer e.stop()
	if !e.Ready() {
		t.Fatal("not ready from the snapshot")
	}
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypePTR} {
			if got := fmt.Sprint(ask(t, e, n, qt)); got != want[n+dns.TypeToString[qt]] {
				t.Errorf("%s %s after the restart: %s, want %s", n, dns.TypeToString[qt], got, want[n+dns.TypeToString[qt]])
			}
		}
	}
	if got := ask(t, e, "web.node.svc.cluster.test.", dns.TypeA); fmt.Sprint(got) != "[web.node.svc.cluster.test.\t5\tIN\tA\t10.96.0.1]" {
		t.Errorf("web.node: %v", got)
	}
}
