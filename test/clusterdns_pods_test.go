package test

import (
	"fmt"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 24 on the real kube-apiserver: `pods verified`, `autopath
// @endpointsvc` and the kubernetes plugin's options, each answered as the
// stock plugin with the same options answers them. Both are processes of
// the meshdns binary on one API server holding a generated cluster with
// Pods (hostNetwork Pods sharing their node's addresses across
// namespaces, Pending, Succeeded and Failed ones, one terminating) and
// client Pods whose addresses are loopback ones (127.77.0.0/24), so that
// a question sent from such an address is a question of that Pod: the
// autopath plugin in front of each server finds the client's namespace
// through its provider. The phases: live, then after 30 random steps
// (Pods among them), patched; with autopath also restart: meshdns
// restarted from its snapshot while the API server is frozen.

// podsCases are the option sets, each a run of its own: the first with
// autopath (its provider needs pods verified).
var podsCases = []struct {
	name, opts string
	autopath   bool
	labelOff   bool // objects are labelled dns=off now and then; opts select dns notin (off)
}{
	{name: "VerifiedAutopath", opts: "pods verified\nendpoint_pod_names\nignore empty_service\nlabels dns notin (off)", autopath: true, labelOff: true},
	{name: "NoendpointsNamespacesLabels", opts: "pods verified\nnoendpoints\nnamespaces default shop svc pod team-a\nlabels dns notin (off)\nstartup_timeout 3s", labelOff: true},
}

func TestClusterDNSPodsVerified(t *testing.T) {
	for _, tc := range podsCases {
		t.Run(tc.name, func(t *testing.T) { podsRun(t, tc.opts, tc.autopath, tc.labelOff) })
	}
}

// podsRun runs one option set on a fresh API server.
func podsRun(t *testing.T, opts string, autopath, labelOff bool) {
	k := startKubeAPI(t)
	cfg := clustergen.Small()
	cfg.Pods = 40
	c := clustergen.Generate(11, cfg)
	if labelOff {
		podsLabelOff(c)
	}
	genCreate(t, k, c)
	for _, p := range c.Pods {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: p.DeepCopy()})
	}
	clients := podsClients(t, k)
	oursFile, stockFile := podsCorefiles(t, k, opts, autopath)
	upstream := Options{Ports: map[int]int{5301: genUpstream(t)}}
	ours, stock := genStart(t, oursFile, upstream), genStart(t, stockFile, upstream)
	podsMark(t, k, 0, ours, stock)

	r := rand.New(rand.NewSource(11))
	qs := clustergen.Questions(c, cfg, r)
	genPhase{11, "live", c, qs, false, false}.compare(t, ours.DNS(), stock.DNS(), nil)
	if autopath {
		podsCompareAutopath(t, c, clients, ours.DNS(), stock.DNS())
	}
	for range 30 {
		ch := c.Step(r)
		if labelOff {
			podsLabelOff(c)
		}
		genMust(t, k, podsWithLabels(c, ch))
	}
	podsMark(t, k, 1, ours, stock)
	qs = genMergeQuestions(clustergen.Questions(c, cfg, r), qs)
	_, stockAnswers := genPhase{11, "patched", c, qs, true, false}.compare(t, ours.DNS(), stock.DNS(), nil)
	if !autopath {
		return
	}
	podsCompareAutopath(t, c, clients, ours.DNS(), stock.DNS())
	// the API server frozen, meshdns restarted: pod names and autopath from
	// its snapshot, as the stock plugin (still running) answers from its
	// caches
	k.Freeze()
	defer k.Thaw()
	ours.Stop()
	t.Logf("restarted during the outage, ready after %v", genRestart(t, ours))
	genPhase{11, "restart", c, qs, true, false}.compare(t, ours.DNS(), "", stockAnswers) // the stock answers of the patched phase: its cache holds them
	podsCompareAutopath(t, c, clients, ours.DNS(), stock.DNS())
}

