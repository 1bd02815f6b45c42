package endpointsvc

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/kubernetes/object"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	"github.com/miekg/dns"
	api "k8s.io/api/core/v1"
	meta "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The stock kubernetes plugin of the same binary, fed the same objects
// through a fake of its API connection (its informers' indexes), is the
// reference schema kubernetes is compared with: these tests ask both every
// question clustergen makes about a generated cluster and compare the
// replies whole (rcode, AA flag, every section, TTLs; the SOA serial left
// out). The end-to-end test (test/clusterdns_gen_test.go) does the same
// with both processes on a real kube-apiserver.

// stockCorefile is kubeadm's kubernetes stanza, as the shipped Corefile
// replaces it (deploy/kubernetes/configmap.yaml).
const (
	stockCorefile = "kubernetes cluster.local in-addr.arpa ip6.arpa {\n pods insecure\n fallthrough in-addr.arpa ip6.arpa\n ttl 30\n}"
	ourCorefile   = "endpointsvc cluster.local in-addr.arpa ip6.arpa {\n source kubernetes\n schema kubernetes\n pods insecure\n fallthrough in-addr.arpa ip6.arpa\n ttl 30\n}"
)

// stockAPI is the stock plugin's view of the cluster: its slim objects,
// looked up as its informers' indexes do.
type stockAPI struct {
	svcs []*object.Service
	eps  []*object.Endpoints
	nss  map[string]*object.Namespace
	pods []*object.Pod // pods verified

	imps  []*object.ServiceImport         // multicluster
	mceps []*object.MultiClusterEndpoints // its second slice informer's
}

func newStockAPI(c *clustergen.Cluster) *stockAPI {
	a := &stockAPI{nss: map[string]*object.Namespace{}}
	for _, n := range c.Namespaces {
		o, _ := object.ToNamespace(n.DeepCopy())
		a.nss[n.Name] = o.(*object.Namespace)
	}
	for _, s := range c.Services {
		o, _ := object.ToService(s.DeepCopy())
		a.svcs = append(a.svcs, o.(*object.Service))
	}
	for _, sl := range c.Slices {
		o, _ := object.EndpointSliceToEndpoints(sl.DeepCopy())
		a.eps = append(a.eps, o.(*object.Endpoints))
	}
	for _, s := range c.Imports {
		o, _ := object.ToServiceImport(s.DeepCopy())
		a.imps = append(a.imps, o.(*object.ServiceImport))
	}
	for _, sl := range c.ImportSlices { // in both of its slice informers
		o, _ := object.EndpointSliceToEndpoints(sl.DeepCopy())
		a.eps = append(a.eps, o.(*object.Endpoints))
		m, _ := object.EndpointSliceToMultiClusterEndpoints(sl.DeepCopy())
		a.mceps = append(a.mceps, m.(*object.MultiClusterEndpoints))
	}
	return a
}

func (a *stockAPI) ServiceList() []*object.Service             { return a.svcs }
func (a *stockAPI) EndpointsList() []*object.Endpoints         { return a.eps }
func (a *stockAPI) ServiceImportList() []*object.ServiceImport { return a.imps }
func (a *stockAPI) SvcImportIndex(k string) []*object.ServiceImport {
	return filter(a.imps, func(s *object.ServiceImport) bool { return s.Index == k })
}
func (a *stockAPI) PodIndex(ip string) []*object.Pod {
	return filter(a.pods, func(p *object.Pod) bool { return slices.Contains(p.PodIPs, ip) })
}
func (a *stockAPI) McEpIndex(k string) []*object.MultiClusterEndpoints {
	return filter(a.mceps, func(e *object.MultiClusterEndpoints) bool { return e.Index == k })
}
func (a *stockAPI) Run()                                   {}
func (a *stockAPI) HasSynced() bool                        { return true }
func (a *stockAPI) Stop() error                            { return nil }
func (a *stockAPI) Modified(kubernetes.ModifiedMode) int64 { return 0 }

func (a *stockAPI) GetNodeByName(context.Context, string) (*api.Node, error) {
	return nil, errors.New("no nodes")
}

func (a *stockAPI) GetNamespaceByName(name string) (*object.Namespace, error) {
	if n, ok := a.nss[name]; ok {
		return n, nil
	}
	return nil, errors.New("namespace not found")
}

func (a *stockAPI) SvcIndex(k string) []*object.Service {
	return filter(a.svcs, func(s *object.Service) bool { return s.Index == k })
}

func (a *stockAPI) SvcIndexReverse(ip string) []*object.Service {
	return filter(a.svcs, func(s *object.Service) bool { return slices.Contains(s.ClusterIPs, ip) })
}

func (a *stockAPI) SvcExtIndexReverse(ip string) []*object.Service {
	return filter(a.svcs, func(s *object.Service) bool { return slices.Contains(s.ExternalIPs, ip) })
}

func (a *stockAPI) EpIndex(k string) []*object.Endpoints {
	return filter(a.eps, func(e *object.Endpoints) bool { return e.Index == k })
}

func (a *stockAPI) EpIndexReverse(ip string) []*object.Endpoints {
	return filter(a.eps, func(e *object.Endpoints) bool { return slices.Contains(e.IndexIP, ip) })
}

