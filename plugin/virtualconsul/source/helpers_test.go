package source

import (
	"os"
	"sort"
	"testing"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// The keys of the tests' tables (as in package table's tests).
const (
	webKey = "web.virtual.default.ns.default.ap.dc1.dc.consul"
	apiKey = "api.virtual.default.ns.default.ap.dc1.dc.consul"
)

// parsed is what parse read of a virtualconsul block: its source.
type parsed struct {
	src    Source
	remote *Envoy
}

// parse reads the source line of a virtualconsul block as the plugin's
// setup does (the same errors, with the Corefile's file and line), and
// skips its other lines.
func parse(c *caddy.Controller) (*parsed, error) {
	p := &parsed{}
	for c.Next() {
		for c.NextBlock() {
			opt, args := c.Val(), c.RemainingArgs()
			if opt != "source" {
				continue
			}
			if len(args) == 0 {
				return nil, c.ArgErr()
			}
			var err error
			if args[0] == "envoy" {
				p.remote, err = NewEnvoy(c, args[1:])
			} else if src, known, serr := New(c, args[0], args[1:]); known {
				p.src, err = src, serr
			} else {
				return nil, c.Errf("unknown source type %q", args[0])
			}
			if err != nil {
				return nil, c.Errf("source %s: %v", args[0], err)
			}
		}
	}
	return p, nil
}

// addrs returns the VIPs of name in tbl as sorted text, nil when absent.
func addrs(t *testing.T, tbl *table.Table, name string) []string {
	t.Helper()
	a, ok := tbl.Lookup(name)
	if !ok {
		return nil
	}
	var out []string
	for _, x := range a {
		out = append(out, x.String())
	}
	sort.Strings(out)
	return out
}

// writeTable writes a table file of m (name → VIP) at path, atomically.
func writeTable(t *testing.T, path string, m map[string]string) {
	t.Helper()
	var es []table.Entry
	for k, a := range m {
		es = append(es, table.Entry{Name: k, Addresses: []string{a}})
	}
	tbl, err := table.Build(es)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.WriteJSON(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
