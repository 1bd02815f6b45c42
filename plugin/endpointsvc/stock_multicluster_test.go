package endpointsvc

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	"github.com/miekg/dns"
)

// The multicluster option against the stock plugin's, in process: both
// blocks serve cluster.local and the multicluster zone clusterset.local,
// over generated clusters with ServiceImports and their slices, before
// and after random steps.
const (
	stockMCCorefile = "kubernetes cluster.local clusterset.local in-addr.arpa ip6.arpa {\n pods insecure\n multicluster clusterset.local\n fallthrough in-addr.arpa ip6.arpa\n ttl 30\n}"
	ourMCCorefile   = "endpointsvc cluster.local clusterset.local in-addr.arpa ip6.arpa {\n pods insecure\n multicluster clusterset.local\n fallthrough in-addr.arpa ip6.arpa\n ttl 30\n}"
)

// mcConfig is the generator's small cluster with ServiceImports.
func mcConfig() clustergen.Config {
	cfg := clustergen.Small()
	cfg.Imports = 12
	return cfg
}

func TestAgainstStockMulticluster(t *testing.T) {
	for _, seed := range genSeeds(t, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := mcConfig()
			c := clustergen.Generate(seed, cfg)
			r := rand.New(rand.NewSource(seed))
			for phase := range 2 {
				if phase == 1 {
					for range 60 {
						c.Step(r)
					}
				}
				model := clusterModel(c)
				model.Imports = kubesource.DNSImports(c.Imports)
				model.Slices = append(model.Slices, kubesource.DNSCluster(nil, nil, c.ImportSlices).Slices...)
				e, err := parse(caddy.NewTestController("dns", ourMCCorefile))
				if err != nil {
					t.Fatal(err)
				}
				e.schema.(*dnsSchema).srv.Upstream = outside{}
				e.Next = test.NextHandler(dns.RcodeRefused, nil)
				e.apply(t.Context(), "test", model, false)

				sc := caddy.NewTestController("dns", stockMCCorefile)
				sc.Next()
				k, err := kubernetes.ParseStanza(sc)
				if err != nil {
					t.Fatal(err)
				}
				k.APIConn, k.Upstream, k.Next = newStockAPI(c), outside{}, test.NextHandler(dns.RcodeRefused, nil)

				qs := clustergen.Questions(c, cfg, r)
				mcQuestions := 0
				for _, q := range qs {
					if dns.IsSubDomain("clusterset.local.", dns.CanonicalName(q.Name)) {
						mcQuestions++
					}
				}
				n, d := compareWithStockPlugin(t, c, qs, k, e, 20)
				t.Logf("phase %d: %d questions (%d in clusterset.local, %d imports, %d of their slices) compared, %d deliberate differences",
					phase, n, mcQuestions, len(c.Imports), len(c.ImportSlices), d)
				if mcQuestions < 100 {
					t.Errorf("only %d questions in clusterset.local", mcQuestions)
				}
			}
		})
	}
}
