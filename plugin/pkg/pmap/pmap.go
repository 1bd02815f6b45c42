// Package pmap is a persistent (immutable) ordered map: a B+ tree whose
// updates copy only the nodes on the path to the changed entry (and of
// those, when only a value changes, the values and children: the copies
// share their keys with the old nodes), so that a
// new version of a map of any size costs a few small allocations and
// every older version stays valid and unchanged for the readers that hold
// it. The tables of endpointsvc keep their names and their reverse index
// in it: a patch that changes one Service costs work in proportion to that
// Service, not to the cluster.
//
// Nodes hold up to 32 entries (leaves) or children (inner nodes) in arrays
// sized to what they hold, so that a map costs little more than its
// entries: ~45 bytes an entry of a 16-byte key and a 24-byte value.
//
// A Map is safe for concurrent readers. An Editor batches changes: the
// nodes it copied are its own until Map ends the batch, so that a batch of
// k changes copies each node once rather than once per change.
package pmap

import (
	"iter"
	"slices"
	"sort"
)

const (
	maxEntries = 32 // a node's entries or children, at most
	minEntries = 8  // a node with fewer is merged with a sibling when they fit in one
)

// Map is an immutable ordered map. The zero value is not usable: make one
// with New. Its methods never change it.
type Map[K any, V any] struct {
	root *node[K, V]
	n    int
	cmp  func(a, b K) int
}

// node is a leaf (kids nil: keys and vals hold its entries) or an inner
// node (keys[i] is the smallest key below kids[i]). Every node but the root
// has at least one entry or child.
type node[K any, V any] struct {
	edit *token // the Editor that may change this node in place; nil: shared
	keys []K
	vals []V
	kids []*node[K, V]
	// sharedKeys: keys is the array of the node this one copies (a batch
	// copies a node's values or children, and its keys only once it
	// changes them: an update of a value copies no key)
	sharedKeys bool
}

// token identifies one batch of an Editor.
type token struct{ _ byte }

// New returns an empty map ordered by cmp (negative: a sorts before b).
func New[K any, V any](cmp func(a, b K) int) *Map[K, V] {
	return &Map[K, V]{root: &node[K, V]{}, cmp: cmp}
}

// Len is the number of entries.
func (m *Map[K, V]) Len() int { return m.n }

// child returns the index of the child of inner node n that holds k.
func (m *Map[K, V]) child(n *node[K, V], k K) int {
	i, _ := slices.BinarySearchFunc(n.keys, k, m.cmp)
	if i < len(n.keys) && m.cmp(n.keys[i], k) == 0 {
		return i
	}
	return max(i-1, 0)
}

// Get returns the value of k and whether k is present.
func (m *Map[K, V]) Get(k K) (V, bool) {
	n := m.root
	for n.kids != nil {
		n = n.kids[m.child(n, k)]
	}
	if i, ok := slices.BinarySearchFunc(n.keys, k, m.cmp); ok {
		return n.vals[i], true
	}
	var zero V
	return zero, false
}

// All yields every entry once, in key order.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { m.root.each(yield) }
}

func (n *node[K, V]) each(yield func(K, V) bool) bool {
	if n.kids == nil {
		for i := range n.keys {
			if !yield(n.keys[i], n.vals[i]) {
				return false
			}
		}
		return true
	}
	for _, c := range n.kids {
		if !c.each(yield) {
			return false
		}
	}
	return true
}

// Set returns a map that is m with k set to v.
func (m *Map[K, V]) Set(k K, v V) *Map[K, V] {
	e := m.Edit()
	e.Set(k, v)
	return e.Map()
}

// Delete returns a map that is m without k.
func (m *Map[K, V]) Delete(k K) *Map[K, V] {
	e := m.Edit()
	e.Delete(k)
	return e.Map()
}

// Editor makes a new version of a map from a batch of changes.
type Editor[K any, V any] struct {
	m     Map[K, V]
	tok   *token
	owned []*node[K, V] // the nodes this batch made: they may grow with room, trimmed by Map
	// room for owned: a change copies a path of a few nodes, so a batch
	// of one change appends to owned without allocating
	ownedRoom [8]*node[K, V]
}

// Edit starts a batch of changes to m; m itself is not changed.
func (m *Map[K, V]) Edit() *Editor[K, V] {
	e := &Editor[K, V]{m: *m, tok: new(token)}
	e.owned = e.ownedRoom[:0]
	return e
}

// Map returns the map with the changes so far. The editor may go on: its
// later changes copy again whatever this map shares. The nodes of the
// batch lose the room they grew with: a map's arrays hold what they hold
// (append's slack would cost a third of the map).
func (e *Editor[K, V]) Map() *Map[K, V] {
	for _, n := range e.owned {
		n.keys = slices.Clip(trim(n.keys))
		if n.kids != nil {
			n.kids = slices.Clip(trim(n.kids))
		} else {
			n.vals = slices.Clip(trim(n.vals))
		}
	}
	e.owned = e.owned[:0]
	m := e.m
	e.tok = new(token)
	return &m
}