// podsMark is genMark for every option set (noendpoints and namespaces
// leave genMark's marker out): an ExternalName Service mark-<n> in
// default, which each server must answer. The Service watch delivers the
// changes made before the marker; the Pod watch is another, so the
// Pods' last changes get a short wait more.
func podsMark(t *testing.T, k *kubeAPI, n int, servers ...*Server) {
	t.Helper()
	name := fmt.Sprintf("mark-%d", n)
	genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "ext.example.test"}}})
	for _, s := range servers {
		Eventually(t, 20*time.Second, func() string {
			genPoll++
			m := new(dns.Msg)
			m.SetQuestion(name+".default.svc.cluster.local.", 65280+uint16(genPoll%250))
			m.CheckingDisabled = genPoll/250%2 == 1
			r, err := dns.Exchange(m, s.DNS())
			if err != nil {
				return err.Error()
			}
			if r.Rcode != dns.RcodeSuccess {
				return "marker " + name + ": " + dns.RcodeToString[r.Rcode]
			}
			return ""
		})
	}
	time.Sleep(300 * time.Millisecond) // the Pod watch's last events (another watch than the marker's)
}

// podsCorefiles are the shipped Corefile with opts instead of `pods
// insecure` (and autopath @endpointsvc), and the stock plugin's block
// with the same options (and autopath @kubernetes).
func podsCorefiles(t *testing.T, k *kubeAPI, opts string, autopath bool) (ours, stock string) {
	t.Helper()
	shipped := genQuickStop(t, shippedClusterCorefile(t, k.Kubeconfig))
	ours = strings.Replace(shipped, "pods insecure\n", strings.ReplaceAll(opts, "\n", "\n            ")+"\n", 1)
	stock = stockCorefile(t, shipped, k.Kubeconfig)
	stock = strings.Replace(stock, "pods insecure\n", strings.ReplaceAll(opts, "\n", "\n        ")+"\n", 1)
	if autopath {
		ours = strings.Replace(ours, "loadbalance\n", "loadbalance\n        autopath @endpointsvc\n", 1)
		stock = strings.Replace(stock, "loadbalance\n", "loadbalance\n        autopath @kubernetes\n", 1)
	}
	if ours == shipped || !strings.Contains(stock, strings.Split(opts, "\n")[0]) {
		t.Fatalf("the options did not go in:\n%s\n%s", ours, stock)
	}
	return ours, stock
}

// podsLabelOff labels every seventh Service, slice and Pod dns=off (the
// labels option's selector leaves them out).
func podsLabelOff(c *clustergen.Cluster) {
	for i, s := range c.Services {
		if i%7 == 3 && s.Labels["dns"] == "" {
			s.Labels = map[string]string{"dns": "off"}
		}
	}
	for i, sl := range c.Slices {
		if i%7 == 4 && sl.Labels["dns"] == "" {
			sl.Labels["dns"] = "off"
		}
	}
	for i, p := range c.Pods {
		if i%7 == 5 && p.Labels["dns"] == "" {
			p.Labels = map[string]string{"dns": "off"}
		}
	}
}

// podsWithLabels is ch with the labels its object has in c now.
func podsWithLabels(c *clustergen.Cluster, ch clustergen.Change) clustergen.Change {
	if o, ok := ch.Obj.(metav1.Object); ok && ch.Op != clustergen.Delete {
		for _, cur := range podsObjects(c) {
			if cur.GetNamespace() == o.GetNamespace() && cur.GetName() == o.GetName() && fmt.Sprintf("%T", cur) == fmt.Sprintf("%T", o) {
				o.SetLabels(cur.GetLabels())
			}
		}
	}
	return ch
}

func podsObjects(c *clustergen.Cluster) []metav1.Object {
	var out []metav1.Object
	for _, s := range c.Services {
		out = append(out, s)
	}
	for _, sl := range c.Slices {
		out = append(out, sl)
	}
	for _, p := range c.Pods {
		out = append(out, p)
	}
	return out
}

// podsClient is a client Pod: its loopback address and namespace.
type podsClient struct {
	addr, namespace string
	shared          []string // the namespaces of an address several Pods have
}

