package records

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestDBPutDelete(t *testing.T) {
	d := NewDB([]string{"weave.local."}, 3, 0)
	var gone []Record
	changes := 0
	d.onGone = func(g []Record) { gone = append(gone, g...) }
	d.onChange = func() { changes++ }

	r, created, err := d.Put(Record{ID: "c1", IP: ip("10.32.0.1"), Domain: "Web.Weave.Local"})
	if err != nil || !created || r.Domain != "web.weave.local." || r.RoutingPrefix != 32 {
		t.Fatalf("put: %+v %v %v", r, created, err)
	}
	if _, created, _ := d.Put(Record{ID: "c1", IP: ip("10.32.0.1"), Domain: "web.weave.local."}); created || changes != 1 {
		t.Fatalf("same put again: created %v, changes %d", created, changes)
	}
	d.Put(Record{ID: "c2", IP: ip("10.32.0.1"), Domain: "web.weave.local", TTL: 5})
	d.Put(Record{ID: "c2", IP: ip("fd00::1"), Domain: "web.weave.local", RoutingPrefix: 64})
	if _, _, err := d.Put(Record{ID: "c3", IP: ip("10.32.0.3"), Domain: "x.weave.local"}); !errors.Is(err, ErrFull) {
		t.Fatalf("4th record: want ErrFull, got %v", err)
	}
	e := d.ix.lookup("web.weave.local.")
	if e == nil || len(e.a) != 1 || e.ttlA[0] != 0 || len(e.aaaa) != 1 {
		t.Fatalf("entry: %+v", e)
	}
	if got := d.ix.lookupPTR(ip("10.32.0.1")); len(got) != 1 || got[0] != "web.weave.local." {
		t.Fatalf("ptr: %v", got)
	}
	// c1 goes, but c2 still holds web→10.32.0.1: no goodbye yet.
	if del := d.DeleteID("c1"); len(del) != 1 || len(gone) != 0 {
		t.Fatalf("delete c1: %v, goodbyes %v", del, gone)
	}
	if e := d.ix.lookup("web.weave.local."); e == nil || e.ttlA[0] != 5 {
		t.Fatalf("entry after c1: %+v", e)
	}
	if del := d.DeleteIDIP("c2", ip("::ffff:10.32.0.1")); len(del) != 1 || len(gone) != 1 || gone[0].IP != ip("10.32.0.1") {
		t.Fatalf("delete c2/10.32.0.1: %v, goodbyes %v", del, gone)
	}
	if del := d.DeleteIDIP("c2", ip("10.9.9.9")); del != nil {
		t.Fatalf("deleting nothing: %v", del)
	}
	if d.Len() != 1 || d.ix.lookup("web.weave.local.").a != nil {
		t.Fatalf("left: %v", d.Records(""))
	}
	d.DeleteID("c2")
	if d.Len() != 0 || d.ix.lookup("web.weave.local.") != nil || d.ix.lookupPTR(ip("fd00::1")) != nil {
		t.Fatalf("not empty: %v", d.Records(""))
	}
}

func TestDBValidation(t *testing.T) {
	d := NewDB([]string{"weave.local."}, 10, 0)
	for _, tc := range []struct {
		r   Record
		err error
		msg string
	}{
		{Record{IP: ip("10.0.0.1"), Domain: "a.weave.local"}, ErrBadID, "empty"},
		{Record{ID: strings.Repeat("x", 257), IP: ip("10.0.0.1"), Domain: "a.weave.local"}, ErrBadID, "longer than 256"},
		{Record{ID: "a b", IP: ip("10.0.0.1"), Domain: "a.weave.local"}, ErrBadID, "space"},
		{Record{ID: "a", Domain: "a.weave.local"}, ErrBadIP, ""},
		{Record{ID: "a", IP: ip("0.0.0.0"), Domain: "a.weave.local"}, ErrBadIP, ""},
		{Record{ID: "a", IP: ip("224.0.0.251"), Domain: "a.weave.local"}, ErrBadIP, ""},
		{Record{ID: "a", IP: ip("fe80::1%eth0"), Domain: "a.weave.local"}, ErrBadIP, ""},
		{Record{ID: "a", IP: ip("10.0.0.1"), Domain: "a.example.com"}, ErrBadDomain, "outside the zones"},
		{Record{ID: "a", IP: ip("10.0.0.1")}, ErrBadDomain, "missing"},
		{Record{ID: "a", IP: ip("10.0.0.1"), Domain: "a..weave.local"}, ErrBadDomain, "not a domain name"},
		{Record{ID: "a", IP: ip("10.0.0.1"), Domain: "a.weave.local", RoutingPrefix: 33}, ErrBadPrefix, ""},
	} {
		_, _, err := d.Put(tc.r)
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: want %v (%q), got %v", tc.r, tc.err, tc.msg, err)
		}
	}
	if d.Len() != 0 {
		t.Fatalf("invalid records stored: %v", d.Records(""))
	}
}

