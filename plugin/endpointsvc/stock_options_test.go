package endpointsvc

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/kubernetes/object"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/endpointsvc/replica"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The kubernetes plugin's options that schema kubernetes reads, each
// compared with the stock plugin under the same option on generated
// clusters with Pods (hostNetwork Pods sharing their node's addresses
// across namespaces, Pending, Succeeded, Failed and terminating Pods):
// every generated question, and the autopath search path of every client
// address. Our side runs the kubernetes source over a fake clientset (its
// informers, transforms and patches); the stock side gets the same
// objects in its slim form through the fake API connection.

// optionCases are the option lines, each compared on its own and the
// Pod-reading ones with pods verified.
var optionCases = []string{
	"pods verified",
	"pods verified\n endpoint_pod_names",
	"pods insecure\n endpoint_pod_names",
	"pods verified\n ignore empty_service",
	"pods verified\n noendpoints",
	"pods verified\n namespaces shop svc dns-version",
	"pods verified\n startup_timeout 2s",
	"pods disabled",
	"pods verified\n namespace_labels " + clustergen.TeamLabel + "=a",
	"pods insecure\n namespace_labels " + clustergen.TeamLabel + " in (b), clustergen",
	"pods insecure\n apiserver_qps 50\n apiserver_burst 100\n apiserver_max_inflight 2",
}

// namespaceSelector is the namespace_labels selector of an option case
// (nil: none).
func namespaceSelector(t testing.TB, opts string) labels.Selector {
	t.Helper()
	_, sel, ok := strings.Cut(opts, "namespace_labels ")
	if !ok {
		return nil
	}
	sel, _, _ = strings.Cut(sel, "\n")
	s, err := labels.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// podCluster is a generated cluster with Pods, some terminating.
func podCluster(seed int64) (*clustergen.Cluster, clustergen.Config) {
	cfg := clustergen.Small()
	cfg.Pods, cfg.Terminating = 40, true
	return clustergen.Generate(seed, cfg), cfg
}

// stockWith is the stock plugin with the options over the cluster's
// objects, its Pods as its Pod informer has them: no Succeeded, Failed or
// Unknown Pod (its field selector), no Pod first seen terminating.
func stockWith(t testing.TB, cl *clustergen.Cluster, opts string) *kubernetes.Kubernetes {
	t.Helper()
	return stockBlock(t, cl, opts+optionsTail)
}

// stockBlock is the stock plugin with the block's body as written.
func stockBlock(t testing.TB, cl *clustergen.Cluster, opts string) *kubernetes.Kubernetes {
	t.Helper()
	c := caddy.NewTestController("dns", "kubernetes cluster.local in-addr.arpa ip6.arpa {\n "+opts+"\n}")
	c.Next()
	k, err := kubernetes.ParseStanza(c)
	if err != nil {
		t.Fatal(err)
	}
	// InitKubeCache sets what the options imply (pods verified: the Pod
	// cache autopath reads) and makes a controller, which no one runs: the
	// fake API connection replaces it
	k.ClientConfig = clientcmd.NewDefaultClientConfig(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"x": {Server: "https://127.0.0.1:1"}},
		Contexts:       map[string]*clientcmdapi.Context{"x": {Cluster: "x"}},
		CurrentContext: "x",
	}, nil)
	if _, _, err := k.InitKubeCache(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := newStockAPI(cl)
	if sel := namespaceSelector(t, opts); sel != nil { // its Namespace informer's label selector
		for _, n := range cl.Namespaces {
			if !sel.Matches(labels.Set(n.Labels)) {
				delete(a.nss, n.Name)
			}
		}
	}
	if strings.Contains(opts, "noendpoints") {
		a.eps = nil // no endpoint informer
	}
	for _, p := range cl.Pods {
		if !podListed(p) {
			continue
		}
		if o, err := object.ToPod(p.DeepCopy()); err == nil {
			a.pods = append(a.pods, o.(*object.Pod))
		}
	}
	k.APIConn = a
	k.Upstream = outside{}
	k.Next = test.NextHandler(dns.RcodeRefused, nil)
	return k
}

// podListed reports whether the API server lists p for the stock plugin's
// (and the source's) field selector.
func podListed(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return false
	}
	return true
}

// oursWith is schema kubernetes with the options over a fake clientset of
// the cluster.
func oursWith(t *testing.T, f *fakeCluster, opts string) *Endpointsvc {
	t.Helper()
	return oursBlock(t, f, opts+optionsTail)
}

