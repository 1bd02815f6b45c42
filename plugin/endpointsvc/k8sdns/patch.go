package k8sdns

import (
	"cmp"
	"io"
	"slices"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"

	"github.com/meshdns/meshdns/plugin/pkg/pmap"
)

// Patch is a change to part of a source's cluster: the names whose
// Service or slices changed, each with its whole new content. Applying it
// costs work in proportion to those names, not to the cluster.
type Patch struct {
	Changes []Change // each name at most once
	// Namespaces replaces the namespace list when SetNamespaces.
	Namespaces    []string
	SetNamespaces bool
	// Pods are the pod index's changed addresses, each with its whole new
	// list of namespaces (none: gone), each address at most once.
	Pods []PodAddr
	// Origin is the patched table's Origin (Cluster.Origin).
	Origin string
	// Programmed are the API changes this patch brings into the table,
	// for the programming latency; not part of the table or its digest.
	Programmed []feed.Trigger

	// Whole returns the source's whole current cluster (for a table that
	// cannot be patched: none yet).
	Whole func() *Cluster
	// WriteSnapshot writes the source's whole current cluster in the
	// snapshot form (NewSnapshotWriter's); the snapshot writer calls it,
	// at most once a second, off the sync path.
	WriteSnapshot func(io.Writer) error
}

// Change is the new content of one name: its Service (nil: none) and the
// slices labelled with it. No Service and no slices: the name is gone.
// With Key.Import it is a ServiceImport's name: Service is the
// ServiceImport (as Cluster.Imports has it) and Slices are those labelled
// with its multicluster.kubernetes.io/service-name.
type Change struct {
	Key     Key
	Service *Service
	Slices  []*Slice
}

// Add adds a name's content (a record of a whole state) to the cluster:
// its Service or ServiceImport, and its slices - those of a
// ServiceImport's name that a Service's name holds too (labelled with
// both) once only, with that name.
func (c *Cluster) Add(ch Change) {
	switch {
	case ch.Key.Import:
		if ch.Service != nil {
			c.Imports = append(c.Imports, ch.Service)
		}
		c.Slices = append(c.Slices, importOnly(ch.Slices)...)
		return
	case ch.Service != nil:
		c.Services = append(c.Services, ch.Service)
	}
	c.Slices = append(c.Slices, ch.Slices...)
}

// Triggers implements feed.Triggered.
func (p *Patch) Triggers() []feed.Trigger { return p.Programmed }

// Len is the number of names the patch changes (pod addresses apart).
func (p *Patch) Len() int { return len(p.Changes) }

// Snapshot writes the source's whole state.
func (p *Patch) Snapshot(w io.Writer) error { return p.WriteSnapshot(w) }

// Patched returns a new table that is t with the patch applied. It copies
// the paths of the changed names in the persistent maps, and the reverse
// entries of the addresses whose refs changed; everything else is shared
// with t, which stays valid and unchanged for the readers that hold it.
func (t *Table) Patched(p *Patch) *Table {
	n := &Table{namespaces: t.namespaces, services: t.services, endpoints: t.endpoints, conflicts: t.conflicts, nimports: t.nimports, origin: p.Origin}
	if p.SetNamespaces {
		n.namespaces = namespaceSet(p.Namespaces)
	}
	names := t.names.Edit()
	rev := t.rev.Edit()
	var imports *pmap.Editor[Key, *entry] // made when a change needs it, as ext
	var ext *pmap.Editor[string, []Key]
	// one change's refs, old and new, reused (see patchRev): room for a
	// Service of a slice of ten endpoints or so without growing
	was, is := make([]addrRef, 0, 16), make([]addrRef, 0, 16)
	var rs []ref // one address's refs, reused
	for _, c := range p.Changes {
		if c.Key.Import {
			if imports == nil {
				imports = t.imports.Edit()
			}
			n.patchImport(imports, c)
			continue
		}
		var e, old *entry
		var had bool
		if c.Service != nil || len(c.Slices) > 0 {
			e = newEntry(nil, c.Service, c.Slices)
			old, had = names.Swap(c.Key, e)
		} else {
			old, had = names.Take(c.Key)
		}
		was, is = was[:0], is[:0]
		if had {
			n.count(old, -1)
			old.eachRef(func(a [16]byte, r ref) { was = append(was, addrRef{a, r}) })
		}
		if e != nil {
			if had {
				e.k = old.k // the refs that stay keep naming the new entry
			} else {
				k := c.Key
				e.k = &k
			}
			n.count(e, 1)
			e.eachRef(func(a [16]byte, r ref) { is = append(is, addrRef{a, r}) })
		}
		if hasExt(old) || hasExt(e) {
			if ext == nil {
				ext = t.ext.Edit()
			}
			patchExt(ext, c.Key, old, e)
		}
		rs = patchRev(rev, c.Key, was, is, rs)
	}
	n.names, n.rev, n.imports, n.ext = names.Map(), rev.Map(), t.imports, t.ext
	if imports != nil {
		n.imports = imports.Map()
	}
	if ext != nil {
		n.ext = ext.Map()
	}
	n.pods = patchPods(t.pods, p.Pods)
	return n
}

