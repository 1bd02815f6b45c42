package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// corefileBlockRE matches a fenced Corefile example in Markdown:
// ```corefile … ``` or ~~~ corefile … ~~~.
var corefileBlockRE = regexp.MustCompile("(?ms)^(?:```|~~~) ?corefile\\s*\\n(.*?)^(?:```|~~~)")

// readmeFiles are the Markdown files whose Corefile blocks must parse.
func readmeFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"README.md", "plugin/*/README.md", "docs/*.md", "corefile/*.md", "deploy/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// TestReadmeCorefiles starts the binary with every Corefile block of the
// READMEs and docs, as CoreDNS's own readme test does: a block that does not
// parse or set up fails start-up, and so this test.
func TestReadmeCorefiles(t *testing.T) {
	blocks := 0
	for _, f := range readmeFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for i, m := range corefileBlockRE.FindAllStringSubmatch(string(b), -1) {
			blocks++
			t.Run(rel+"#"+itoa(i+1), func(t *testing.T) {
				dir := t.TempDir()
				CopyDir(t, filepath.Join(repoRoot, "corefile"), dir)
				Start(t, m[1], Options{Dir: dir, WaitDNS: true})
			})
		}
	}
	if blocks == 0 {
		t.Fatal("no Corefile blocks found in the READMEs")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
