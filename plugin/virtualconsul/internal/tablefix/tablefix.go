// Package tablefix holds what the tests of virtualconsul and its sources
// share about tables: the keys they use, a table file writer and a
// lookup as sorted text. (package table's own tests keep their copy: they
// cannot import a package that imports table.)
package tablefix

import (
	"os"
	"sort"
	"testing"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// The keys of the tests' tables.
const (
	WebKey = "web.virtual.default.ns.default.ap.dc1.dc.consul"
	APIKey = "api.virtual.default.ns.default.ap.dc1.dc.consul"
)

// Addrs returns the VIPs of name in tbl as sorted text, nil when absent.
func Addrs(t *testing.T, tbl *table.Table, name string) []string {
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

// WriteTable writes a table file of m (name → VIP) at path, atomically.
func WriteTable(t *testing.T, path string, m map[string]string) {
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
