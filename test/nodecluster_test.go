package test

// meshdns as the cluster DNS of a real node (issue 25, item 2): the shipped
// manifests, applied unchanged but for the image, serve the kubelet's
// clusterDNS 10.96.0.10; pods with the default dnsPolicy (ClusterFirst)
// resolve the names of the Kubernetes e2e DNS tests with glibc, Go's
// resolver and a search-list client, through the resolv.conf the kubelet
// wrote and the Service kube-proxy balances. meshdns reads the API in
// cluster, with its ServiceAccount token, through the kubernetes Service,
// under RBAC: only the shipped ClusterRole lets it.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// dnsTestNS is the namespace of TestNodeClusterDNS's objects.
const dnsTestNS = "dnstest"

// dnsTestObjects creates the objects the questions name: a pod with a
// hostname and subdomain under a headless Service, a ClusterIP Service with
// a port named http, an ExternalName Service, and the client pod. It
// returns the pods by name.
func dnsTestObjects(t *testing.T, c *nodeCluster, ns string) map[string]*corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.ensureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	web := map[string]string{"app": "web"}
	http := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}}
	svcs := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: web, Ports: http}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-svc"}, Spec: corev1.ServiceSpec{Selector: web, Ports: http}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: extName}},
	}
	for _, s := range svcs {
		if _, err := c.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Service %s: %v", s.Name, err)
		}
	}
	webPod := clientPod("web-0", web)
	webPod.Spec.Hostname, webPod.Spec.Subdomain = "web-0", "web"
	webPod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}
	pods, err := c.runPods(ctx, ns, webPod, clientPod("client", nil))
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestNodeClusterDNS(t *testing.T) {
	c := sharedNodeCluster(t)
	pods := dnsTestObjects(t, c, dnsTestNS)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	svc, err := c.Client.CoreV1().Services(dnsTestNS).Get(ctx, "web-svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webIP, clientIP, clusterIP := pods["web-0"].Status.PodIP, pods["client"].Status.PodIP, svc.Spec.ClusterIP
	t.Logf("web-0 %s, client %s, web-svc %s", webIP, clientIP, clusterIP)

	t.Run("resolv.conf by the kubelet", func(t *testing.T) {
		out, err := c.exec(ctx, dnsTestNS, "client", "/bin/cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"nameserver " + clusterDNSIP, "search " + dnsTestNS + ".svc.cluster.local svc.cluster.local cluster.local", "options ndots:5"} {
			if !hasLine(out, want) {
				t.Errorf("the client pod's resolv.conf has no line %q:\n%s", want, out)
			}
		}
		if strings.Count(out, "nameserver") != 1 {
			t.Errorf("want only the cluster DNS as nameserver:\n%s", out)
		}
	})

	t.Run("meshdns reads the API in cluster under RBAC", func(t *testing.T) {
		checkMeshdnsInCluster(ctx, t, c)
	})

	qs, wants := nodeDNSQuestions(dnsTestNS, webIP, clientIP, clusterIP)
	for _, pod := range []string{"client", "web-0"} {
		t.Run("names from "+pod, func(t *testing.T) {
			res := c.resolveIn(t, dnsTestNS, pod, qs...)
			for i, r := range res {
				want := append([]string(nil), wants[i]...)
				sort.Strings(want)
				got := strings.Join(r.Answers, " ")
				if r.Error != "" || got != strings.Join(want, " ") {
					t.Errorf("%s %s %s: got %q (error %q), want %q", r.Resolver, r.Type, r.Name, r.Answers, r.Error, want)
					continue
				}
				t.Logf("%-6s %-5s %s -> %s (%.1f ms%s)", r.Resolver, r.Type, r.Name, got, r.Millis, fqdnNote(r.FQDN))
			}
		})
	}

	t.Run("shipped dnsConfig example pod", func(t *testing.T) {
		checkDNSConfigPod(ctx, t, c, clusterIP)
	})
}

// nodeDNSQuestions returns the questions of TestNodeClusterDNS
// ("RESOLVER:TYPE:NAME") and each one's expected answers: the names of the
// Kubernetes e2e DNS tests, each asked with every resolver that can.
func nodeDNSQuestions(ns, webIP, clientIP, clusterIP string) (qs []string, wants [][]string) {
	podName := strings.ReplaceAll(clientIP, ".", "-") + "." + ns + ".pod.cluster.local"
	svcFQDN := "web-svc." + ns + ".svc.cluster.local."
	all := []string{"glibc", "go", "search"}
	cases := []struct {
		qtype, name string
		resolvers   []string
		want        map[string][]string // resolver ("" = all) → answers
	}{
		{"A", "kubernetes.default", all, map[string][]string{"": {apiServiceIP}}},
		{"A", "web-svc." + ns + ".svc", all, map[string][]string{"": {clusterIP}}},
		{"SRV", "_http._tcp.web-svc." + ns + ".svc", []string{"go", "search"}, map[string][]string{"": {"0 100 80 " + svcFQDN}}},
		{"A", "web-0.web." + ns + ".svc.cluster.local", all, map[string][]string{"": {webIP}}},
		{"A", podName, all, map[string][]string{"": {clientIP}}},
		{"A", "ext." + ns + ".svc", []string{"glibc", "go"}, map[string][]string{"": {extAddress}}},
		{"CNAME", "ext." + ns + ".svc", []string{"go", "search"}, map[string][]string{"": {extName + "."}}},
		{"PTR", clusterIP, all, map[string][]string{"": {svcFQDN}, "glibc": {strings.TrimSuffix(svcFQDN, ".")}}},
		{"A", extName, all, map[string][]string{"": {extAddress}}},
	}
	for _, tc := range cases {
		for _, r := range tc.resolvers {
			qs = append(qs, r+":"+tc.qtype+":"+tc.name)
			w, ok := tc.want[r]
			if !ok {
				w = tc.want[""]
			}
			wants = append(wants, w)
		}
	}
	return qs, wants
}

// checkDNSConfigPod resolves from deploy/kubernetes/pod-dnsconfig.yaml's
// pod (dnsPolicy None, its own dnsConfig pointing at the cluster DNS).
func checkDNSConfigPod(ctx context.Context, t *testing.T, c *nodeCluster, clusterIP string) {
	t.Helper()
	if err := waitFor(2*time.Minute, nil, "running pod default/dnsconfig-example", func() error {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "dnsconfig-example", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.resolveIn(t, "default", "dnsconfig-example", "go:A:kubernetes", "glibc:A:web-svc."+dnsTestNS+".svc") {
		want := map[string]string{"go": apiServiceIP, "glibc": clusterIP}[r.Resolver]
		if r.Error != "" || strings.Join(r.Answers, " ") != want {
			t.Errorf("%s %s from the dnsConfig pod: got %q (error %q), want %s", r.Resolver, r.Name, r.Answers, r.Error, want)
		}
	}
}

// checkMeshdnsInCluster shows that meshdns runs in cluster: its pods are
// not on the host network, client-go's in-cluster address is the
// kubernetes Service, whose endpoint is the API server on the node address,
// and RBAC (not AlwaysAllow) decides what its ServiceAccount may do.
func checkMeshdnsInCluster(ctx context.Context, t *testing.T, c *nodeCluster) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("meshdns pods: %v (%d)", err, len(pods.Items))
	}
	p := pods.Items[0]
	if p.Spec.HostNetwork || p.Spec.ServiceAccountName != "meshdns" {
		t.Errorf("meshdns pod: hostNetwork %v, serviceAccount %q", p.Spec.HostNetwork, p.Spec.ServiceAccountName)
	}
	pids := meshdnsPIDs()
	if len(pids) != len(pods.Items) {
		t.Errorf("%d meshdns processes in the node's cgroups for %d pods", len(pids), len(pods.Items))
	}
	for _, pid := range pids {
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if !strings.Contains(string(env), "KUBERNETES_SERVICE_HOST="+apiServiceIP+"\x00") {
			t.Errorf("meshdns (pid %d) has no KUBERNETES_SERVICE_HOST=%s", pid, apiServiceIP)
		}
		if !connectedTo(pid, apiServiceIP, 443) {
			t.Errorf("meshdns (pid %d) has no TCP connection to the kubernetes Service %s:443", pid, apiServiceIP)
		}
	}
	ep, err := c.kubectl(ctx, "get", "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes",
		"-o", "jsonpath={.items[*].endpoints[*].addresses[*]}:{.items[*].ports[*].port}")
	if err != nil || strings.TrimSpace(ep) != nodeIP+":6443" {
		t.Errorf("the kubernetes Service's endpoints = %q (%v), want %s:6443", ep, err, nodeIP)
	}
	sa := "system:serviceaccount:kube-system:meshdns"
	for _, tc := range []struct {
		verb, resource, want string
	}{
		{"list", "services", "yes"}, {"watch", "endpointslices.discovery.k8s.io", "yes"},
		{"list", "secrets", "no"}, {"create", "services", "no"},
	} {
		out, _ := c.kubectl(ctx, "auth", "can-i", tc.verb, tc.resource, "--as", sa)
		if got := strings.TrimSpace(out); got != tc.want {
			t.Errorf("can %s %s %s: %q, want %q", sa, tc.verb, tc.resource, got, tc.want)
		}
	}
}

func hasLine(text, want string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

func fqdnNote(fqdn string) string {
	if fqdn == "" {
		return ""
	}
	return ", as " + fqdn
}