// podsClients creates the client Pods: one of its own in each of four
// namespaces, one address of two Pods in two namespaces (as hostNetwork
// Pods on one node), one Pod terminating before the servers start (the
// stock plugin leaves out a Pod first seen so), and an address of no Pod.
func podsClients(t *testing.T, k *kubeAPI) []podsClient {
	t.Helper()
	nss := []string{"default", "shop", "svc", "team-a"}
	var out []podsClient
	pod := func(ns, name, ip string, hostNetwork bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   corev1.PodSpec{NodeName: "node-0", HostNetwork: hostNetwork, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: p})
	}
	for i, ns := range nss {
		ip := fmt.Sprintf("127.77.0.%d", i+1)
		pod(ns, "client", ip, false)
		out = append(out, podsClient{addr: ip, namespace: ns})
	}
	pod("shop", "node-agent", "127.77.0.20", true)
	pod("default", "node-agent", "127.77.0.20", true)
	out = append(out, podsClient{addr: "127.77.0.20", shared: []string{"default", "shop"}})
	pod("team-a", "leaving", "127.77.0.30", false)
	if err := k.Client.CoreV1().Pods("team-a").Delete(ctxT(t), "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // bound to a node without kubelet: it stays, terminating
	}
	out = append(out, podsClient{addr: "127.77.0.30"}, podsClient{addr: "127.77.0.99"})
	return out
}

// podsCompareAutopath asks both servers, from every client address, the
// names a client in a namespace sends first with the kubelet's search
// list: a Service of its namespace, one of another (found by the second
// search name), an outside name (found by the last: the name as asked),
// and a name that exists nowhere. An address of Pods in several
// namespaces is answered by the stock plugin as from any one of them
// (its index's order) and by meshdns as from the first: its reply must be
// the stock plugin's from that namespace's own client.
func podsCompareAutopath(t *testing.T, c *clustergen.Cluster, clients []podsClient, ours, stock string) {
	t.Helper()
	own := map[string]string{} // namespace → its own client's address
	for _, cl := range clients {
		if cl.namespace != "" {
			own[cl.namespace] = cl.addr
		}
	}
	asked, cnames := 0, 0
	for _, cl := range clients {
		for _, ns := range []string{"default", "shop", "svc", "team-a"} {
			for _, q := range podsAutopathQuestions(c, ns) {
				got := podsAskFrom(t, ours, cl.addr, q)
				want := podsAskFrom(t, stock, cl.addr, q)
				asked++
				if strings.Contains(got.text, "CNAME") {
					cnames++
				}
				if cl.shared != nil {
					want = podsAskFrom(t, stock, own[cl.shared[0]], q)
					if other := podsAskFrom(t, stock, cl.addr, q); other.text != want.text && other.text != podsAskFrom(t, stock, own[cl.shared[1]], q).text {
						t.Errorf("stock, from %s (Pods in %v): %s: %s, from neither namespace's client", cl.addr, cl.shared, q, other.text)
					}
				}
				if got.text != want.text {
					t.Errorf("from %s: %s:\n  meshdns: %s\n  stock:   %s", cl.addr, q, got.text, want.text)
				}
			}
		}
	}
	if cnames == 0 {
		t.Errorf("no autopath answer (a CNAME from the first search name) among %d questions", asked)
	}
	t.Logf("autopath: %d questions from %d client addresses, %d answered through a search name", asked, len(clients), cnames)
}

// podsAutopathQuestions are the first names a client of namespace ns
// sends (the first search name appended) for a Service of ns, one of
// another namespace, an outside name and a name of nothing.
func podsAutopathQuestions(c *clustergen.Cluster, ns string) []clustergen.Question {
	var qs []clustergen.Question
	add := func(base string) {
		qs = append(qs, clustergen.Question{Name: base + "." + ns + ".svc.cluster.local.", Type: dns.TypeA},
			clustergen.Question{Name: base + "." + ns + ".svc.cluster.local.", Type: dns.TypeAAAA})
	}
	for _, s := range c.Services {
		if s.Namespace == ns {
			add(s.Name)
			break
		}
	}
	for _, s := range c.Services {
		if s.Namespace != ns {
			add(s.Name + "." + s.Namespace)
			break
		}
	}
	add("ext.example.test")
	add("nothing-here")
	return qs
}

// podsAskFrom asks addr one question from source address src (UDP).
func podsAskFrom(t *testing.T, addr, src string, q clustergen.Question) genReply {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	m.SetEdns0(4096, false)
	c := dns.Client{Timeout: 3 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return genReply{text: "error: " + err.Error()}
	}
	return genReply{genAnswer(r), r}
}
