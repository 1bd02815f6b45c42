package endpointsvc

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	_ "github.com/coredns/coredns/plugin/autopath"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/k8s_external"
	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/pkg/upstream"
	_ "github.com/coredns/coredns/plugin/transfer"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
)

// k8s_external over endpointsvc is compared with k8s_external over the
// stock kubernetes plugin in whole in-process servers (caddy.Start, one
// server block each), so that k8s_external finds its backend as it does
// in the binary: by the name "kubernetes" in the block's registry. The
// stock side is the kubernetes plugin fed the cluster through the fake
// API connection, registered as the test directive "stockk8s" (its
// handler is named "kubernetes"); ours is endpointsvc reading the
// cluster's snapshot with source file.

const stockTestDirective = "stockk8s"

var (
	testDirectives sync.Once
	stockCluster   struct {
		sync.Mutex
		c *clustergen.Cluster
	}
	caddyMu sync.Mutex // one caddy.Start at a time
)

func init() { plugin.Register(stockTestDirective, setupStockK8s) }

// setupStockK8s is the stock kubernetes plugin over stockCluster's objects.
func setupStockK8s(c *caddy.Controller) error {
	c.Next()
	k, err := kubernetes.ParseStanza(c)
	if err != nil {
		return err
	}
	stockCluster.Lock()
	k.APIConn = newStockAPI(stockCluster.c)
	stockCluster.Unlock()
	k.Upstream = upstream.New() // as in the binary: through the server, as endpointsvc's
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		k.Next = next
		return k
	})
	return nil
}

// addTestDirectives puts endpointsvc where the binary has it (after
// hosts) and stockk8s where kubernetes is.
func addTestDirectives() {
	testDirectives.Do(func() {
		var out []string
		for _, d := range dnsserver.Directives {
			if d == stockName {
				out = append(out, stockTestDirective)
			}
			out = append(out, d)
			if d == "hosts" && !slices.Contains(dnsserver.Directives, pluginName) {
				out = append(out, pluginName)
			}
		}
		dnsserver.Directives = out
	})
}

// startServer starts an in-process server of corefile and returns its TCP
// address.
func startServer(t *testing.T, corefile string) string {
	t.Helper()
	addTestDirectives()
	caddyMu.Lock()
	defer caddyMu.Unlock()
	caddy.Quiet, dnsserver.Quiet = true, true
	inst, err := caddy.Start(caddy.CaddyfileInput{Contents: []byte(corefile), Filepath: "Corefile", ServerTypeName: "dns"})
	if err != nil {
		t.Fatalf("start:\n%s\n%v", corefile, err)
	}
	t.Cleanup(func() { inst.ShutdownCallbacks(); inst.Stop() })
	return inst.Servers()[0].Addr().String()
}

// askTCP asks the server at addr over TCP and writes the reply canonically.
func askTCP(t *testing.T, addr string, q clustergen.Question) string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	c := &dns.Client{Net: "tcp"}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return canonical(r)
}

