package test

import (
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The DNS programming latency end to end: a real kube-apiserver, the
// shipped cluster Corefile with `replicate` (a real meshdns process) and
// a node-local follower process; EndpointSlices written with the
// endpoints.kubernetes.io/last-change-trigger-time annotation, as the
// endpoint slice controller writes them, and the metric scraped from
// both processes' /metrics.

const programmingMetric = "coredns_endpointsvc_dns_programming_duration_seconds"

// annotateSlice replaces a slice's endpoints and sets its trigger time.
func annotateSlice(t *testing.T, k *kubeAPI, ns, name string, at time.Time, eps ...discoveryv1.Endpoint) {
	t.Helper()
	sl, err := k.Client.DiscoveryV1().EndpointSlices(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = eps
	if sl.Annotations == nil {
		sl.Annotations = map[string]string{}
	}
	sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = at.UTC().Format(time.RFC3339Nano)
	if _, err := k.Client.DiscoveryV1().EndpointSlices(ns).Update(ctxT(t), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// programmedCount is the histogram's sample count of kind on s.
func programmedCount(s *Server, kind string) float64 {
	return s.Metric(programmingMetric+"_count", `service_kind="`+kind+`"`)
}

// TestProgrammingLatencyE2E: the cluster DNS replica and its node-local
// follower each observe a slice change with a trigger time once, with the
// kind of its Service (a ClusterIP Service, a headless one with a
// selector, one without), no sooner than its trigger time allows; the
// slices of the first list (one with a trigger time) and an update that
// changes no answer are not observed.
func TestProgrammingLatencyE2E(t *testing.T) {
	t0 := time.Now()
	k := startKubeAPI(t)
	t.Logf("API server up in %v", time.Since(t0).Round(time.Millisecond))
	createNS(t, k, "shop")
	createNS(t, k, "dns")
	replicaObjects(t, k, "shop", 2) // svc0, svc1 (ClusterIP), db (headless, no selector)
	createService(t, k, "shop", "hl", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.Selector = corev1.ClusterIPNone, map[string]string{"app": "hl"}
	})
	createSlice(t, k, "shop", "hl-a", "hl", discoveryv1.AddressTypeIPv4, endpoint("10.244.100.1", "n1", true, false))
	annotateSlice(t, k, "shop", "svc0-a", time.Now().Add(-time.Hour), endpoint("10.244.0.9", "n1", true, false))

	leader := Start(t, replicaLeaderCorefile(t, k.Kubeconfig), Options{Env: []string{"POD_NAME=meshdns-e2e", "POD_NAMESPACE=dns"}, Files: replicaTokenFiles})
	follower := startReplicaFollower(t, leader.Addr(9155))
	within(t, 5*time.Second, follower.DNS(), "hl.shop.svc.cluster.local", dns.TypeA, "10.244.100.1")
	t.Logf("replica and follower answering at %v", time.Since(t0).Round(time.Millisecond))
	for _, s := range []*Server{leader, follower} {
		if n := s.Metric(programmingMetric + "_count"); n != 0 {
			t.Fatalf("%v observations of the first list", n)
		}
	}

	const ago = 1500 * time.Millisecond
	at := time.Now().Add(-ago)
	annotateSlice(t, k, "shop", "svc1-a", at, endpoint("10.244.1.9", "n1", true, false))
	annotateSlice(t, k, "shop", "hl-a", at, endpoint("10.244.100.2", "n1", true, false))
	annotateSlice(t, k, "shop", "db-a", at, endpoint("10.244.200.9", "n1", true, false))
	within(t, 5*time.Second, follower.DNS(), "db.shop.svc.cluster.local", dns.TypeA, "10.244.200.9")
	within(t, 5*time.Second, follower.DNS(), "hl.shop.svc.cluster.local", dns.TypeA, "10.244.100.2")
	servers := []struct {
		name string
		srv  *Server
	}{{"replica", leader}, {"follower", follower}}
	for _, s := range servers {
		for _, kind := range []string{"cluster_ip", "headless_with_selector", "headless_without_selector"} {
			waitProgrammed(t, s.name, s.srv, kind, 1)
			sum := s.srv.Metric(programmingMetric+"_sum", `service_kind="`+kind+`"`)
			if sum < ago.Seconds() || sum > 60 {
				t.Errorf("%s: %s observed %.3f s for a change triggered %v before", s.name, kind, sum, ago)
			}
			// the SLO's bucket: none at or below 1.024 s
			if le := s.srv.Metric(programmingMetric+"_bucket", `service_kind="`+kind+`"`, `le="1.024"`); le != 0 {
				t.Errorf("%s: %s has %v observations at or below 1.024 s", s.name, kind, le)
			}
		}
	}

	// a no-op update (a new trigger time, the same endpoints: nothing an
	// answer reads) is not observed; a real change after it, to the same
	// watch, is the barrier that says the no-op was handled
	t.Logf("changes observed at %v", time.Since(t0).Round(time.Millisecond))
	annotateSlice(t, k, "shop", "svc1-a", time.Now(), endpoint("10.244.1.9", "n1", true, false))
	annotateSlice(t, k, "shop", "hl-a", time.Now(), endpoint("10.244.100.3", "n1", true, false))
	within(t, 5*time.Second, follower.DNS(), "hl.shop.svc.cluster.local", dns.TypeA, "10.244.100.3")
	for _, s := range servers {
		waitProgrammed(t, s.name, s.srv, "headless_with_selector", 2)
		if n := programmedCount(s.srv, "cluster_ip"); n != 1 {
			t.Errorf("%s: %v observations of cluster_ip after a no-op update, want 1", s.name, n)
		}
	}
	t.Logf("done at %v (the processes and the API server stop after)", time.Since(t0).Round(time.Millisecond))
}

// waitProgrammed waits up to 5 s for s's histogram of kind to count want
// observations, and fails when it does not.
func waitProgrammed(t *testing.T, name string, s *Server, kind string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	n := programmedCount(s, kind)
	for n != want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = programmedCount(s, kind)
	}
	if n != want {
		t.Errorf("%s: %v observations of %s, want %v", name, n, kind, want)
	}
}
