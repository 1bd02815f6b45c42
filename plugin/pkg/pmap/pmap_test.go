package pmap

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// check compares m with want and checks the tree's invariants: every
// entry reachable, in order; separators the smallest key below each child;
// no node but the root empty or over maxEntries; leaves all at one depth;
// arrays without slack beyond what deletes left.
func check(t *testing.T, m *Map[int, int], want map[int]int) {
	t.Helper()
	if m.Len() != len(want) {
		t.Fatalf("Len %d, want %d", m.Len(), len(want))
	}
	for k, v := range want {
		if got, ok := m.Get(k); !ok || got != v {
			t.Fatalf("Get(%v) = %v, %v; want %v", k, got, ok, v)
		}
	}
	var keys []int
	for k, v := range m.All() {
		keys = append(keys, k)
		if w, ok := want[k]; !ok || w != v {
			t.Fatalf("All yields %v=%v, want %v (present %v)", k, v, w, ok)
		}
	}
	if len(keys) != len(want) || !slices.IsSorted(keys) {
		t.Fatalf("All yields %d keys, sorted %v; want %d", len(keys), slices.IsSorted(keys), len(want))
	}
	leafDepth := -1
	var walk func(n *node[int, int], depth int, root bool)
	walk = func(n *node[int, int], depth int, root bool) {
		if (!root && len(n.keys) == 0) || len(n.keys) > maxEntries {
			t.Fatalf("a node with %d entries", len(n.keys))
		}
		if n.kids == nil {
			if leafDepth >= 0 && depth != leafDepth {
				t.Fatalf("leaves at depths %d and %d", leafDepth, depth)
			}
			leafDepth = depth
			return
		}
		if len(n.kids) != len(n.keys) {
			t.Fatalf("%d children, %d separators", len(n.kids), len(n.keys))
		}
		for i, c := range n.kids {
			if c.keys[0] != n.keys[i] {
				t.Fatalf("separator %d is %v, the child's first key %v", i, n.keys[i], c.keys[0])
			}
			walk(c, depth+1, false)
		}
	}
	walk(m.root, 0, true)
}

// TestRandomOps: random sets, swaps, deletes and takes, single and in
// batches, agree with a Go map after every step (the old values Swap and
// Take return too), and every earlier version stays as it was
// (persistence).
func TestRandomOps(t *testing.T) {
	for seed := range uint64(5) {
		r := rand.New(rand.NewPCG(seed, 1))
		m := New[int, int](cmp.Compare[int])
		want := map[int]int{}
		type version struct {
			m    *Map[int, int]
			want map[int]int
		}
		var versions []version
		keys := 300 + int(seed)*400 // some runs deep enough for inner nodes of inner nodes
		for step := range 400 {
			e := m.Edit()
			for range 1 + r.IntN(40) {
				k := r.IntN(keys)
				w, had := want[k]
				switch r.IntN(6) {
				case 0:
					if e.Delete(k) != had {
						t.Fatalf("Delete(%d) reported %v", k, !had)
					}
					delete(want, k)
				case 1:
					if old, ok := e.Take(k); ok != had || old != w {
						t.Fatalf("Take(%d) = %v, %v; want %v, %v", k, old, ok, w, had)
					}
					delete(want, k)
				case 2:
					v := r.Int()
					if old, ok := e.Swap(k, v); ok != had || old != w {
						t.Fatalf("Swap(%d) = %v, %v; want %v, %v", k, old, ok, w, had)
					}
					want[k] = v
				default:
					v := r.Int()
					e.Set(k, v)
					want[k] = v
				}
			}
			m = e.Map()
			check(t, m, want)
			if step%40 == 0 {
				c := map[int]int{}
				for k, v := range want {
					c[k] = v
				}
				versions = append(versions, version{m, c})
			}
		}
		for _, v := range versions {
			check(t, v.m, v.want)
		}
	}
}

// TestEmptyAgain: a map emptied by deletes, whatever its depth, is empty
// and takes new entries.
func TestEmptyAgain(t *testing.T) {
	m := New[int, int](cmp.Compare[int])
	for i := range 5000 {
		m = m.Set(i, i)
	}
	e := m.Edit()
	for i := range 5000 {
		e.Delete(i)
	}
	m = e.Map()
	check(t, m, map[int]int{})
	m = m.Set(7, 7)
	check(t, m, map[int]int{7: 7})
}

func benchMap(n int) (*Map[string, int], []string) {
	e := New[string, int](strings.Compare).Edit()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%d/svc-%d", i%50, i)
		e.Set(keys[i], i)
	}
	return e.Map(), keys
}

func BenchmarkGet(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m, keys := benchMap(n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m.Get(keys[i%n])
			}
		})
	}
}

// BenchmarkSetOne: one change to a map of n entries copies only its path:
// the bytes per change stay flat in n.
func BenchmarkSetOne(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m, keys := benchMap(n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m = m.Set(keys[i%n], i)
			}
		})
	}
}

// TestFromSorted: a map built bottom up from sorted entries, of any size,
// holds them, keeps the invariants, and takes changes like any other.
func TestFromSorted(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 64, 65, 1000, 1025, 40000} {
		keys, vals := make([]int, n), make([]int, n)
		want := map[int]int{}
		for i := range keys {
			keys[i], vals[i] = 2*i, i
			want[2*i] = i
		}
		m := FromSorted(cmp.Compare[int], keys, vals)
		check(t, m, want)
		e := m.Edit()
		for i := range min(n, 100) {
			e.Set(2*i+1, -i)
			want[2*i+1] = -i
			e.Delete(2 * i)
			delete(want, 2*i)
		}
		check(t, e.Map(), want)
	}
}

// TestUpdateSharesKeys: setting a key that is there copies the values
// (and children) on its path, not the keys: every node on the path of the
// new version shares its keys with the old one's, which stays as it was.
func TestUpdateSharesKeys(t *testing.T) {
	m := New[int, int](cmp.Compare[int])
	want := map[int]int{}
	for i := range 5000 {
		m = m.Set(i, i)
		want[i] = i
	}
	m2 := m.Set(2500, -1)
	a, b := m.root, m2.root
	for depth := 0; ; depth++ {
		if a == b {
			t.Fatalf("depth %d: the new version shares the node itself", depth)
		}
		if &a.keys[0] != &b.keys[0] {
			t.Errorf("depth %d: the update copied the keys", depth)
		}
		if a.kids == nil {
			break
		}
		i := m.child(a, 2500)
		a, b = a.kids[i], b.kids[i]
	}
	check(t, m, want)
	want[2500] = -1
	check(t, m2, want)
}
