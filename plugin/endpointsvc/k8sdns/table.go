package k8sdns

import (
	"bytes"
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/pkg/pmap"
)

// Table is the immutable table ServeDNS reads. It is built from a Cluster
// by Build, or from another table and a Patch by Patched, which copies only
// what the patch touches (its maps are persistent: pmap), and it is never
// changed afterwards.
type Table struct {
	namespaces map[string]struct{}         // the namespaces that exist; replaced whole when they change
	names      *pmap.Map[Key, *entry]      // a Service, or the slices labelled with a name no Service has
	rev        *pmap.Map[[16]byte, refs]   // address (IPv4 v4-mapped) → what it is: PTR
	pods       *pmap.Map[[16]byte, podNSs] // pods verified: address (IPv4 v4-mapped) → its Pods' namespaces
	imports    *pmap.Map[Key, *entry]      // multicluster: a ServiceImport, or the slices labelled with a name none has; keys with Import
	ext        *pmap.Map[string, []Key]    // external IP (as written) → the Services that have it (k8s_external's PTR), in key order

	services  int // entries with a Service
	endpoints int // ready endpoints of those entries' slices
	conflicts int // headless Services with more than one CNAME candidate
	nimports  int // entries with a ServiceImport

	origin string // Cluster.Origin of the cluster or patch it was made of
}

// Key names a Service, and the slices labelled with its name; with
// Import, a ServiceImport and the slices labelled with its name
// (multicluster.kubernetes.io/service-name), which answer in the
// multicluster zones only.
type Key struct {
	Namespace, Name string
	Import          bool
}

// Compare orders keys by namespace, then name, a Service's before a
// ServiceImport's.
func (k Key) Compare(o Key) int {
	c := feed.CompareNames(k.Namespace, k.Name, o.Namespace, o.Name)
	if c != 0 || k.Import == o.Import {
		return c
	}
	if k.Import {
		return 1
	}
	return -1
}

func (k Key) compare(o Key) int { return k.Compare(o) }

// compareAddr orders addresses (16 bytes) bytewise.
func compareAddr(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) }

// entry is what one name holds: the Service (nil when only slices carry
// the name: their addresses still have PTR records, as the kubernetes
// plugin's endpoint index has them) and its slices, by slice name.
type entry struct {
	k      *Key // the name; the same pointer in every entry of it a patch makes (the reverse refs hold it)
	svc    *Service
	slices []*Slice

	// A headless Service's own name, precomputed: its ready IP addresses,
	// distinct and sorted, packed by family (4 and 16 bytes each), so that
	// A and AAAA cost no work per endpoint; fqdn is the first of its ready
	// FQDN addresses, the one CNAME it answers when it has no IP.
	v4, v6 []byte
	fqdn   string

	ready    int  // ready endpoints of its slices
	conflict bool // more than one CNAME candidate: several FQDNs, or FQDNs beside IPs
}

// ref is what an address is: a cluster IP of the Service of name k
// (slice clusterIP), or an address of endpoint ep of the slice number
// slice of k's entry. It names the entry rather than pointing at it, so
// that a patch that replaces an entry rewrites only the refs that
// changed: a readiness flip in a slice of ten endpoints one address, not
// ten. Invariant: every ref in a table's reverse index resolves in that
// table's names (patchRev keeps it). 16 bytes: the reverse index holds one
// per address.
type ref struct {
	k         *Key
	slice, ep uint32
}

const clusterIP = ^uint32(0)

// entryOf is the entry r is in.
func (t *Table) entryOf(r ref) *entry {
	e, _ := t.names.Get(*r.k)
	return e
}

// refSvc is the Service of a cluster IP's ref.
func (t *Table) refSvc(r ref) *Service { return t.entryOf(r).svc }

// refSlice is the slice of an endpoint's ref.
func (t *Table) refSlice(r ref) *Slice { return t.entryOf(r).slices[r.slice] }

// refs are the refs of one address, in sortRefs's order: the first
// inline (most addresses have one), any others in more.
type refs struct {
	first ref
	more  *[]ref
}

func packRefs(rs []ref) refs {
	p := refs{first: rs[0]}
	if len(rs) > 1 {
		more := slices.Clone(rs[1:])
		p.more = &more
	}
	return p
}

// list returns the refs as a slice (a new one when there are several).
func (p refs) list() []ref {
	if p.more == nil {
		return []ref{p.first}
	}
	return append([]ref{p.first}, *p.more...)
}

// appendTo appends the refs to dst.
func (p refs) appendTo(dst []ref) []ref {
	dst = append(dst, p.first)
	if p.more != nil {
		dst = append(dst, *p.more...)
	}
	return dst
}

