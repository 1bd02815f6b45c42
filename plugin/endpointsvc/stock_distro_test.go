package endpointsvc

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
)

// The kubernetes blocks the distributions ship (testdata/distros, each
// with its source in its header), pasted as they are into both sides and
// compared on generated clusters like the option cases: every question,
// every client's search path, again after 30 steps.

// distroBody is the body of the file's kubernetes block, its lines as
// written; the block must be for cluster.local in-addr.arpa ip6.arpa.
func distroBody(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case l == "kubernetes cluster.local in-addr.arpa ip6.arpa {":
			in = true
		case l == "}":
			in = false
		case in:
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s: no kubernetes cluster.local in-addr.arpa ip6.arpa block", path)
	}
	return strings.Join(lines, "\n ")
}

// TestDistroCorefilesAgainstStock: each distribution's kubernetes block
// answers a generated cluster as the stock plugin under the same block.
func TestDistroCorefilesAgainstStock(t *testing.T) {
	files, err := filepath.Glob("testdata/distros/*.Corefile")
	if err != nil || len(files) < 2 {
		t.Fatalf("distribution Corefiles: %v %v", files, err)
	}
	seen := map[string]string{} // body: the first distribution shipping it
	for _, file := range files {
		body := distroBody(t, file)
		name := strings.TrimSuffix(filepath.Base(file), ".Corefile")
		if first, ok := seen[body]; ok {
			t.Logf("%s: the block of %s, compared there", name, first)
			continue
		}
		seen[body] = name
		for _, seed := range genSeeds(t, 2) {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				c, cfg := podCluster(seed)
				f := newFakeClusterSelecting(t, c, nil)
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
			})
		}
	}
}

// compareBlock compares the answers and the search paths under the block.
func compareBlock(t *testing.T, c *clustergen.Cluster, cfg clustergen.Config, r *rand.Rand, ours *Endpointsvc, body string) {
	t.Helper()
	n, d := compareWithStockPlugin(t, c, clustergen.Questions(c, cfg, r), stockBlock(t, c, body), ours, 10)
	paths := compareAutoPath(t, c, stockBlock(t, c, body), ours)
	t.Logf("%d questions compared (%d deliberate differences), %d search paths", n, d, paths)
}
