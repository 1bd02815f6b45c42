package endpointsvc

import (
	"fmt"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// TestKubeSourceSpec follows a fake cluster with schema kubernetes: cluster
// IPs, headless endpoints with hostnames, publishNotReadyAddresses,
// ExternalName, namespaces that exist, and changes of each.
func TestKubeSourceSpec(t *testing.T) {
	web := kubeService("shop", "web", corev1.ServiceTypeClusterIP)
	web.Spec.ClusterIP, web.Spec.ClusterIPs = "10.96.0.20", []string{"10.96.0.20", "fd00:96::20"}
	db := kubeService("shop", "db", corev1.ServiceTypeClusterIP)
	db.Spec.ClusterIP, db.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	pnra := kubeService("shop", "pnra", corev1.ServiceTypeClusterIP)
	pnra.Spec.ClusterIP, pnra.Spec.PublishNotReadyAddresses = corev1.ClusterIPNone, true
	ext := kubeService("shop", "ext", corev1.ServiceTypeExternalName)
	ext.Spec.ExternalName = "Web.Shop.svc.Cluster.Local"
	extIP := kubeService("shop", "extip", corev1.ServiceTypeExternalName)
	extIP.Spec.ExternalName = "192.0.2.1"
	host := func(e discoveryv1.Endpoint, h string) discoveryv1.Endpoint { e.Hostname = &h; return e }
	notReady := func(e discoveryv1.Endpoint) discoveryv1.Endpoint { e.Conditions.Ready = ptr(false); return e }
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "empty", ResourceVersion: "1"}},
		web, db, pnra, ext, extIP,
		kubeSlice("shop", "web-a", "web", discoveryv1.AddressTypeIPv4, ep("10.244.1.5", "n1")),
		kubeSlice("shop", "db-a", "db", discoveryv1.AddressTypeIPv4, host(ep("10.244.2.1", ""), "db-0"), notReady(host(ep("10.244.2.2", ""), "db-1"))),
		kubeSlice("shop", "pnra-a", "pnra", discoveryv1.AddressTypeIPv4, notReady(ep("10.244.3.1", ""))),
	)
	src := &kubeSource{spec: true, newClient: func() (kubernetes.Interface, error) { return client, nil }, debounce: 5 * time.Millisecond}
	e := &Endpointsvc{Zones: []string{"cluster.test.", "in-addr.arpa."}, spec: true, ttl: 5, syncer: &syncer{}, source: src,
		Next: test.NextHandler(dns.RcodeRefused, nil)}
	e.finish(fakeLookup)
	e.upstream = nil // no server to chase CNAMEs through in unit tests
	e.start(e.source)
	t.Cleanup(e.stop)
	if !e.Ready() {
		t.Fatal("not ready after the informers synced")
	}

	expect(t, e, "web.shop.svc.cluster.test.", dns.TypeA, "web.shop.svc.cluster.test.\t5\tIN\tA\t10.96.0.20")
	expect(t, e, "web.shop.svc.cluster.test.", dns.TypeAAAA, "web.shop.svc.cluster.test.\t5\tIN\tAAAA\tfd00:96::20")
	expect(t, e, "db.shop.svc.cluster.test.", dns.TypeA, "db.shop.svc.cluster.test.\t5\tIN\tA\t10.244.2.1")
	expect(t, e, "db-0.db.shop.svc.cluster.test.", dns.TypeA, "db-0.db.shop.svc.cluster.test.\t5\tIN\tA\t10.244.2.1")
	expect(t, e, "db-1.db.shop.svc.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "pnra.shop.svc.cluster.test.", dns.TypeA, "pnra.shop.svc.cluster.test.\t5\tIN\tA\t10.244.3.1")
	expect(t, e, "ext.shop.svc.cluster.test.", dns.TypeCNAME, "ext.shop.svc.cluster.test.\t5\tIN\tCNAME\tWeb.Shop.svc.Cluster.Local.")
	expect(t, e, "extip.shop.svc.cluster.test.", dns.TypeCNAME, "NXDOMAIN")
	expect(t, e, "empty.svc.cluster.test.", dns.TypeA)
	expect(t, e, "nope.svc.cluster.test.", dns.TypeA, "NXDOMAIN")
	expect(t, e, "1.2.244.10.in-addr.arpa.", dns.TypePTR, "1.2.244.10.in-addr.arpa.\t5\tIN\tPTR\tdb-0.db.shop.svc.cluster.test.")

	// the endpoint becomes ready, a namespace and a Service come
	sl, _ := client.DiscoveryV1().EndpointSlices("shop").Get(t.Context(), "db-a", metav1.GetOptions{})
	sl.Endpoints[1].Conditions.Ready, sl.ResourceVersion = ptr(true), "2"
	if _, err := client.DiscoveryV1().EndpointSlices("shop").Update(t.Context(), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late", ResourceVersion: "1"}})
	api := kubeService("late", "api", corev1.ServiceTypeClusterIP)
	api.Spec.ClusterIP = "10.96.0.30"
	create(t, client, api)
	eventually(t, func() string {
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
	node := kubeNode("n1", "10.0.0.1", corev1.ConditionTrue)
	svc := kubeService("default", "web", corev1.ServiceTypeClusterIP)
	sl := kubeSlice("default", "web-a", "web", discoveryv1.AddressTypeIPv4, ep("10.1.0.1", "n1"))
	client := fake.NewClientset(node, svc, sl)
	src := &kubeSource{}
	e := newKubePlugin(t, client, false, src)
	expect(t, e, "web.default.cluster.test.", dns.TypeA, "web.default.cluster.test.\t5\tIN\tA\t10.0.0.1")
	builds, patches := src.builds.Load(), src.patches.Load()

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
	eventually(t, func() string {
		if n := src.skipped.Load(); n != 60 {
			return fmt.Sprintf("%d no-op updates seen, want 60", n)
		}
		return ""
	})
	time.Sleep(50 * time.Millisecond) // longer than the debounce
	if n, p := src.builds.Load()-builds, src.patches.Load()-patches; n != 0 || p != 0 {
		t.Errorf("%d builds, %d patches after 60 no-op updates, want 0", n, p)
	}

	// a real change: one more build, and the answer follows
	x, _ := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-a", metav1.GetOptions{})
	x.Endpoints[0].Conditions.Ready, x.ResourceVersion = ptr(false), "500"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if got := ask(t, e, "web.default.cluster.test.", dns.TypeA); len(got) != 0 {
			return fmt.Sprintf("web after the endpoint went unready: %q", got)
		}
		return ""
	})
	if n, p := src.builds.Load()-builds, src.patches.Load()-patches; n != 0 || p != 1 {
		t.Errorf("%d builds, %d patches after one real change, want 0, 1", n, p)
	}
}