// Build makes the table of a cluster.
func Build(c *Cluster) *Table {
	t := &Table{namespaces: namespaceSet(c.Namespaces), origin: c.Origin}
	bySvc := make(map[Key][]*Slice)
	for _, sl := range c.Slices {
		if sl.Service != "" {
			k := Key{Namespace: sl.Namespace, Name: sl.Service}
			bySvc[k] = append(bySvc[k], sl)
		}
	}
	keys := make([]Key, 0, len(c.Services)+len(bySvc))
	entries := make([]*entry, 0, len(c.Services)+len(bySvc))
	held := make([]Key, 0, cap(keys)) // the entries' names (pmap.Of sorts keys in place); never grown
	add := func(k Key, svc *Service, sls []*Slice) {
		keys, held = append(keys, k), append(held, k)
		e := newEntry(&held[len(held)-1], svc, sls)
		entries = append(entries, e)
		t.count(e, 1)
	}
	seen := make(map[Key]bool, len(c.Services))
	for _, s := range c.Services {
		k := Key{Namespace: s.Namespace, Name: s.Name}
		if seen[k] {
			continue // the first of a name wins (a valid cluster has one)
		}
		seen[k] = true
		add(k, s, bySvc[k])
		delete(bySvc, k)
	}
	for k, sls := range bySvc {
		add(k, nil, sls)
	}
	refs := 0
	for _, e := range entries {
		e.eachRef(func([16]byte, ref) { refs++ })
	}
	addrs := make([]addrRef, 0, refs)
	for _, e := range entries {
		e.eachRef(func(a [16]byte, r ref) { addrs = append(addrs, addrRef{a, r}) })
	}
	t.names = pmap.Of(Key.compare, keys, entries)
	t.ext = extMap(extIndex(entries))
	t.rev = reverseIndex(addrs)
	t.pods = podIndex(c.Pods)
	t.imports = t.buildImports(c)
	return t
}

// buildImports makes the multicluster entries: each ServiceImport with
// the slices labelled with its name, and the labels no ServiceImport has.
// They put nothing in the reverse index (the kubernetes plugin answers
// PTR from Services and the slices' kubernetes.io/service-name only).
func (t *Table) buildImports(c *Cluster) *pmap.Map[Key, *entry] {
	byImport := make(map[Key][]*Slice)
	for _, sl := range c.Slices {
		if sl.Import != "" {
			k := Key{Namespace: sl.Namespace, Name: sl.Import, Import: true}
			byImport[k] = append(byImport[k], sl)
		}
	}
	keys := make([]Key, 0, len(c.Imports)+len(byImport))
	entries := make([]*entry, 0, len(c.Imports)+len(byImport))
	seen := make(map[Key]bool, len(c.Imports))
	for _, s := range c.Imports {
		k := Key{Namespace: s.Namespace, Name: s.Name, Import: true}
		if seen[k] {
			continue
		}
		seen[k] = true
		keys, entries = append(keys, k), append(entries, newEntry(&k, s, byImport[k]))
		t.nimports++
		delete(byImport, k)
	}
	for k, sls := range byImport {
		keys, entries = append(keys, k), append(entries, newEntry(&k, nil, sls))
	}
	return pmap.Of(Key.compare, keys, entries)
}

// addrRef is an address and one of its refs.
type addrRef struct {
	a [16]byte
	r ref
}

// reverseIndex makes the reverse index of every address's refs.
func reverseIndex(addrs []addrRef) *pmap.Map[[16]byte, refs] {
	slices.SortFunc(addrs, func(x, y addrRef) int { return cmp.Or(compareAddr(x.a, y.a), compareRef(x.r, y.r)) })
	distinct := 0
	for i := range addrs {
		if i == 0 || addrs[i].a != addrs[i-1].a {
			distinct++
		}
	}
	keys, vals := make([][16]byte, 0, distinct), make([]refs, 0, distinct)
	for i := 0; i < len(addrs); {
		j := i + 1
		for j < len(addrs) && addrs[j].a == addrs[i].a {
			j++
		}
		p := refs{first: addrs[i].r}
		if j > i+1 {
			more := make([]ref, 0, j-i-1)
			for _, x := range addrs[i+1 : j] {
				more = append(more, x.r)
			}
			p.more = &more
		}
		keys, vals = append(keys, addrs[i].a), append(vals, p)
		i = j
	}
	return pmap.FromSorted(compareAddr, keys, vals)
}

func namespaceSet(nss []string) map[string]struct{} {
	m := make(map[string]struct{}, len(nss))
	for _, ns := range nss {
		m[ns] = struct{}{}
	}
	return m
}

