package endpointsvc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The kubernetes blocks the distributions ship (testdata/distros: their
// whole Corefiles, each with its source in its header), pasted as they are
// into both sides and compared on generated clusters like the option
// cases: every question, every client's search path, again after 30
// steps. The whole server blocks, every other line with them, are compared
// as two processes on a real API server in
// test/clusterdns_distro_test.go.

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
		case l == "kubernetes cluster.local in-addr.arpa ip6.arpa {", l == "kubernetes cluster.local. in-addr.arpa ip6.arpa {": // kops writes the dot
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
				blockAgainstStock(t, seed, body, nil)
			})
		}
	}
}