func TestDBReplaceAndSnapshot(t *testing.T) {
	d := NewDB([]string{"weave.local."}, 2, 0)
	d.Put(Record{ID: "old", IP: ip("10.0.0.9"), Domain: "old.weave.local"})
	recs := []Record{
		{ID: "a", IP: ip("10.0.0.1"), Domain: "a.weave.local"},
		{ID: "b", IP: ip("10.0.0.2"), Domain: "b.example.com"}, // outside the zone: aside
		{ID: "c", IP: ip("10.0.0.3"), Domain: "c.weave.local"},
		{ID: "d", IP: ip("10.0.0.4"), Domain: "d.weave.local"},  // over max_records: aside
		{ID: "e", IP: ip("10.0.0.5"), Domain: "e..weave.local"}, // not a name: skipped
	}
	b, err := EncodeSnapshot(recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSnapshot(b)
	if err != nil || len(back) != 5 {
		t.Fatalf("decode: %v %v", back, err)
	}
	if aside, skipped := d.Replace(back); aside != 2 || skipped != 1 || d.Len() != 2 {
		t.Fatalf("replace: aside %d, skipped %d, len %d", aside, skipped, d.Len())
	}
	if d.ix.lookup("old.weave.local.") != nil || d.ix.lookup("a.weave.local.") == nil || d.ix.lookup("c.weave.local.") == nil {
		t.Fatal("index not rebuilt")
	}
	if _, err := DecodeSnapshot([]byte(`{"version":2}`)); err == nil {
		t.Fatal("version 2 accepted")
	}
}

// TestOwnership: the first writer of a record owns it; another owner's
// write of the same record changes nothing (ErrOwned), each owner deletes
// only its own, and a name answers the union of its records.
func TestOwnership(t *testing.T) {
	d := NewDB([]string{"weave.local."}, 100, 0)
	a := ip("10.32.0.7")
	dock := Record{ID: "c1", IP: a, Domain: "web.weave.local", Owner: "docker"}
	if _, _, err := d.Put(dock); err != nil {
		t.Fatal(err)
	}
	got, created, err := d.Put(Record{ID: "c1", IP: a, Domain: "web.weave.local", TTL: 9})
	if !errors.Is(err, ErrOwned) || created || got.Owner != "docker" || got.TTL != 0 {
		t.Fatalf("API write of the updater's record: %+v %v %v", got, created, err)
	}
	// an API record under the same identifier but another address: the union
	if _, _, err := d.Put(Record{ID: "c1", IP: ip("10.32.0.8"), Domain: "web.weave.local"}); err != nil {
		t.Fatal(err)
	}
	if e := d.ix.lookup("web.weave.local."); e == nil || len(e.a) != 2 {
		t.Fatalf("web answers %+v, want both owners' addresses", e)
	}
	if gone := d.DeleteOwned("c1", "", nil); len(gone) != 1 || gone[0].IP.String() != "10.32.0.8" {
		t.Fatalf("the API's delete removed %+v, want only its own record", gone)
	}
	if _, _, err := d.Put(Record{ID: "c1", IP: a, Domain: "web.weave.local", Owner: "docker"}); err != nil {
		t.Fatalf("the owner's own write: %v", err)
	}
	if _, _, err := d.Put(Record{ID: "x", IP: a, Domain: "ext.weave.local"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Put(Record{ID: "x", IP: a, Domain: "ext.weave.local", Owner: "docker"}); !errors.Is(err, ErrOwned) {
		t.Fatalf("the updater took over an API record: %v", err)
	}
	if gone := d.DeleteOwned("x", "docker", nil); len(gone) != 0 {
		t.Fatalf("the updater's delete removed an API record: %+v", gone)
	}
}

// TestTTLMergeRule: one address of a name held by two identifiers is
// served with the lower TTL as served, 0 standing for the Corefile's ttl.
func TestTTLMergeRule(t *testing.T) {
	for _, tc := range []struct{ a, b, want uint32 }{
		{0, 5, 5},    // explicit 5 beats the ttl of 30
		{5, 0, 5},    // in either order
		{0, 60, 0},   // the ttl of 30 beats an explicit 60
		{60, 0, 0},   // in either order
		{20, 10, 10}, // two explicit ones: the lower
	} {
		d := NewDB([]string{"weave.local."}, 100, 30)
		for _, r := range []Record{{ID: "a", IP: ip("10.32.0.1"), Domain: "web.weave.local", TTL: tc.a}, {ID: "b", IP: ip("10.32.0.1"), Domain: "web.weave.local", TTL: tc.b}} {
			if _, _, err := d.Put(r); err != nil {
				t.Fatal(err)
			}
		}
		if got := d.Lookup("web.weave.local.").ttlA[0]; got != tc.want {
			t.Errorf("TTLs %d and %d: merged %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestAsideKeptAndRestored: records outside the zones (a zone typo) are
// kept aside, not served, written to the snapshot, and come back when the
// zones hold them again; a delete of their identifier removes them too.
func TestAsideKeptAndRestored(t *testing.T) {
	good := NewDB([]string{"weave.local."}, 10, 0)
	for _, r := range []Record{{ID: "a", IP: ip("10.0.0.1"), Domain: "a.weave.local"}, {ID: "b", IP: ip("10.0.0.2"), Domain: "b.weave.local"}, {ID: "c", IP: ip("10.0.0.3"), Domain: "c.weave.local"}} {
		if _, _, err := good.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	recs, aside, _ := good.All()
	typo := NewDB([]string{"weave.lcoal."}, 10, 0)
	if n, skipped := typo.Replace(append(recs, aside...)); n != 3 || skipped != 0 || typo.Len() != 0 {
		t.Fatalf("zone typo: aside %d, skipped %d, served %d", n, skipped, typo.Len())
	}
	typo.DeleteID("c")
	recs, aside, _ = typo.All()
	b, err := EncodeSnapshot(recs, aside)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	fixed := NewDB([]string{"weave.local."}, 10, 0)
	if n, _ := fixed.Replace(back); n != 0 || fixed.Len() != 2 || fixed.Lookup("a.weave.local.") == nil || fixed.Lookup("c.weave.local.") != nil {
		t.Fatalf("zones back: %d aside, %v served", n, fixed.Records(""))
	}
}
