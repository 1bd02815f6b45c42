package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// TestEndpointsvcKubernetes runs endpointsvc's Kubernetes source against one
// real kube-apiserver + etcd: answers follow Services, EndpointSlices and
// Nodes within a second; the Knative Route scenario (FQDN EndpointSlice →
// one CNAME chased to the ingress Service's ClusterIP by the stock
// kubernetes plugin); every manifest of deploy/kubernetes passes a
// server-side dry run; and, last, an API outage keeps the answers, also
// across a restart of meshdns (snapshot).
func TestEndpointsvcKubernetes(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	k := startKubeAPI(t)
	for _, ns := range []string{"e2e", "demo", "kourier-system", "contour-system"} {
		createNS(t, k, ns)
	}

	// Node mode, with a snapshot: nodes n1, n2; a NodePort Service web with
	// one endpoint on each.
	createNode(t, k, "n1", "192.0.2.1", corev1.ConditionTrue)
	createNode(t, k, "n2", "192.0.2.2", corev1.ConditionTrue)
	web := createService(t, k, "e2e", "web", corev1.ServiceTypeNodePort, nil)
	nodePort := web.Spec.Ports[0].NodePort
	createSlice(t, k, "e2e", "web-1", "web", discoveryv1.AddressTypeIPv4,
		endpoint("10.244.1.1", "n1", true, false), endpoint("10.244.2.1", "n2", true, false))
	srv := Start(t, `svc.cluster.local:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    endpointsvc svc.cluster.local {
        source kubernetes `+k.Kubeconfig+`
        namespaces e2e
        snapshot snapshot.json
        ttl 5
    }
}
`)
	addr := srv.DNS()

	t.Run("Follow", func(t *testing.T) {
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1", "192.0.2.2")
		within(t, time.Second, addr, "_http._tcp.web.e2e.svc.cluster.local", dns.TypeSRV,
			fmt.Sprintf("0 10 %d n1.node.svc.cluster.local.", nodePort), fmt.Sprintf("0 10 %d n2.node.svc.cluster.local.", nodePort))
		out := Dig(t, addr, "_http._tcp.web.e2e.svc.cluster.local", "SRV")
		if !strings.Contains(strings.Join(strings.Fields(out), " "), "ADDITIONAL SECTION: n1.node.svc.cluster.local. 5 IN A 192.0.2.1") {
			t.Errorf("dig SRV: no A of the target in the additional section:\n%s", out)
		}
		within(t, time.Second, addr, "n2.node.svc.cluster.local", dns.TypeA, "192.0.2.2")

		// node n2 goes Ready=False: its endpoint leaves
		setNodeReady(t, k, "n2", corev1.ConditionFalse)
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1")
		setNodeReady(t, k, "n2", corev1.ConditionTrue)
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1", "192.0.2.2")

		// the endpoint on n1 terminates (desired stopped), the one on n2 is
		// not ready (and not serving): NODATA
		updateSlice(t, k, "e2e", "web-1", endpoint("10.244.1.1", "n1", true, true), endpoint("10.244.2.1", "n2", false, false))
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "[NODATA]")
		// a second slice for the same Service
		createSlice(t, k, "e2e", "web-2", "web", discoveryv1.AddressTypeIPv4, endpoint("10.244.2.7", "n2", true, false))
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "192.0.2.2")

		// a new Service appears, another one is deleted
		createService(t, k, "e2e", "api", corev1.ServiceTypeClusterIP, nil)
		createSlice(t, k, "e2e", "api-1", "api", discoveryv1.AddressTypeIPv4, endpoint("10.244.1.9", "n1", true, false))
		within(t, time.Second, addr, "api.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1")
		if err := k.Client.CoreV1().Services("e2e").Delete(ctxT(t), "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "[NXDOMAIN]")
		// a Service outside the namespaces is not served
		createService(t, k, "demo", "other", corev1.ServiceTypeClusterIP, nil)
		within(t, time.Second, addr, "other.demo.svc.cluster.local", dns.TypeA, "[NXDOMAIN]")
		// a node is deleted: its name goes
		createNode(t, k, "n3", "192.0.2.3", corev1.ConditionTrue)
		within(t, time.Second, addr, "n3.node.svc.cluster.local", dns.TypeA, "192.0.2.3")
		if err := k.Client.CoreV1().Nodes().Delete(ctxT(t), "n3", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		within(t, time.Second, addr, "n3.node.svc.cluster.local", dns.TypeA, "[NXDOMAIN]")
	})

	t.Run("Knative", func(t *testing.T) {
		// Two ingress Services (ClusterIP, answered by the stock kubernetes
		// plugin) and a Route: a headless Service without selector plus a
		// managed FQDN EndpointSlice pointing at the ingress's name. No
		// ExternalName Service anywhere.
		kourier := createService(t, k, "kourier-system", "kourier", corev1.ServiceTypeClusterIP, nil)
		contour := createService(t, k, "contour-system", "envoy", corev1.ServiceTypeClusterIP, nil)
		createService(t, k, "demo", "hello", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Labels = map[string]string{"serving.knative.dev/route": "hello"}
		})
		createSlice(t, k, "demo", "hello-ingress", "hello", discoveryv1.AddressTypeFQDN,
			endpoint("kourier.kourier-system.svc.cluster.local", "", true, false))
		// a Route-labelled Service with IPv4 and IPv6 slices: endpoint addresses as A and AAAA
		createService(t, k, "demo", "dual", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Labels = map[string]string{"serving.knative.dev/route": "dual"}
		})
		createSlice(t, k, "demo", "dual-v4", "dual", discoveryv1.AddressTypeIPv4, endpoint("10.244.3.1", "", true, false), endpoint("10.244.3.2", "", false, false))
		createSlice(t, k, "demo", "dual-v6", "dual", discoveryv1.AddressTypeIPv6, endpoint("fd00:10:244::3", "", true, false))
		kn := Start(t, `cluster.local:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    endpointsvc svc.cluster.local {
        source kubernetes `+k.Kubeconfig+`
        addresses endpoint
        labels serving.knative.dev/route
        fallthrough
    }
    kubernetes cluster.local {
        kubeconfig `+k.Kubeconfig+`
    }
}
`)
		kaddr := kn.DNS()
		route := "hello.demo.svc.cluster.local"
		within(t, time.Second, kaddr, route, dns.TypeA, "kourier.kourier-system.svc.cluster.local.", kourier.Spec.ClusterIP)
		out := Dig(t, kaddr, route, "A")
		if strings.Count(out, "\tCNAME\t") != 1 || !strings.Contains(out, kourier.Spec.ClusterIP) || !strings.Contains(out, "status: NOERROR") {
			t.Errorf("dig %s: want one CNAME and the ingress address %s:\n%s", route, kourier.Spec.ClusterIP, out)
		}
		if got := DigShort(t, kaddr, route, "A"); len(got) != 2 {
			t.Errorf("dig +short %s: %q", route, got)
		}
		within(t, time.Second, kaddr, "dual.demo.svc.cluster.local", dns.TypeA, "10.244.3.1")
		within(t, time.Second, kaddr, "dual.demo.svc.cluster.local", dns.TypeAAAA, "fd00:10:244::3")
		if got := KdigShort(t, kaddr, "+tcp", "dual.demo.svc.cluster.local", "AAAA"); strings.Join(got, " ") != "fd00:10:244::3" {
			t.Errorf("kdig +tcp AAAA: %q", got)
		}
		// names endpointsvc does not own go on to the kubernetes plugin
		within(t, time.Second, kaddr, "kourier.kourier-system.svc.cluster.local", dns.TypeA, kourier.Spec.ClusterIP)
		// the Route moves to the other ingress: the answer follows
		updateSlice(t, k, "demo", "hello-ingress", endpoint("envoy.contour-system.svc.cluster.local", "", true, false))
		within(t, time.Second, kaddr, route, dns.TypeA, contour.Spec.ClusterIP, "envoy.contour-system.svc.cluster.local.")
		// two FQDN endpoints: still ONE CNAME (the first), conflict counted
		updateSlice(t, k, "demo", "hello-ingress", endpoint("kourier.kourier-system.svc.cluster.local", "", true, false),
			endpoint("envoy.contour-system.svc.cluster.local", "", true, false))
		within(t, time.Second, kaddr, route, dns.TypeA, contour.Spec.ClusterIP, "envoy.contour-system.svc.cluster.local.")
		Eventually(t, time.Second, func() string {
			if v := kn.Metric("coredns_endpointsvc_cname_conflicts"); v != 1 {
				return fmt.Sprintf("cname_conflicts = %v, want 1", v)
			}
			return ""
		})
		if out := Dig(t, kaddr, route, "A"); strings.Count(out, "\tCNAME\t") != 1 {
			t.Errorf("two FQDN endpoints: want one CNAME:\n%s", out)
		}
	})

	t.Run("ManifestsDryRun", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "kubernetes", "*.yaml"))
		if len(files) == 0 {
			t.Fatal("no manifests in deploy/kubernetes")
		}
		// the controller-manager that creates default ServiceAccounts does not
		// run here: the pod example needs one
		_, err := k.Client.CoreV1().ServiceAccounts("default").Create(ctxT(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		dc := memory.NewMemCacheClient(k.Client.Discovery())
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(dc)
		kinds := map[string]bool{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, doc := range strings.Split(string(b), "\n---") {
				if strings.TrimSpace(stripComments(doc)) == "" {
					continue
				}
				var obj unstructured.Unstructured
				if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
					t.Fatalf("%s document %d: %v", filepath.Base(f), i+1, err)
				}
				gvk := obj.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s %s: %v", filepath.Base(f), gvk, err)
				}
				var ri = k.Dynamic.Resource(m.Resource)
				var err2 error
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					ns := obj.GetNamespace()
					if ns == "" {
						ns = "default"
					}
					_, err2 = ri.Namespace(ns).Create(ctxT(t), &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
				} else {
					_, err2 = ri.Create(ctxT(t), &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
				}
				if err2 != nil {
					t.Errorf("%s: %s %s/%s: server-side dry run: %v", filepath.Base(f), gvk.Kind, obj.GetNamespace(), obj.GetName(), err2)
				}
				kinds[gvk.Kind] = true
			}
		}
		for _, want := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service", "Pod"} {
			if !kinds[want] {
				t.Errorf("deploy/kubernetes has no %s", want)
			}
		}
	})

	t.Run("Outage", func(t *testing.T) {
		within(t, time.Second, addr, "api.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1")
		k.StopAPI()
		// the last answers keep serving while the API server is down
		for i := 0; i < 10; i++ {
			if got := answers(t, addr, "api.e2e.svc.cluster.local", dns.TypeA); strings.Join(got, " ") != "192.0.2.1" {
				t.Fatalf("API down: got %q", got)
			}
			time.Sleep(150 * time.Millisecond)
		}
		// restart meshdns while it is down: answers from the snapshot
		srv.Restart()
		within(t, time.Second, addr, "api.e2e.svc.cluster.local", dns.TypeA, "192.0.2.1")
		within(t, time.Second, addr, "_http._tcp.api.e2e.svc.cluster.local", dns.TypeSRV, "[NODATA]")
		within(t, time.Second, addr, "web.e2e.svc.cluster.local", dns.TypeA, "[NXDOMAIN]")
		Eventually(t, 10*time.Second, func() string {
			if !strings.Contains(srv.Log(), "Source kubernetes failing, keeping the last good state") {
				return "no warning about the failing source in the log"
			}
			return ""
		})
		if n := strings.Count(srv.Log(), "Source kubernetes failing"); n != 1 {
			t.Errorf("the failure was logged %d times, want once:\n%s", n, srv.Log())
		}
		// the API server comes back: the source recovers and follows again
		k.StartAPI()
		Eventually(t, 15*time.Second, func() string {
			if !strings.Contains(srv.Log(), "Source kubernetes recovered") {
				return "no recovery in the log"
			}
			return ""
		})
		// (the informers re-list after their own back-off, which grew during
		// the outage: up to ~30 s, so this wait is longer than a second)
		updateSlice(t, k, "e2e", "api-1", endpoint("10.244.2.9", "n2", true, false))
		within(t, 40*time.Second, addr, "api.e2e.svc.cluster.local", dns.TypeA, "192.0.2.2")
	})
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func createNS(t *testing.T, k *kubeAPI, name string) {
	t.Helper()
	_, err := k.Client.CoreV1().Namespaces().Create(ctxT(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func createNode(t *testing.T, k *kubeAPI, name, ip string, ready corev1.ConditionStatus) {
	t.Helper()
	n, err := k.Client.CoreV1().Nodes().Create(ctxT(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "e2e", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := k.Client.CoreV1().Nodes().UpdateStatus(ctxT(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setNodeReady(t *testing.T, k *kubeAPI, name string, ready corev1.ConditionStatus) {
	t.Helper()
	n, err := k.Client.CoreV1().Nodes().Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = ready
			n.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if _, err := k.Client.CoreV1().Nodes().UpdateStatus(ctxT(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createService(t *testing.T, k *kubeAPI, ns, name string, typ corev1.ServiceType, mod func(*corev1.Service)) *corev1.Service {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	if mod != nil {
		mod(s)
	}
	out, err := k.Client.CoreV1().Services(ns).Create(ctxT(t), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func endpoint(addr, node string, ready, terminating bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: &terminating}}
	if node != "" {
		e.NodeName = &node
	}
	return e
}

func sliceObject(ns, name, svc string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	port, pname, proto := int32(8080), "http", corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "meshdns-e2e"}},
		AddressType: at,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}},
	}
}

func createSlice(t *testing.T, k *kubeAPI, ns, name, svc string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) {
	t.Helper()
	if _, err := k.Client.DiscoveryV1().EndpointSlices(ns).Create(ctxT(t), sliceObject(ns, name, svc, at, eps...), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// updateSlice replaces the endpoints of an existing slice.
func updateSlice(t *testing.T, k *kubeAPI, ns, name string, eps ...discoveryv1.Endpoint) {
	t.Helper()
	sl, err := k.Client.DiscoveryV1().EndpointSlices(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = eps
	if _, err := k.Client.DiscoveryV1().EndpointSlices(ns).Update(ctxT(t), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestEndpointsvcKubernetesStopWhileAPIDown: with the API server
// unreachable the informers sit in client-go's retry backoff (a wait that
// ignores their stop channel, growing to a minute); SIGTERM must still end
// meshdns promptly instead of waiting it out. corefile/cluster.Corefile
// points its kubeconfig at 127.0.0.1:1 and serves from its snapshot.
func TestEndpointsvcKubernetesStopWhileAPIDown(t *testing.T) {
	dir := t.TempDir()
	CopyDir(t, filepath.Join(repoRoot, "corefile"), dir)
	b, err := os.ReadFile(filepath.Join(dir, "cluster.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	s := Start(t, string(b), Options{Dir: dir})
	expectAnswers(t, s.DNS(), "web.shop.svc.cluster.local.", dns.TypeA, "10.96.0.20")
	time.Sleep(10 * time.Second) // the reflectors' backoff grows: 0.8 s, 1.6 s, 3.2 s, 6.4 s, … (each up to twice that)
	s.Signal(syscall.SIGTERM)
	stopped := time.Now()
	Eventually(t, 4*time.Second, func() string {
		if !s.Exited() {
			return "meshdns still running after SIGTERM"
		}
		return ""
	})
	t.Logf("exited %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
}