// trim copies a with no room left over, when it has some.
func trim[T any](a []T) []T {
	if len(a) == cap(a) {
		return a
	}
	return append(make([]T, 0, len(a)), a...)
}

// Len is the number of entries of the map being edited.
func (e *Editor[K, V]) Len() int { return e.m.n }

// Get reads the map being edited.
func (e *Editor[K, V]) Get(k K) (V, bool) { return e.m.Get(k) }

// own returns n if this batch may change it, else a copy that it may:
// the values or children copied, with room for extra more, the keys
// shared with n until ownKeys.
func (e *Editor[K, V]) own(n *node[K, V], extra int) *node[K, V] {
	if n.edit == e.tok {
		return n
	}
	c := e.made(&node[K, V]{keys: n.keys, sharedKeys: true})
	if n.kids != nil {
		c.kids = make([]*node[K, V], len(n.kids), len(n.kids)+extra)
		copy(c.kids, n.kids)
	} else {
		c.vals = make([]V, len(n.vals), len(n.vals)+extra)
		copy(c.vals, n.vals)
	}
	return c
}

// ownKeys makes the keys of n (this batch's) its own before they change,
// with room for extra more.
func (e *Editor[K, V]) ownKeys(n *node[K, V], extra int) {
	if n.sharedKeys {
		n.keys = append(make([]K, 0, len(n.keys)+extra), n.keys...)
		n.sharedKeys = false
	}
}

// setKey sets key i of n (this batch's) to k, unless it is k already.
func (e *Editor[K, V]) setKey(n *node[K, V], i int, k K) {
	if e.m.cmp(n.keys[i], k) != 0 {
		e.ownKeys(n, 0)
		n.keys[i] = k
	}
}

// made marks n as this batch's.
func (e *Editor[K, V]) made(n *node[K, V]) *node[K, V] {
	n.edit = e.tok
	e.owned = append(e.owned, n)
	return n
}

// Set sets k to v.
func (e *Editor[K, V]) Set(k K, v V) { e.Swap(k, v) }

// Swap sets k to v and returns the value it had, if it was there: Get
// and Set in one descent.
func (e *Editor[K, V]) Swap(k K, v V) (old V, had bool) {
	n, right, old, had := e.set(e.m.root, k, v)
	if right != nil { // the root split: a new root above the two halves
		n = e.made(&node[K, V]{keys: []K{n.keys[0], right.keys[0]}, kids: []*node[K, V]{n, right}})
	}
	e.m.root = n
	if !had {
		e.m.n++
	}
	return old, had
}

// set sets k to v below n; it returns n's new version, when that
// overflowed the right half it split off, and k's old value if it had one.
func (e *Editor[K, V]) set(n *node[K, V], k K, v V) (*node[K, V], *node[K, V], V, bool) {
	if n.kids == nil {
		i, found := slices.BinarySearchFunc(n.keys, k, e.m.cmp)
		if found {
			n = e.own(n, 0)
			old := n.vals[i]
			n.vals[i] = v
			return n, nil, old, true
		}
		n = e.own(n, 1)
		e.ownKeys(n, 1)
		n.keys, n.vals = slices.Insert(n.keys, i, k), slices.Insert(n.vals, i, v)
		left, right := e.split(n)
		var zero V
		return left, right, zero, false
	}
	i := e.m.child(n, k)
	c, right, old, had := e.set(n.kids[i], k, v)
	extra := 0
	if right != nil {
		extra = 1
	}
	n = e.own(n, extra)
	n.kids[i] = c
	e.setKey(n, i, c.keys[0])
	if right != nil {
		e.ownKeys(n, 1)
		n.keys, n.kids = slices.Insert(n.keys, i+1, right.keys[0]), slices.Insert(n.kids, i+1, right)
	}
	left, r := e.split(n)
	return left, r, old, had
}

// split halves a node this batch owns when it holds more than maxEntries,
// returning both halves (the right one nil when it does not).
func (e *Editor[K, V]) split(n *node[K, V]) (*node[K, V], *node[K, V]) {
	if len(n.keys) <= maxEntries {
		return n, nil
	}
	h := len(n.keys) / 2
	left := e.made(&node[K, V]{keys: slices.Clone(n.keys[:h])})
	right := e.made(&node[K, V]{keys: slices.Clone(n.keys[h:])})
	if n.kids != nil {
		left.kids, right.kids = slices.Clone(n.kids[:h]), slices.Clone(n.kids[h:])
	} else {
		left.vals, right.vals = slices.Clone(n.vals[:h]), slices.Clone(n.vals[h:])
	}
	return left, right
}

// Delete removes k and reports whether it was there.
func (e *Editor[K, V]) Delete(k K) bool {
	_, had := e.Take(k)
	return had
}

