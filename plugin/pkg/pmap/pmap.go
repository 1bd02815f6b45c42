// Package pmap is a persistent (immutable) hash map: a hash array mapped
// trie whose updates copy only the nodes on the path to the changed entry,
// so that a new version of a map of any size costs a few small
// allocations and every older version stays valid and unchanged for the
// readers that hold it. The tables of endpointsvc keep their services and
// their reverse index in it: a patch that changes one Service costs work
// in proportion to that Service, not to the cluster.
//
// A Map is safe for concurrent readers. An Editor batches changes: the
// nodes it copied are its own until Map ends the batch, so that a batch of
// k changes copies each node once rather than once per change.
package pmap

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

const (
	bitsPerLevel = 5
	fanout       = 1 << bitsPerLevel
	// maxShift is the shift of the last level that branches on the hash;
	// below it, keys whose 64-bit hashes are equal share a collision node.
	maxShift = 60
)

// Map is an immutable hash map. The zero value is not usable: make one
// with New. Its methods never change it.
type Map[K comparable, V any] struct {
	root *node[K, V]
	n    int
	seed maphash.Seed
	test func(K) uint64 // tests only: a hash that collides
}

// node is a trie node: bitmap has a bit per occupied one of fanout
// positions, and slots holds them in order (popcount compression). A node
// at a shift past maxShift is a collision node: no bitmap, slots are
// leaves with equal hashes, searched by key.
type node[K comparable, V any] struct {
	bitmap uint32
	edit   *token // the Editor that may change this node in place; nil: shared
	slots  []slot[K, V]
}

// slot is a sub-trie (child not nil) or an entry.
type slot[K comparable, V any] struct {
	child *node[K, V]
	key   K
	val   V
}

// token identifies one batch of an Editor.
type token struct{ _ byte }

// New returns an empty map.
func New[K comparable, V any]() *Map[K, V] {
	return &Map[K, V]{root: &node[K, V]{}, seed: maphash.MakeSeed()}
}

// Len is the number of entries.
func (m *Map[K, V]) Len() int { return m.n }

func (m *Map[K, V]) hash(k K) uint64 {
	if m.test != nil {
		return m.test(k)
	}
	return maphash.Comparable(m.seed, k)
}

// Get returns the value of k and whether k is present.
func (m *Map[K, V]) Get(k K) (V, bool) {
	h := m.hash(k)
	n := m.root
	for shift := uint(0); ; shift += bitsPerLevel {
		if shift > maxShift {
			for i := range n.slots {
				if n.slots[i].key == k {
					return n.slots[i].val, true
				}
			}
			var zero V
			return zero, false
		}
		bit := uint32(1) << ((h >> shift) & (fanout - 1))
		if n.bitmap&bit == 0 {
			var zero V
			return zero, false
		}
		s := &n.slots[bits.OnesCount32(n.bitmap&(bit-1))]
		if s.child == nil {
			if s.key == k {
				return s.val, true
			}
			var zero V
			return zero, false
		}
		n = s.child
	}
}

// All yields every entry once, in an order fixed by the map's hashes.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { m.root.each(yield) }
}