// oursBlock is schema kubernetes with the block's body as written.
func oursBlock(t *testing.T, f *fakeCluster, opts string) *Endpointsvc {
	t.Helper()
	return kubePluginWith(t, f.client, "", "endpointsvc cluster.local in-addr.arpa ip6.arpa {\n source kubernetes\n schema kubernetes\n "+opts+"\n}")
}

// TestOptionsAgainstStock: for each option case and seed, every question
// and every client's search path as the stock plugin's; then after 30
// random steps (Pods among them), patched, again.
func TestOptionsAgainstStock(t *testing.T) {
	for _, opts := range optionCases {
		for _, seed := range genSeeds(t, 2) {
			t.Run(fmt.Sprintf("%s/%d", strings.ReplaceAll(opts, "\n ", ","), seed), func(t *testing.T) {
				blockAgainstStock(t, seed, opts+optionsTail, namespaceSelector(t, opts))
			})
		}
	}
}

// optionsTail ends every option case's block, as kubeadm's does.
const optionsTail = "\n fallthrough in-addr.arpa ip6.arpa\n ttl 30"

// blockAgainstStock builds the seed's cluster with Pods under the block's
// body as written (selector: the namespaces the fake clientset lists, nil
// all) and compares every question and every client's search path with
// the stock plugin's; then after 30 random steps (Pods among them),
// patched, again.
func blockAgainstStock(t *testing.T, seed int64, body string, selector labels.Selector) {
	t.Helper()
	c, cfg := podCluster(seed)
	f := newFakeClusterSelecting(t, c, selector)
	ours := oursBlock(t, f, body)
	r := rand.New(rand.NewSource(seed))
	compareBlock(t, c, cfg, r, ours, body)
	for range 30 {
		f.apply(t, c.Step(r))
	}
	kubefix.Eventually(t, func() string {
		return diffBlock(c, clustergen.Questions(c, cfg, rand.New(rand.NewSource(seed))), ours, body)
	})
	compareBlock(t, c, cfg, r, ours, body)
}

// compareBlock compares the answers and the search paths under the block.
func compareBlock(t *testing.T, c *clustergen.Cluster, cfg clustergen.Config, r *rand.Rand, ours *Endpointsvc, body string) {
	t.Helper()
	n, d := compareWithStockPlugin(t, c, clustergen.Questions(c, cfg, r), stockBlock(t, c, body), ours, 10)
	paths := compareAutoPath(t, c, stockBlock(t, c, body), ours)
	t.Logf("%d questions compared (%d deliberate differences), %d search paths", n, d, paths)
}

// diffOptions is the first question ours answers unlike the stock plugin
// ("" none), for waiting until the patches arrived.
func diffOptions(c *clustergen.Cluster, qs []clustergen.Question, ours *Endpointsvc, opts string) string {
	return diffBlock(c, qs, ours, opts+optionsTail)
}

// diffBlock is diffOptions under the block's body as written.
func diffBlock(c *clustergen.Cluster, qs []clustergen.Question, ours *Endpointsvc, body string) string {
	stock := stockBlock(&testing.T{}, c, body)
	conflicts := c.CNAMEConflicts()
	for _, q := range qs {
		want, reply := serve(stock, q)
		got, ourReply := serve(ours, q)
		if got != want && !conflicts.Deliberate(q, reply, ourReply) {
			return fmt.Sprintf("%s:\n  stock: %s\n  ours:  %s", q, want, got)
		}
	}
	return ""
}

// compareAutoPath asks both plugins for the search path of every client
// address, for a name in the zone and one outside it. An address of Pods
// in several namespaces gives the stock plugin's any one of them (its
// index's order); ours must give the first, and the stock plugin one of
// them.
func compareAutoPath(t *testing.T, c *clustergen.Cluster, stock *kubernetes.Kubernetes, ours *Endpointsvc) int {
	t.Helper()
	n := 0
	for _, addr := range c.ClientAddrs() {
		for _, qname := range []string{"web.shop.svc.cluster.local.", "api.example.com.shop.svc.cluster.local.", "example.com.", "5.1.244.10.in-addr.arpa."} {
			m := new(dns.Msg)
			m.SetQuestion(qname, dns.TypeA)
			state := request.Request{W: &test.ResponseWriter{RemoteIP: addr}, Req: m}
			want, got := stock.AutoPath(state), ours.AutoPath(state)
			n++
			if nss := podNamespaces(c, addr); len(nss) > 1 && len(want) > 0 && len(got) > 0 {
				if !slices.Contains(nss, strings.Split(want[0], ".")[0]) || !strings.HasPrefix(got[0], nss[0]+".") || !slices.Equal(got[1:], want[1:]) {
					t.Errorf("client %s (Pods in %v), %s: search path %q, stock %q", addr, nss, qname, got, want)
				}
				continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("client %s, %s: search path %q, stock %q", addr, qname, got, want)
			}
		}
	}
	return n
}

