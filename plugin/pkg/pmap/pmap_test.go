package pmap

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// check compares m with want and checks the trie's invariants: every
// entry reachable, no empty node below the root, no node below the root
// holding a lone entry, counts right.
func check[K comparable, V comparable](t *testing.T, m *Map[K, V], want map[K]V) {
	t.Helper()
	if m.Len() != len(want) {
		t.Fatalf("Len %d, want %d", m.Len(), len(want))
	}
	for k, v := range want {
		if got, ok := m.Get(k); !ok || got != v {
			t.Fatalf("Get(%v) = %v, %v; want %v", k, got, ok, v)
		}
	}
	n := 0
	for k, v := range m.All() {
		n++
		if w, ok := want[k]; !ok || w != v {
			t.Fatalf("All yields %v=%v, want %v (present %v)", k, v, w, ok)
		}
	}
	if n != len(want) {
		t.Fatalf("All yields %d entries, want %d", n, len(want))
	}
	var walk func(nd *node[K, V], root bool)
	walk = func(nd *node[K, V], root bool) {
		if !root && (len(nd.slots) == 0 || (len(nd.slots) == 1 && nd.slots[0].child == nil)) {
			t.Fatalf("a node below the root with %d slots (lone entry or empty)", len(nd.slots))
		}
		for _, s := range nd.slots {
			if s.child != nil {
				walk(s.child, false)
			}
		}
	}
	walk(m.root, true)
}

// TestRandomOps: random sets and deletes, single and in batches, agree
// with a Go map after every step, and every earlier version stays as it
// was (persistence).
func TestRandomOps(t *testing.T) {
	for seed := range uint64(5) {
		r := rand.New(rand.NewPCG(seed, 1))
		m := New[int, int]()
		want := map[int]int{}
		type version struct {
			m    *Map[int, int]
			want map[int]int
		}
		var versions []version
		for step := range 400 {
			e := m.Edit()
			for range 1 + r.IntN(20) {
				k := r.IntN(300)
				if r.IntN(3) == 0 {
					_, had := want[k]
					if e.Delete(k) != had {
						t.Fatalf("Delete(%d) reported %v", k, !had)
					}
					delete(want, k)
				} else {
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

// TestCollisions: keys whose 64-bit hashes are equal (forced here: two
// hash values for 50 keys) split down to collision nodes; set, get and
// delete work on them, and deletes fold lone entries back up.
func TestCollisions(t *testing.T) {
	m := New[int, int]()
	m.test = func(k int) uint64 { return uint64(k%2) << 63 }
	want := map[int]int{}
	e := m.Edit()
	for i := range 50 {
		e.Set(i, i)
		want[i] = i
	}
	m = e.Map()
	check(t, m, want)
	m = m.Set(7, 70)
	want[7] = 70
	check(t, m, want)
	for i := 0; i < 50; i++ {
		if i%3 == 0 && i != 48 {
			continue
		}
		m = m.Delete(i)
		delete(want, i)
		check(t, m, want)
	}
	for i := range 50 {
		m = m.Delete(i)
		delete(want, i)
		check(t, m, want)
	}
}

func BenchmarkGet(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := New[string, int]().Edit()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("ns-%d/svc-%d", i%50, i)
				e.Set(keys[i], i)
			}
			m := e.Map()
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
			e := New[string, int]().Edit()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("ns-%d/svc-%d", i%50, i)
				e.Set(keys[i], i)
			}
			m := e.Map()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m = m.Set(keys[i%n], i)
			}
		})
	}
}