// externalPair starts the two servers over cluster c with k8s_external's
// options opts and endpointsvc's (and the stock plugin's) options kopts.
func externalPair(t *testing.T, c *clustergen.Cluster, opts, kopts string) (stock, ours string) {
	t.Helper()
	snap := filepath.Join(t.TempDir(), "cluster.json")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterModel(c).Snapshot(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// the world outside (the CNAME targets k8s_external and the plugins
	// look up through the server): ext.example.test has an address
	ext := "hosts {\n192.0.2.99 ext.example.test\nfallthrough\n}\n" +
		"transfer example.org {\nto *\n}\nk8s_external example.org in-addr.arpa ip6.arpa {\n" + opts + "\n}"
	stockCluster.Lock()
	stockCluster.c = c
	stockCluster.Unlock()
	stock = startServer(t, ".:0 {\nbind 127.0.0.1\n"+ext+"\n"+stockTestDirective+" cluster.local {\nttl 30\n"+kopts+"\n}\n}")
	ours = startServer(t, ".:0 {\nbind 127.0.0.1\n"+ext+"\nendpointsvc cluster.local {\nsource file "+snap+"\nschema kubernetes\nttl 30\n"+kopts+"\n}\n}")
	return stock, ours
}

// TestExternalAgainstStock: on generated clusters with external IPs and
// LoadBalancer ingresses, k8s_external over endpointsvc answers every
// question as k8s_external over the kubernetes plugin, with and without
// headless and endpoint_pod_names. Not compared: the name server's own
// addresses (the apex NS's additional records, ns1.dns.<zone>), which the
// stock plugin of this harness has none of (it is not started).
func TestExternalAgainstStock(t *testing.T) {
	cases := []struct{ opts, kopts string }{
		{"", ""},
		{"headless\nttl 10", ""},
		{"headless", "endpoint_pod_names"},
	}
	for _, seed := range genSeeds(t, 2) {
		for i, cs := range cases {
			t.Run(fmt.Sprint(seed, "/", i), func(t *testing.T) {
				cfg := clustergen.Small()
				cfg.External = true
				c := clustergen.Generate(seed, cfg)
				stock, ours := externalPair(t, c, cs.opts, cs.kopts)
				qs := clustergen.ExternalQuestions(c, "example.org.", rand.New(rand.NewSource(seed)))
				conflicts := c.CNAMEConflicts().Services()
				bad, answered, deliberate := 0, 0, 0
				for _, q := range qs {
					if q.Type == dns.TypeNS && strings.EqualFold(q.Name, "example.org.") {
						continue
					}
					want, got := askTCP(t, stock, q), askTCP(t, ours, q)
					if strings.HasPrefix(want, "NOERROR") && !strings.Contains(want, "answer:  |") {
						answered++
					}
					if got != want && chainsThrough(want, conflicts) {
						deliberate++ // the cluster zone's deliberate difference, met through a lookup of a CNAME target
						continue
					}
					if got != want {
						if bad++; bad <= 20 {
							t.Errorf("%s:\n  stock: %s\n  ours:  %s", q, want, got)
						}
					}
				}
				if got, want := axfrTCP(t, ours), axfrTCP(t, stock); !slices.Equal(got, want) {
					t.Errorf("AXFR of example.org:\n  stock: %q\n  ours:  %q", want, got)
				} else if len(got) < 10 {
					t.Errorf("AXFR of example.org: only %q", got)
				}
				if answered < 20 {
					t.Fatalf("only %d of %d questions answered: the cluster has too few external names", answered, len(qs))
				}
				t.Logf("%d questions, %d answered, %d deliberate differences", len(qs), answered, deliberate)
			})
		}
	}
}

// TestExternalBackendRegistration: k8s_external and `autopath
// @kubernetes` find endpointsvc under the name kubernetes; in a block that
// also holds the kubernetes plugin they find that plugin, whichever of the
// two comes first in the chain.
func TestExternalBackendRegistration(t *testing.T) {
	cfg := clustergen.Small()
	cfg.External = true
	c := clustergen.Generate(1, cfg)
	var q clustergen.Question
	for _, s := range c.Services {
		if len(s.Spec.ExternalIPs) > 0 {
			q = clustergen.Question{Name: s.Name + "." + s.Namespace + ".example.org.", Type: dns.TypeA}
			break
		}
	}
	stock, ours := externalPair(t, c, "", "")
	want := askTCP(t, stock, q)
	if !strings.Contains(want, " IN A ") {
		t.Fatalf("%s: stock answers %s", q, want)
	}
	if got := askTCP(t, ours, q); got != want {
		t.Fatalf("%s: ours %s, want %s", q, got, want)
	}

	// both in one block: endpointsvc serves an empty cluster, the stock
	// plugin c; k8s_external answers from the stock plugin
	empty := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(empty, []byte(`{"format":"meshdns-k8sdns/1","namespaces":["default"],"services":[],"slices":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stockCluster.Lock()
	stockCluster.c = c
	stockCluster.Unlock()
	both := startServer(t, ".:0 {\nbind 127.0.0.1\nautopath @kubernetes\nk8s_external example.org\n"+
		"endpointsvc svc.test {\nsource file "+empty+"\nschema kubernetes\n}\n"+stockTestDirective+" cluster.local {\nttl 30\n}\n}")
	if got := askTCP(t, both, q); got != want {
		t.Fatalf("block with both, %s: %s, want the kubernetes plugin's %s", q, got, want)
	}
	// endpointsvc alone: autopath @kubernetes starts (it is endpointsvc's)
	startServer(t, ".:0 {\nbind 127.0.0.1\nautopath @kubernetes\nendpointsvc cluster.local {\nsource file "+empty+"\nschema kubernetes\n}\n}")
}

// chainsThrough reports whether a reply holds a name of one of the
// conflicted Services (clustergen.CNAMEConflicts: several CNAMEs, or
// CNAMEs beside addresses, which schema kubernetes answers otherwise on
// purpose, docs/cluster-dns.md): k8s_external looks the CNAME targets of
// FQDN endpoints and ingress hostnames up through the server, and meets
// that difference there.
func chainsThrough(reply string, conflicts []string) bool {
	for _, c := range conflicts {
		if strings.Contains(reply, " "+c+".svc.cluster.local.") {
			return true
		}
	}
	return false
}

// axfrTCP transfers example.org from the server at addr: its records as
// text, sorted (k8s_external sends headless Services in map order), SOA
// serials zeroed, and the name server's addresses left out (see
// TestExternalAgainstStock).
func axfrTCP(t *testing.T, addr string) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetAxfr("example.org.")
	env, err := new(dns.Transfer).In(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for e := range env {
		if e.Error != nil {
			t.Fatalf("AXFR: %v", e.Error)
		}
		for _, rr := range e.RR {
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
			if strings.EqualFold(rr.Header().Name, "ns1.dns.example.org.") && rr.Header().Rrtype != dns.TypeSRV {
				continue
			}
			out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
		}
	}
	slices.Sort(out)
	return out
}