// count adds entry e's figures (sign 1) or takes them away (-1).
func (t *Table) count(e *entry, sign int) {
	if e.svc == nil {
		return
	}
	t.services += sign
	t.endpoints += sign * e.ready
	if e.conflict {
		t.conflicts += sign
	}
}

// Services, Endpoints and Conflicts are the table's figures: Services,
// their ready endpoints, headless Services with more than one CNAME
// candidate (they answer one: the first FQDN, and none beside IPs).
func (t *Table) Services() int  { return t.services }
func (t *Table) Endpoints() int { return t.endpoints }
func (t *Table) Conflicts() int { return t.conflicts }

// Imports is the number of ServiceImports (multicluster).
func (t *Table) Imports() int { return t.nimports }

// newEntry makes the entry of name k, Service svc (nil: none) and its
// slices.
func newEntry(k *Key, svc *Service, sls []*Slice) *entry {
	e := &entry{k: k, svc: svc, slices: slices.Clone(sls)}
	slices.SortFunc(e.slices, func(a, b *Slice) int { return strings.Compare(a.Name, b.Name) })
	var ips []netip.Addr
	var fqdns []string
	if svc != nil && svc.Kind == Headless {
		n := 0
		for _, sl := range e.slices {
			n += len(sl.ips)
		}
		ips = make([]netip.Addr, 0, n) // every address at most: no growth by doubling
	}
	for _, sl := range e.slices {
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			if !ep.IsReady() {
				continue
			}
			e.ready++
			for j := range ep.Len() {
				switch {
				case sl.Type == FQDN:
					fqdns = append(fqdns, sl.FQDNAddr(i, j))
				case svc != nil && svc.Kind == Headless:
					ips = append(ips, sl.Addr(i, j))
				}
			}
		}
	}
	if len(fqdns) > 0 {
		slices.Sort(fqdns)
		fqdns = slices.Compact(fqdns)
		e.fqdn = fqdns[0]
	}
	e.conflict = svc != nil && svc.Kind == Headless && (len(fqdns) > 1 || (len(fqdns) > 0 && len(ips) > 0))
	e.v4, e.v6 = pack(ips)
	return e
}

// pack sorts and deduplicates ips and packs them by family.
func pack(ips []netip.Addr) (v4, v6 []byte) {
	if len(ips) == 0 {
		return nil, nil
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	n4 := 0
	for n4 < len(ips) && ips[n4].Is4() { // IPv4 sorts first
		n4++
	}
	buf := make([]byte, 0, 4*n4+16*(len(ips)-n4))
	for _, ip := range ips {
		buf = append(buf, ip.AsSlice()...)
	}
	return buf[: 4*n4 : 4*n4], buf[4*n4:]
}

// hasReady reports whether the entry's slices have a ready address.
func (e *entry) hasReady() bool { return len(e.v4) > 0 || len(e.v6) > 0 || e.fqdn != "" }

// eachRef calls f with every address the entry puts in the reverse
// index: the Service's cluster IPs, and every address of every ready
// endpoint of its IP slices.
func (e *entry) eachRef(f func([16]byte, ref)) {
	if e.svc != nil && e.svc.Kind == ClusterIP {
		for _, a := range e.svc.ClusterIPs {
			f(a.As16(), ref{k: e.k, slice: clusterIP})
		}
	}
	for si, sl := range e.slices {
		if sl.Type == FQDN {
			continue
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			if !ep.IsReady() {
				continue
			}
			for j := range ep.Len() {
				f(sl.ips[int(ep.first)+j], ref{k: e.k, slice: uint32(si), ep: uint32(i)})
			}
		}
	}
}

// sortRefs orders an address's refs: cluster IPs first, by Service; then
// endpoints by namespace, Service label, slice and endpoint (an entry's
// slices are in name order, so by slice number is by slice name). A table
// built whole and one patched order them alike.
func sortRefs(rs []ref) { slices.SortFunc(rs, compareRef) }

// compareRef is the order of sortRefs.
func compareRef(a, b ref) int {
	if (a.slice == clusterIP) != (b.slice == clusterIP) {
		if a.slice == clusterIP {
			return -1
		}
		return 1
	}
	c := feed.CompareNames(a.k.Namespace, a.k.Name, b.k.Namespace, b.k.Name)
	if c != 0 || a.slice == clusterIP {
		return c
	}
	return cmp.Or(cmp.Compare(a.slice, b.slice), cmp.Compare(a.ep, b.ep))
}

// key is the name of the entry.
func (e *entry) key() Key { return *e.k }
