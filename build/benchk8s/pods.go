package main

// Pods for `pods verified` (-pods N with -mix spec), and -mix glibc: the
// queries a glibc client with ndots:5 and the kubelet's search list sends
// for one outside name, with and without autopath.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var (
	podsN   = flag.Int("pods", 0, "-mix spec: Pods too (both plugins then run with pods verified), e.g. 50000")
	lookups = flag.Int("lookups", 20, "-mix glibc: lookups of the outside name per variant")
)

// populatePods creates n Running Pods spread over the namespaces and
// nodes, shaped like a Deployment's (labels, owner reference, one
// container with resources, env, probes and a volume, status with
// conditions and a container status), each with a pod address of the
// mix's endpoints (n beyond them: new ones); every twentieth is a
// hostNetwork Pod with its node's address. A namespace's default
// ServiceAccount comes first (no controller manager runs).
func populatePods(c kubernetes.Interface, n int) {
	ctx := context.Background()
	err := pool(16, func(work chan<- func() error) {
		for i := 0; i < *namespacesN; i++ {
			work <- func() error {
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i), Name: "default"}}
				_, err := c.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{})
				return err
			}
		}
	})
	if err != nil {
		fail("creating ServiceAccounts: %v", err)
	}
	err = pool(32, func(work chan<- func() error) {
		for i := 0; i < n; i++ {
			work <- func() error { return createPod(ctx, c, i) }
		}
	})
	if err != nil {
		fail("creating Pods: %v", err)
	}
}

// createPod creates Pod i and writes its status.
func createPod(ctx context.Context, c kubernetes.Interface, i int) error {
	ns, node := fmt.Sprintf("ns-%d", i%*namespacesN), i%*nodes
	app := fmt.Sprintf("app-%d", i/10)
	ip := fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256) // the endpoints' addresses (spec.go)
	host := i%20 == 0
	if host {
		ip = fmt.Sprintf("10.250.%d.%d", node/256, node%256)
	}
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-7d9f8b6c5-%05x", app, i),
			Labels: map[string]string{"app": app, "app.kubernetes.io/name": app, "pod-template-hash": "7d9f8b6c5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8b6c5",
				UID: "00000000-0000-0000-0000-000000000001", Controller: &ctrl, BlockOwnerDeletion: &ctrl}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", node), HostNetwork: host, Containers: []corev1.Container{{
			Name: "app", Image: "registry.example.com/team/" + app + ":v1.2.3",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}},
		}}, Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}}}},
	}
	created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.NewTime(time.Unix(1735689600, 0))
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: fmt.Sprintf("10.250.%d.%d", node/256, node%256), StartTime: &now, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: p.Spec.Containers[0].Image,
			ImageID: "registry.example.com/team/" + app + "@sha256:" + strings.Repeat("ab", 32), ContainerID: "containerd://" + strings.Repeat("cd", 32),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// runGlibc is -mix glibc: a few Services, a Pod whose address is
// 127.0.0.1 (the client's, seen by the server) in ns-0, an upstream stand-in
// answering every outside name, and meshdns on 127.88.0.1:53 (glibc asks
// port 53 only) with endpointsvc or the stock plugin, each with and
// without autopath. The client is getent ahosts in a mount namespace whose
// /etc/resolv.conf is the kubelet's for a Pod of ns-0 (ndots:5, three
// search names): its queries are counted by the server's request counter.
func runGlibc(dir string, api *apiServer) {
	*services, *nodes, *namespacesN = min(*services, 50), min(*nodes, 3), min(*namespacesN, 5) // the count is the figure, not the size
	populateSpec(api.client)
	if err := createClientPod(api.client); err != nil {
		fail("the client Pod: %v", err)
	}
	up := glibcUpstream()
	resolv := filepath.Join(dir, "resolv.conf")
	_ = os.WriteFile(resolv, []byte("nameserver 127.88.0.1\nsearch ns-0.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644)
	fmt.Printf("client: getent ahosts api.example.com (A and AAAA), resolv.conf of a Pod of ns-0 (ndots:5, 3 search names), %d lookups per variant\n", *lookups)
	fmt.Printf("\n| server | autopath | queries per lookup | answered |\n|---|---|---:|---|\n")
	for _, v := range []struct{ name, block string }{
		{"endpointsvc", "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source kubernetes " + api.kubeconfig + "\n        schema kubernetes\n        pods verified\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n"},
		{"kubernetes", "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        kubeconfig " + api.kubeconfig + "\n        pods verified\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n"},
	} {
		for _, ap := range []bool{false, true} {
			block := v.block
			if ap {
				block = "    autopath @" + v.name + "\n" + block
			}
			per, ans := glibcRun(dir, block+"    forward . 127.0.0.1:"+strconv.Itoa(up)+"\n", resolv)
			fmt.Printf("| %s | %v | %.1f | %s |\n", v.name, ap, per, ans)
		}
	}
}

// createClientPod makes the Pod of ns-0 whose address is 127.0.0.1.
func createClientPod(c kubernetes.Interface) error {
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: "default"}}
	_, _ = c.CoreV1().ServiceAccounts("ns-0").Create(ctx, sa, metav1.CreateOptions{})
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: "client"},
		Spec: corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/client"}}}}
	created, err := c.CoreV1().Pods("ns-0").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
	_, err = c.CoreV1().Pods("ns-0").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// glibcUpstream answers every name outside the cluster: A 192.0.2.80,
// AAAA 2001:db8::80.
func glibcUpstream() int {
	port := freePort()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch q.Qtype {
		case dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: []byte{192, 0, 2, 80}}}
		case dns.TypeAAAA:
			m.Answer = []dns.RR{&dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60},
				AAAA: []byte{0x20, 0x01, 0x0d, 0xb8, 15: 0x80}}}
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Net: "udp", Handler: h}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ListenAndServe() }()
	<-started
	return port
}

// glibcRun starts meshdns with block on 127.88.0.1:53, runs the lookups
// and returns the queries the server received per lookup and the last
// lookup's output.
func glibcRun(dir, block, resolv string) (float64, string) {
	ready, prom := freePort(), freePort()
	corefile := fmt.Sprintf(".:53 {\n    bind 127.88.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n%s}\n", ready, prom, block)
	cf := filepath.Join(dir, "Corefile.glibc")
	_ = os.WriteFile(cf, []byte(corefile), 0o644)
	p := start(dir, *meshdns, "-conf", cf)
	defer p.stop()
	waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", ready), p, 60*time.Second)
	time.Sleep(500 * time.Millisecond) // the Pod watch
	before := requestsTotal(prom)
	out := ""
	for range *lookups {
		cmd := exec.Command("unshare", "-m", "sh", "-c", "mount --bind "+resolv+" /etc/resolv.conf && exec getent ahosts api.example.com")
		b, err := cmd.CombinedOutput()
		if err != nil {
			fail("getent: %v\n%s\n%s", err, b, tail(p.log.String()))
		}
		out = strings.Join(strings.Fields(strings.SplitN(string(b), "\n", 2)[0]), " ")
	}
	return (requestsTotal(prom) - before) / float64(*lookups), out
}

// requestsTotal is the server's coredns_dns_requests_total, summed.
func requestsTotal(prom int) float64 {
	b, err := exec.Command("curl", "-s", fmt.Sprintf("http://127.0.0.1:%d/metrics", prom)).Output()
	if err != nil {
		fail("metrics: %v", err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "coredns_dns_requests_total{") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}