func (n *node[K, V]) each(yield func(K, V) bool) bool {
	for i := range n.slots {
		s := &n.slots[i]
		if s.child != nil {
			if !s.child.each(yield) {
				return false
			}
		} else if !yield(s.key, s.val) {
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
type Editor[K comparable, V any] struct {
	m   Map[K, V]
	tok *token
}

// Edit starts a batch of changes to m; m itself is not changed.
func (m *Map[K, V]) Edit() *Editor[K, V] {
	return &Editor[K, V]{m: *m, tok: new(token)}
}

// Map returns the map with the changes so far. The editor may go on: its
// later changes copy again whatever this map shares.
func (e *Editor[K, V]) Map() *Map[K, V] {
	m := e.m
	e.tok = new(token)
	return &m
}

// Len is the number of entries of the map being edited.
func (e *Editor[K, V]) Len() int { return e.m.n }

// Get reads the map being edited.
func (e *Editor[K, V]) Get(k K) (V, bool) { return e.m.Get(k) }

// own returns n if this batch may change it, else a copy that it may.
func (e *Editor[K, V]) own(n *node[K, V], extra int) *node[K, V] {
	if n.edit == e.tok {
		return n
	}
	c := &node[K, V]{bitmap: n.bitmap, edit: e.tok, slots: make([]slot[K, V], len(n.slots), len(n.slots)+extra)}
	copy(c.slots, n.slots)
	return c
}

// Set sets k to v.
func (e *Editor[K, V]) Set(k K, v V) {
	h := e.m.hash(k)
	e.m.root = e.set(e.m.root, 0, h, k, v)
}

func (e *Editor[K, V]) set(n *node[K, V], shift uint, h uint64, k K, v V) *node[K, V] {
	if shift > maxShift {
		for i := range n.slots {
			if n.slots[i].key == k {
				n = e.own(n, 0)
				n.slots[i].val = v
				return n
			}
		}
		n = e.own(n, 1)
		n.slots = append(n.slots, slot[K, V]{key: k, val: v})
		e.m.n++
		return n
	}
	bit := uint32(1) << ((h >> shift) & (fanout - 1))
	i := bits.OnesCount32(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		n = e.own(n, 1)
		n.slots = append(n.slots, slot[K, V]{})
		copy(n.slots[i+1:], n.slots[i:])
		n.slots[i] = slot[K, V]{key: k, val: v}
		n.bitmap |= bit
		e.m.n++
		return n
	}
	s := n.slots[i]
	switch {
	case s.child != nil:
		child := e.set(s.child, shift+bitsPerLevel, h, k, v)
		if child != s.child {
			n = e.own(n, 0)
			n.slots[i].child = child
		}
	case s.key == k:
		n = e.own(n, 0)
		n.slots[i].val = v
	default: // another key here: push both one level down
		child := e.split(shift+bitsPerLevel, s.key, s.val, e.m.hash(s.key), k, v, h)
		n = e.own(n, 0)
		n.slots[i] = slot[K, V]{child: child}
		e.m.n++
	}
	return n
}

// split makes the node at shift that holds the two entries.
func (e *Editor[K, V]) split(shift uint, k1 K, v1 V, h1 uint64, k2 K, v2 V, h2 uint64) *node[K, V] {
	n := &node[K, V]{edit: e.tok}
	if shift > maxShift {
		n.slots = []slot[K, V]{{key: k1, val: v1}, {key: k2, val: v2}}
		return n
	}
	b1, b2 := uint32(1)<<((h1>>shift)&(fanout-1)), uint32(1)<<((h2>>shift)&(fanout-1))
	switch {
	case b1 == b2:
		n.slots = []slot[K, V]{{child: e.split(shift+bitsPerLevel, k1, v1, h1, k2, v2, h2)}}
	case b1 < b2:
		n.slots = []slot[K, V]{{key: k1, val: v1}, {key: k2, val: v2}}
	default:
		n.slots = []slot[K, V]{{key: k2, val: v2}, {key: k1, val: v1}}
	}
	n.bitmap = b1 | b2
	return n
}

// Delete removes k and reports whether it was there.
func (e *Editor[K, V]) Delete(k K) bool {
	h := e.m.hash(k)
	root, ok := e.del(e.m.root, 0, h, k)
	if ok {
		e.m.root = root
		e.m.n--
	}
	return ok
}

// del removes k below n; the node returned may be left with no slot, or
// with a single entry, which the caller folds into its own slot.
func (e *Editor[K, V]) del(n *node[K, V], shift uint, h uint64, k K) (*node[K, V], bool) {
	if shift > maxShift {
		for i := range n.slots {
			if n.slots[i].key == k {
				n = e.own(n, 0)
				n.remove(i, 0)
				return n, true
			}
		}
		return n, false
	}
	bit := uint32(1) << ((h >> shift) & (fanout - 1))
	if n.bitmap&bit == 0 {
		return n, false
	}
	i := bits.OnesCount32(n.bitmap & (bit - 1))
	s := n.slots[i]
	if s.child == nil {
		if s.key != k {
			return n, false
		}
		n = e.own(n, 0)
		n.remove(i, bit)
		return n, true
	}
	child, ok := e.del(s.child, shift+bitsPerLevel, h, k)
	if !ok {
		return n, false
	}
	n = e.own(n, 0)
	switch {
	case len(child.slots) == 0:
		n.remove(i, bit)
	case len(child.slots) == 1 && child.slots[0].child == nil:
		n.slots[i] = child.slots[0] // a lone entry moves up
	default:
		n.slots[i].child = child
	}
	return n, true
}

// remove drops slot i (bit in the bitmap; 0 in a collision node) of a
// node this batch owns.
func (n *node[K, V]) remove(i int, bit uint32) {
	last := len(n.slots) - 1
	copy(n.slots[i:], n.slots[i+1:])
	n.slots[last] = slot[K, V]{}
	n.slots = n.slots[:last]
	n.bitmap &^= bit
}
