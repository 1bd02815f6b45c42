package virtualconsul

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"testing"

	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// listing is the part of /virtualconsul's instance object tests read.
type listing struct {
	Zones      []string
	Source     string
	TableFrom  string `json:"table_from"`
	Generation uint64
	Count      int               `json:"entries_count"`
	ShortNames map[string]string `json:"short_names"`
	Entries    []struct {
		Key       string
		Addresses []string
		Ambiguous bool
	}
}

// TestList: the listing holds every key of the serving table with its
// addresses as Lookup has them, the table's generation and datacenter,
// and the datacenter short names expand with.
func TestList(t *testing.T) {
	b := table.NewBuilder(0)
	b.SetDatacenter("dc2")
	for _, e := range []table.Entry{
		{Name: "a.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"240.0.0.1"}},
		{Name: "b.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"fd00::2"}},
		{Name: "c.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"240.0.0.3", "fd00::3"}},
		{Name: "d.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"240.0.0.4", "240.0.0.5"}},
	} {
		if err := b.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	tbl := b.Table()
	v := &VirtualConsul{zones: []soa.Names{soa.For("consul.")}, ns: "default", ap: "default", dc: "dc1", src: namedSource("consul")}
	v.table.Store(tbl)
	v.served("consul")
	var buf bytes.Buffer
	if err := v.List(&buf, nil); err != nil {
		t.Fatal(err)
	}
	var l listing
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if l.Generation != tbl.Generation() || l.Count != 4 || len(l.Entries) != 4 || l.Source != "consul" || l.TableFrom != "consul" || l.ShortNames["datacenter"] != "dc2" {
		t.Fatalf("listing %+v", l)
	}
	for _, e := range l.Entries {
		want, ok := tbl.Lookup(e.Key)
		var ws []string
		for _, a := range want {
			ws = append(ws, a.String())
		}
		if !ok || !slices.Equal(ws, e.Addresses) || e.Ambiguous != (e.Key[0] == 'd') {
			t.Errorf("entry %+v, table has %v", e, ws)
		}
	}
	if err := v.List(io.Discard, url.Values{"name": {"x"}}); err == nil {
		t.Fatal("a filter was accepted")
	} else if _, ok := err.(*inspect.BadRequest); !ok {
		t.Fatalf("filter refused with %T, want *inspect.BadRequest", err)
	}
	if b2 := table.NewBuilder(0).Table(); b2.Generation() <= tbl.Generation() {
		t.Fatalf("a later table's generation %d is not above %d", b2.Generation(), tbl.Generation())
	}
}

// BenchmarkList lists a 100,000-name table (docs/inspect.md has the
// 1,000,000-name figure of the real binary).
func BenchmarkList(b *testing.B) {
	bl := table.NewBuilder(100_000)
	for i := range 100_000 {
		bl.Add(table.Entry{Name: fmt.Sprintf("s%d.virtual.default.ns.default.ap.dc1.dc.consul", i), Addresses: []string{fmt.Sprintf("240.%d.%d.%d", i>>16&255, i>>8&255, i&255)}})
	}
	v := &VirtualConsul{zones: []soa.Names{soa.For("consul.")}, ns: "default", ap: "default", dc: "dc1"}
	v.table.Store(bl.Table())
	b.ReportAllocs()
	for b.Loop() {
		if err := v.List(io.Discard, nil); err != nil {
			b.Fatal(err)
		}
	}
}