// podNamespaces are the distinct namespaces of the listed, not
// terminating Pods with address addr, sorted.
func podNamespaces(c *clustergen.Cluster, addr string) []string {
	var out []string
	for _, p := range c.Pods {
		if !podListed(p) || p.DeletionTimestamp != nil {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if ip.IP == addr && !slices.Contains(out, p.Namespace) {
				out = append(out, p.Namespace)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestAutoPathFromSnapshot: pods verified and autopath during an outage.
// A live instance over a generated cluster with Pods, patched by 20
// steps, writes its snapshot;
// one started from it while the API server is unreachable answers every
// question, pod names included, and gives every client the search path
// the live one gave.
func TestAutoPathFromSnapshot(t *testing.T) {
	c, cfg := podCluster(5)
	qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(5)))
	corefile := "endpointsvc cluster.local in-addr.arpa ip6.arpa {\n source kubernetes\n schema kubernetes\n pods verified\n fallthrough in-addr.arpa ip6.arpa\n ttl 30\n}"
	snap := t.TempDir() + "/snap.json"
	f := newFakeCluster(t, c)
	live := kubePluginWith(t, f.client, snap, corefile)
	r := rand.New(rand.NewSource(5))
	for range 20 { // the snapshot is then the source's, written after patches
		f.apply(t, c.Step(r))
	}
	qs = clustergen.Questions(c, cfg, r)
	kubefix.Eventually(t, func() string { return diffOptions(c, qs, live, "pods verified") })
	want, wantPaths := answers(live, qs), searchPaths(live, c)
	live.stop()
	restarted := kubePluginWith(t, nil, snap, corefile)
	if d := firstDiff(qs, answers(restarted, qs), want); d != "" {
		t.Fatalf("after the restart from the snapshot, %s", d)
	}
	found := 0
	for i, p := range searchPaths(restarted, c) {
		if !slices.Equal(p, wantPaths[i]) {
			t.Errorf("client %s: search path %q from the snapshot, %q live", c.ClientAddrs()[i], p, wantPaths[i])
		}
		if len(p) > 0 {
			found++
		}
	}
	if found < 10 {
		t.Errorf("only %d clients have a search path: the cluster has too few Pods to tell", found)
	}
}

// searchPaths are e's search paths of every client address of c.
func searchPaths(e *Endpointsvc, c *clustergen.Cluster) [][]string {
	var out [][]string
	for _, addr := range c.ClientAddrs() {
		m := new(dns.Msg)
		m.SetQuestion("web.shop.svc.cluster.local.", dns.TypeA)
		out = append(out, e.AutoPath(request.Request{W: &test.ResponseWriter{RemoteIP: addr}, Req: m}))
	}
	return out
}

// TestReplicatedPodsAndAutoPath: a node-local follower with pods verified
// (source replica) answers pod names and gives every client the search
// path the leader gives, through Pod steps: the pod index travels the
// stream.
func TestReplicatedPodsAndAutoPath(t *testing.T) {
	c, cfg := podCluster(3)
	f := newFakeCluster(t, c)
	verified := func(s string) string { return strings.Replace(s, " pods insecure\n", " pods verified\n", 1) }
	leader := parseTest(t, verified(strings.Replace(ourCorefile, " ttl 30\n", " ttl 30\n replicate 127.0.0.1:0\n", 1)))
	src := leader.source.(*kubesource.Source)
	src.NewClient = func() (k8sclient.Interface, error) { return f.client, nil }
	src.Debounce = 2 * time.Millisecond
	leader.start(leader.source)
	t.Cleanup(leader.stop)
	if err := leader.replicating.server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(leader.replicating.server.Stop)
	follower := parseTest(t, verified(followerCorefile("http://"+leader.replicating.server.Addr())))
	follower.source.(*replica.Source).Backoff = 20 * time.Millisecond
	follower.start(follower.source)
	t.Cleanup(follower.stop)
	r := rand.New(rand.NewSource(3))
	for step := range 20 {
		f.apply(t, c.Step(r))
		qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(int64(step))))
		kubefix.Eventually(t, func() string { return diffOptions(c, qs, leader, "pods verified") })
		sameAnswers(t, follower, qs, answers(leader, qs), fmt.Sprintf("step %d, follower", step))
		if got, want := searchPaths(follower, c), searchPaths(leader, c); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("step %d: the follower's search paths %q, the leader's %q", step, got, want)
		}
	}
}
