package virtualconsul

import (
	"context"
	"sort"
	"testing"

	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// The keys of the tests' tables (as in package table's tests).
const (
	webKey = "web.virtual.default.ns.default.ap.dc1.dc.consul"
	apiKey = "api.virtual.default.ns.default.ap.dc1.dc.consul"
)

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

// namedSource is a source that only has a name, for what lists it.
type namedSource string

func (s namedSource) Name() string                                      { return string(s) }
func (s namedSource) Key() string                                       { return string(s) }
func (s namedSource) Run(ctx context.Context, report func(source.Sync)) { <-ctx.Done() }