// Take removes k and returns the value it had, if it was there.
func (e *Editor[K, V]) Take(k K) (old V, had bool) {
	n, old, ok := e.del(e.m.root, k)
	if !ok {
		return old, false
	}
	for n.kids != nil && len(n.kids) == 1 { // a root with one child: the child is the root
		n = n.kids[0]
	}
	if n.kids != nil && len(n.kids) == 0 {
		n = &node[K, V]{}
	}
	e.m.root = n
	e.m.n--
	return old, true
}

// del removes k below n and returns n's new version, which may be left
// with no entry (its parent drops it) or few (its parent merges it), and
// k's value.
func (e *Editor[K, V]) del(n *node[K, V], k K) (*node[K, V], V, bool) {
	var old V
	if n.kids == nil {
		i, found := slices.BinarySearchFunc(n.keys, k, e.m.cmp)
		if !found {
			return n, old, false
		}
		old = n.vals[i]
		n = e.own(n, 0)
		e.ownKeys(n, 0)
		n.keys, n.vals = slices.Delete(n.keys, i, i+1), slices.Delete(n.vals, i, i+1)
		return n, old, true
	}
	i := e.m.child(n, k)
	c, old, ok := e.del(n.kids[i], k)
	if !ok {
		return n, old, false
	}
	n = e.own(n, 0)
	if len(c.keys) == 0 {
		e.ownKeys(n, 0)
		n.keys, n.kids = slices.Delete(n.keys, i, i+1), slices.Delete(n.kids, i, i+1)
		return n, old, true
	}
	n.kids[i] = c
	e.setKey(n, i, c.keys[0])
	if len(c.keys) < minEntries {
		e.merge(n, i)
	}
	return n, old, true
}

// merge joins child i of n (owned by this batch) with a neighbour when
// both fit in one node.
func (e *Editor[K, V]) merge(n *node[K, V], i int) {
	j := i + 1 // the right neighbour, else the left one
	if j == len(n.kids) {
		i, j = i-1, i
	}
	if i < 0 || len(n.kids[i].keys)+len(n.kids[j].keys) > maxEntries {
		return
	}
	a, b := n.kids[i], n.kids[j]
	m := e.made(&node[K, V]{keys: slices.Concat(a.keys, b.keys)})
	if a.kids != nil {
		m.kids = slices.Concat(a.kids, b.kids)
	} else {
		m.vals = slices.Concat(a.vals, b.vals)
	}
	n.kids[i] = m
	e.ownKeys(n, 0)
	n.keys, n.kids = slices.Delete(n.keys, j, j+1), slices.Delete(n.kids, j, j+1)
}

// FromSorted returns the map of keys and vals (parallel; keys in cmp's
// order, each once), built bottom up: full nodes, no copy but the nodes'
// own arrays - what a table built whole needs, rather than one insert per
// entry.
func FromSorted[K any, V any](cmp func(a, b K) int, keys []K, vals []V) *Map[K, V] {
	m := &Map[K, V]{root: &node[K, V]{}, n: len(keys), cmp: cmp}
	if len(keys) == 0 {
		return m
	}
	var level []*node[K, V]
	for _, r := range chunks(len(keys)) {
		level = append(level, &node[K, V]{keys: slices.Clone(keys[r[0]:r[1]]), vals: slices.Clone(vals[r[0]:r[1]])})
	}
	for len(level) > 1 {
		var up []*node[K, V]
		for _, r := range chunks(len(level)) {
			n := &node[K, V]{keys: make([]K, 0, r[1]-r[0]), kids: slices.Clone(level[r[0]:r[1]])}
			for _, c := range n.kids {
				n.keys = append(n.keys, c.keys[0])
			}
			up = append(up, n)
		}
		level = up
	}
	m.root = level[0]
	return m
}

// chunks cuts n items into runs of at most maxEntries, as even as can be
// (so that none falls below minEntries when there is more than one).
func chunks(n int) [][2]int {
	count := (n + maxEntries - 1) / maxEntries
	out := make([][2]int, 0, count)
	for i, start := 0, 0; i < count; i++ {
		end := start + (n-start)/(count-i)
		out = append(out, [2]int{start, end})
		start = end
	}
	return out
}

// Of returns the map of keys and vals (parallel, in any order, each key
// once), built as FromSorted builds it; it sorts them in place.
func Of[K any, V any](cmp func(a, b K) int, keys []K, vals []V) *Map[K, V] {
	sort.Sort(pairs[K, V]{keys, vals, cmp})
	return FromSorted(cmp, keys, vals)
}

// pairs sorts parallel keys and values in place.
type pairs[K any, V any] struct {
	keys []K
	vals []V
	cmp  func(a, b K) int
}

func (p pairs[K, V]) Len() int           { return len(p.keys) }
func (p pairs[K, V]) Less(i, j int) bool { return p.cmp(p.keys[i], p.keys[j]) < 0 }
func (p pairs[K, V]) Swap(i, j int) {
	p.keys[i], p.keys[j] = p.keys[j], p.keys[i]
	p.vals[i], p.vals[j] = p.vals[j], p.vals[i]
}
