package test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiOutage is how long the API server stays away in TestAPIReturn: long
// enough for client-go's reflectors to back off far (800 ms doubling to a
// 30 s cap, with up to as much again of jitter) while their requests fail.
const apiOutage = 60 * time.Second

// apiReturnGoal is how soon after the API server's return meshdns must
// follow it (issue 25: "the API back - a new Service answers within 2 s").
const apiReturnGoal = 2 * time.Second

// TestAPIReturn runs meshdns with the shipped cluster Corefile against a
// real kube-apiserver that goes away for a minute and comes back: frozen
// (SIGSTOP: every request hangs) and then killed and restarted (connection
// refused). Right after each return a Service is created, which must be in
// the table and answered within 2 s, and a stray EndpointSlice in the
// Service that publish manages, which publish must delete within 2 s: both
// the source's informers and publish's follow the API at once, not after
// their retry backoff. Without the gate in the client's transport
// (kubesource/gate.go) the killed variant took 20 s and 52 s (90 s outage)
// for the Service; the frozen one followed at once here (on loopback the
// relists hang until the thaw instead of failing), and is kept for the
// gate's path through it (a lost watch connection, held relists).
func TestAPIReturn(t *testing.T) {
	k := startKubeAPI(t)
	createNS(t, k, "shop")
	createNS(t, k, "dns")
	createService(t, k, "dns", "meshdns", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
	})
	s := Start(t, shippedClusterCorefile(t, k.Kubeconfig), Options{Env: []string{"POD_NAME=meshdns-e2e", "POD_NAMESPACE=dns"}})
	within(t, 5*time.Second, s.DNS(), "meshdns.dns.svc.cluster.local", dns.TypeA, serviceIP(t, k, "dns", "meshdns"))

	// with the API server up all along: the base line
	svc, slice := followAPI(t, k, s, "up")
	t.Logf("API server up: the new Service in the table after %v, the stray slice deleted after %v", svc, slice)

	for _, v := range []struct {
		name     string
		down, up func()
	}{
		{"Frozen", k.Freeze, func() { k.Thaw(); waitAPIReady(t, k) }},
		{"Killed", k.StopAPI, k.StartAPI},
	} {
		t.Run(v.name, func(t *testing.T) {
			v.down()
			back := false
			defer func() {
				if !back {
					v.up()
				}
			}()
			time.Sleep(apiOutage)
			v.up()
			back = true
			svc, slice := followAPI(t, k, s, strings.ToLower(v.name))
			t.Logf("API server %s for %v: the new Service in the table %v after its return, the stray slice deleted after %v",
				strings.ToLower(v.name), apiOutage, svc, slice)
			if svc > apiReturnGoal || slice > apiReturnGoal {
				t.Errorf("after the API server's return: the Service took %v, publish's delete %v; want both within %v", svc, slice, apiReturnGoal)
			}
		})
	}
}

// followAPI creates a Service in namespace shop and a stray EndpointSlice
// in the Service of publish (an endpoint of a pod that does not exist,
// which publish deletes), and returns how long meshdns took to have the
// Service in its table (then answered) and publish to delete the slice.
// It waits up to a minute and a half for each, so that a slow follower is
// measured, not only failed.
func followAPI(t *testing.T, k *kubeAPI, s *Server, tag string) (svcTook, sliceTook time.Duration) {
	t.Helper()
	n0 := s.Metric("coredns_endpointsvc_services")
	start := time.Now()
	svc := createService(t, k, "shop", "late-"+tag, corev1.ServiceTypeClusterIP, nil)
	strayName := "stray-" + tag
	if _, err := k.Client.DiscoveryV1().EndpointSlices("dns").Create(ctxT(t), straySlice(strayName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	deadline := time.Now().Add(90 * time.Second)
	for (svcTook == 0 || sliceTook == 0) && time.Now().Before(deadline) {
		if svcTook == 0 && s.Metric("coredns_endpointsvc_services") == n0+1 {
			svcTook = time.Since(start)
		}
		if sliceTook == 0 {
			_, err := k.Client.DiscoveryV1().EndpointSlices("dns").Get(ctxT(t), strayName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				sliceTook = time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if svcTook == 0 || sliceTook == 0 {
		t.Fatalf("after 90 s: Service in the table: %v, stray slice deleted: %v (0: not yet)", svcTook, sliceTook)
	}
	if r, err := TryQuery(s.DNS(), "late-"+tag+".shop.svc.cluster.local.", dns.TypeA, "udp"); err != nil {
		t.Errorf("late-%s: %v", tag, err)
	} else if got := strings.Join(Rdata(r), " "); got != svc.Spec.ClusterIP {
		t.Errorf("late-%s.shop.svc.cluster.local A: %q, want %q", tag, got, svc.Spec.ClusterIP)
	}
	t.Logf("%s: creating the Service and the slice took %v", tag, created.Round(time.Millisecond))
	return svcTook.Round(time.Millisecond), sliceTook.Round(time.Millisecond)
}

// straySlice is a slice that publish manages (its labels) for a pod that
// does not exist: publish deletes it as soon as its informers see it.
func straySlice(name string) *discoveryv1.EndpointSlice {
	ready := true
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "dns", Labels: map[string]string{
			discoveryv1.LabelServiceName: "meshdns", discoveryv1.LabelManagedBy: "endpointsvc.meshdns.io"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "gone-0", UID: "00000000-0000-0000-0000-00000000e2e0"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.77.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
}

// serviceIP is the ClusterIP of ns/name.
func serviceIP(t *testing.T, k *kubeAPI, ns, name string) string {
	t.Helper()
	svc, err := k.Client.CoreV1().Services(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}

// waitAPIReady waits until kube-apiserver's /readyz answers 200 (after a
// thaw, whose requests may take a moment to drain).
func waitAPIReady(t *testing.T, k *kubeAPI) {
	t.Helper()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	Eventually(t, 30*time.Second, func() string {
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/readyz", k.port), nil)
		req.Header.Set("Authorization", "Bearer "+kubeToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "readyz: " + resp.Status
		}
		return ""
	})
}