// patchRev moves name k in the reverse index from the refs its old entry
// had (was) to those its new one has (is). Only the addresses where they
// differ are rewritten: there k's old refs go and its new ones come, the
// others' stay, sorted by sortRefs as Build has them. A ref names its
// entry by name, slice and endpoint number, so one that is in both still
// resolves, in the new entry, to an endpoint with that address. rs is a
// buffer to reuse; patchRev returns it.
func patchRev(rev *pmap.Editor[[16]byte, refs], k Key, was, is []addrRef, rs []ref) []ref {
	byAddr := func(x, y addrRef) int { return cmp.Or(compareAddr(x.a, y.a), compareRef(x.r, y.r)) }
	slices.SortFunc(was, byAddr)
	slices.SortFunc(is, byAddr)
	for len(was) > 0 || len(is) > 0 {
		var a [16]byte
		switch {
		case len(was) == 0:
			a = is[0].a
		case len(is) == 0 || compareAddr(was[0].a, is[0].a) <= 0:
			a = was[0].a
		default:
			a = is[0].a
		}
		i, j := run(was, a), run(is, a)
		if !sameRefs(was[:i], is[:j]) {
			rs = rs[:0]
			if cur, ok := rev.Get(a); ok {
				rs = slices.DeleteFunc(cur.appendTo(rs), func(r ref) bool { return *r.k == k })
			}
			for _, m := range is[:j] {
				rs = append(rs, m.r)
			}
			if len(rs) == 0 {
				rev.Delete(a)
			} else {
				sortRefs(rs)
				rev.Set(a, packRefs(rs)) // copies rs
			}
		}
		was, is = was[i:], is[j:]
	}
	return rs
}

// run is the length of the prefix of xs at address a.
func run(xs []addrRef, a [16]byte) int {
	n := 0
	for n < len(xs) && xs[n].a == a {
		n++
	}
	return n
}

// sameRefs reports whether two runs of one name's refs at one address
// are the same refs.
func sameRefs(x, y []addrRef) bool {
	return slices.EqualFunc(x, y, func(a, b addrRef) bool { return a.r.slice == b.r.slice && a.r.ep == b.r.ep })
}

// patchImport sets (or deletes) a ServiceImport's entry, as buildImports
// makes it.
func (t *Table) patchImport(imports *pmap.Editor[Key, *entry], c Change) {
	if old, had := imports.Get(c.Key); had && old.svc != nil {
		t.nimports--
	}
	if c.Service == nil && len(c.Slices) == 0 {
		imports.Delete(c.Key)
		return
	}
	k := c.Key
	imports.Set(c.Key, newEntry(&k, c.Service, c.Slices))
	if c.Service != nil {
		t.nimports++
	}
}

// hasExt reports whether e (nil: none) has a Service with external IPs.
func hasExt(e *entry) bool { return e != nil && e.svc != nil && len(e.svc.ExternalIPs) > 0 }

// patchExt moves key k in the external IP index from the external IPs of
// its old entry (nil: none) to those of its new one (nil: gone).
func patchExt(ext *pmap.Editor[string, []Key], k Key, old, cur *entry) {
	var was, is []string
	if hasExt(old) {
		was = old.svc.ExternalIPs
	}
	if hasExt(cur) {
		is = cur.svc.ExternalIPs
	}
	for _, ip := range was {
		ks, _ := ext.Get(ip)
		ks = slices.DeleteFunc(slices.Clone(ks), func(x Key) bool { return x == k })
		if len(ks) == 0 {
			ext.Delete(ip)
			continue
		}
		ext.Set(ip, ks)
	}
	for _, ip := range is {
		ks, _ := ext.Get(ip)
		if i, found := slices.BinarySearchFunc(ks, k, Key.Compare); !found {
			ext.Set(ip, slices.Insert(slices.Clone(ks), i, k))
		}
	}
}