// filter returns the xs that keep accepts, in order (an informer index's
// lookup, by scan).
func filter[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// outside is the world beyond the cluster as the server's other plugins
// answer it: ext.example.test has an A record (no AAAA), and every other
// outside name fails (SERVFAIL, as forward to an unreachable resolver).
type outside struct{}

func (outside) Lookup(_ context.Context, state request.Request, name string, typ uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, typ)
	m.Response = true
	switch {
	case strings.EqualFold(name, "ext.example.test."):
		if typ == dns.TypeA {
			m.Answer = []dns.RR{test.A("ext.example.test. 300 IN A 192.0.2.99")}
		}
	default:
		m.Rcode = dns.RcodeServerFailure
	}
	return m, nil
}

// stockPlugin is the stock plugin with kubeadm's options over the cluster.
func stockPlugin(t testing.TB, cl *clustergen.Cluster) *kubernetes.Kubernetes {
	t.Helper()
	c := caddy.NewTestController("dns", stockCorefile)
	c.Next()
	k, err := kubernetes.ParseStanza(c)
	if err != nil {
		t.Fatal(err)
	}
	k.APIConn = newStockAPI(cl)
	k.Upstream = outside{}
	k.Next = test.NextHandler(dns.RcodeRefused, nil)
	return k
}

// ourPlugin is the shipped endpointsvc stanza serving the model of the
// cluster's objects.
func ourPlugin(t testing.TB, mc *k8sdns.Cluster) *Endpointsvc {
	t.Helper()
	e, err := parse(caddy.NewTestController("dns", ourCorefile))
	if err != nil {
		t.Fatal(err)
	}
	e.schema.(*dnsSchema).srv.Upstream = outside{}
	e.Next = test.NextHandler(dns.RcodeRefused, nil)
	if mc != nil {
		e.apply(context.Background(), "test", mc, false)
	}
	return e
}

func clusterModel(c *clustergen.Cluster) *k8sdns.Cluster {
	return kubesource.DNSCluster(c.Namespaces, c.Services, c.Slices)
}

// serve asks h and writes the reply canonically: the plugin's rcode when
// it wrote nothing, else the rcode, the AA flag and each section sorted,
// with the SOA serial left out.
func serve(h interface {
	ServeDNS(context.Context, dns.ResponseWriter, *dns.Msg) (int, error)
}, q clustergen.Question) (string, *dns.Msg) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	code, _ := h.ServeDNS(context.Background(), rec, m)
	if rec.Msg == nil {
		return "not written: " + dns.RcodeToString[code], nil
	}
	return canonical(rec.Msg), rec.Msg
}

func canonical(m *dns.Msg) string {
	rrs := func(sec []dns.RR) string {
		var out []string
		for _, rr := range sec {
			c := dns.Copy(rr)
			if soa, ok := c.(*dns.SOA); ok {
				soa.Serial = 0
			}
			out = append(out, strings.ReplaceAll(c.String(), "\t", " "))
		}
		sort.Strings(out)
		return strings.Join(out, "; ")
	}
	return fmt.Sprintf("%s aa=%v | answer: %s | authority: %s | additional: %s",
		dns.RcodeToString[m.Rcode], m.Authoritative, rrs(m.Answer), rrs(m.Ns), rrs(m.Extra))
}

// compareWithStock asks both servers every question about c and reports
// the differences (at most max) but for the deliberate one
// (clustergen.CNAMEConflicts, listed in docs/cluster-dns.md). It returns
// the number of questions compared and of deliberate differences.
func compareWithStock(t *testing.T, c *clustergen.Cluster, qs []clustergen.Question, ours *Endpointsvc, max int) (asked, deliberate int) {
	t.Helper()
	return compareWithStockPlugin(t, c, qs, stockPlugin(t, c), ours, max)
}

// compareWithStockPlugin is compareWithStock with the stock plugin given.
func compareWithStockPlugin(t *testing.T, c *clustergen.Cluster, qs []clustergen.Question, stock plugin.Handler, ours *Endpointsvc, max int) (asked, deliberate int) {
	t.Helper()
	conflicts := c.CNAMEConflicts()
	bad := 0
	for _, q := range qs {
		asked++
		want, reply := serve(stock, q)
		got, ourReply := serve(ours, q)
		switch {
		case got == want:
		case conflicts.Deliberate(q, reply, ourReply):
			deliberate++
		default:
			if bad++; bad <= max {
				t.Errorf("%s:\n  stock: %s\n  ours:  %s", q, want, got)
			}
		}
	}
	if bad > max {
		t.Errorf("... and %d more differences", bad-max)
	}
	return asked, deliberate
}

var _ = meta.Now

// genSeeds is the number of generated clusters a property test tries: a
// few in a normal run, more with MESHDNS_GEN_SEEDS.
func genSeeds(t *testing.T, normal int) []int64 {
	n := normal
	if s := os.Getenv("MESHDNS_GEN_SEEDS"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v > 0 {
			n = v
		}
	}
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(i + 1)
	}
	return seeds
}

// TestAgainstStock: on generated clusters, schema kubernetes answers every
// question as the stock kubernetes plugin does (but for the deliberate
// differences).
func TestAgainstStock(t *testing.T) {
	for _, seed := range genSeeds(t, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := clustergen.Small()
			c := clustergen.Generate(seed, cfg)
			qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(seed)))
			n, d := compareWithStock(t, c, qs, ourPlugin(t, clusterModel(c)), 20)
			t.Logf("%d questions compared, %d deliberate differences", n, d)
		})
	}
}
