package k8sdns_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// sameChange reports whether two names' contents are equal.
func sameChange(a, b k8sdns.Change) bool {
	if a.Key != b.Key || (a.Service == nil) != (b.Service == nil) || len(a.Slices) != len(b.Slices) {
		return false
	}
	if a.Service != nil && !a.Service.Equal(b.Service) {
		return false
	}
	for i := range a.Slices {
		if !a.Slices[i].Equal(b.Slices[i]) {
			return false
		}
	}
	return true
}

// TestRecordRoundTrip: every name of generated clusters decodes from its
// record as it was, and the records of a whole table build a table equal
// to it.
func TestRecordRoundTrip(t *testing.T) {
	for _, seed := range seeds(4) {
		tbl := k8sdns.Build(model(clustergen.Generate(seed, configs()[[]string{"", "multicluster", "external"}[seed%3]])))
		c := &k8sdns.Cluster{Namespaces: tbl.Namespaces()}
		for ch := range tbl.All() {
			rec := k8sdns.AppendChange(nil, ch)
			back, err := k8sdns.DecodeChange(rec)
			if err != nil {
				t.Fatalf("seed %d %v: %v\n%s", seed, ch.Key, err, rec)
			}
			if !sameChange(ch, back) {
				t.Fatalf("seed %d %v: the record decodes to another content:\n%s", seed, ch.Key, rec)
			}
			c.Add(back)
		}
		if got, want := k8sdns.Build(c).Describe(), tbl.Describe(); got != want {
			t.Fatalf("seed %d: the records' table differs:\n%s\nwant:\n%s", seed, got, want)
		}
	}
	gone := k8sdns.Change{Key: k8sdns.Key{Namespace: "shop", Name: "web"}}
	rec := k8sdns.AppendChange(nil, gone)
	if string(rec) != `{"namespace":"shop","name":"web"}` {
		t.Errorf("a gone name's record is %s", rec)
	}
	if back, err := k8sdns.DecodeChange(rec); err != nil || !sameChange(back, gone) {
		t.Errorf("a gone name's record decodes to %+v, %v", back, err)
	}
}

// TestChangedPatchesToNew: after random steps of a generated cluster, the
// names Changed reports, copied from the new table into the old one as a
// patch, make a table equal to the new one - whether the new one was
// patched (sharing the untouched names) or built whole; and a table
// compared with itself, or with an equal one built apart, changed nothing.
func TestChangedPatchesToNew(t *testing.T) {
	for _, seed := range seeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := clustergen.Generate(seed, clustergen.Small())
			r := rand.New(rand.NewSource(seed))
			old := k8sdns.Build(model(c))
			if keys, nss := old.Changed(k8sdns.Build(model(c))); len(keys) > 0 || nss {
				t.Fatalf("two builds of one cluster differ in %v (namespaces %v)", keys, nss)
			}
			for step := range 60 {
				labels := sliceLabels(c)
				steps := 1 + r.Intn(3)
				patched := old
				for range steps {
					ch := c.Step(r)
					patched = patched.Patched(patchOf(c, ch, labels))
					labels = sliceLabels(c)
				}
				for _, n := range []struct {
					how string
					t   *k8sdns.Table
				}{{"patched", patched}, {"built", k8sdns.Build(model(c))}} {
					keys, nss := n.t.Changed(old)
					p := &k8sdns.Patch{SetNamespaces: nss, Namespaces: n.t.Namespaces()}
					for _, k := range keys {
						p.Changes = append(p.Changes, n.t.Name(k))
					}
					if got, want := old.Patched(p).Describe(), n.t.Describe(); got != want {
						t.Fatalf("step %d, %s: old table patched with %v differs:\n%s\nwant:\n%s", step, n.how, keys, got, want)
					}
				}
				old = patched
			}
		})
	}
}

// TestTableSnapshot: a table's own snapshot (with its origin) decodes to
// a cluster of the same table and origin; without an origin it is the
// cluster's snapshot, byte for byte.
func TestTableSnapshot(t *testing.T) {
	c := model(clustergen.Generate(3, clustergen.Small()))
	tbl := k8sdns.Build(c)
	var fromTable, fromCluster bytes.Buffer
	if err := tbl.Snapshot(&fromTable); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Whole().Snapshot(&fromCluster); err != nil {
		t.Fatal(err)
	}
	if fromTable.String() != fromCluster.String() {
		t.Fatal("the table's snapshot differs from its cluster's")
	}
	c.Origin = "0123abcd/42"
	tbl = k8sdns.Build(c)
	var b bytes.Buffer
	if err := tbl.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	back, err := k8sdns.DecodeSnapshot(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if back.Origin != c.Origin || tbl.Origin() != c.Origin {
		t.Errorf("origin %q (table %q), want %q", back.Origin, tbl.Origin(), c.Origin)
	}
	if got, want := k8sdns.Build(back).Describe(), tbl.Describe(); got != want {
		t.Fatalf("the snapshot's table differs:\n%s\nwant:\n%s", got, want)
	}
	p := &k8sdns.Patch{Origin: "0123abcd/43"}
	if o := tbl.Patched(p).Origin(); o != p.Origin {
		t.Errorf("patched origin %q, want %q", o, p.Origin)
	}
}

// TestDecodeChangeRejects: a record with any invalid part is rejected
// whole, with an error naming it.
func TestDecodeChangeRejects(t *testing.T) {
	slice := func(ns, name, svc, extra string) string {
		return `{"namespace":"` + ns + `","name":"` + name + `","service":"` + svc + `","type":"IPv4","addresses":[["10.244.0.5"]],"conditions":["yyn"]` + extra + `}`
	}
	for _, tc := range []struct{ rec, want string }{
		{`{"namespace":"shop","name":"web"`, "unexpected EOF"},
		{`{"namespace":"shop","name":"web"} {}`, "trailing data"},
		{`{"namespace":"shop","name":"web","colour":"red"}`, "unknown field"},
		{`{"namespace":"","name":"web"}`, "no namespace or name"},
		{`{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"api","kind":"ClusterIP"}}`, "Service shop/api"},
		{`{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"Fancy"}}`, `unknown kind "Fancy"`},
		{`{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["10.96.0.300"]}}`, "bad cluster IP"},
		{`{"namespace":"shop","name":"web","slices":[` + slice("shop", "web-1", "api", "") + `]}`, `of Service "api"`},
		{`{"namespace":"shop","name":"web","slices":[` + slice("other", "web-1", "web", "") + `]}`, "other/web-1"},
		{`{"namespace":"shop","name":"web","slices":[` + slice("shop", "web-1", "web", "") + `,` + slice("shop", "web-1", "web", "") + `]}`, `slice "web-1" twice`},
		{`{"namespace":"shop","name":"web","slices":[` + slice("shop", "web-1", "web", `,"nodes":["a","b"]`) + `]}`, "parallel array"},
		{`{"namespace":"shop","name":"web","slices":[` + strings.Replace(slice("shop", "web-1", "web", ""), "10.244.0.5", "fd00::5", 1) + `]}`, "bad IPv4 address"},
	} {
		if _, err := k8sdns.DecodeChange([]byte(tc.rec)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.rec, err, tc.want)
		}
	}
}
