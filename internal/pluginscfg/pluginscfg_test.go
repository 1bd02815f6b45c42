package pluginscfg

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	ps, err := Parse([]byte("# comment\n\nroot:root\non:github.com/coredns/caddy/onevent\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Package != "github.com/coredns/coredns/plugin/root" || ps[1].Package != "github.com/coredns/caddy/onevent" {
		t.Fatalf("parsed %+v", ps)
	}
	src := string(Source(ps))
	if !strings.Contains(src, "\t_ \"github.com/coredns/caddy/onevent\"\n\t_ \"github.com/coredns/coredns/plugin/root\"\n") {
		t.Errorf("source:\n%s", src)
	}
	for _, bad := range []string{"root", "root:", ":root", "root:root\nroot:root", "a b:c"} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "plugins.cfg:") {
			t.Errorf("%q: error %v, want one naming the line", bad, err)
		}
	}
}
