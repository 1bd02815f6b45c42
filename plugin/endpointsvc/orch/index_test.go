package orch

import (
	"fmt"
	"math/rand"
	"testing"
)

// TestIndexIsMap: an index of n distinct keys, looked through (few) or
// hashed (many), answers every key - held or not - as a map does.
func TestIndexIsMap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := range 2*fewKeys + 2 {
		want := map[string]int{}
		x := newIndex[int](n)
		for len(want) < n {
			k := fmt.Sprint(rng.Intn(4 * (n + 1)))
			if _, ok := want[k]; !ok {
				want[k] = rng.Int()
				x.add(k, want[k])
			}
		}
		if (x.m != nil) != (n > fewKeys) {
			t.Fatalf("n=%d: hashed %v", n, x.m != nil)
		}
		for q := range 4 * (n + 1) {
			k := fmt.Sprint(q)
			w, wok := want[k]
			if g, gok := x.get(k); g != w || gok != wok {
				t.Fatalf("n=%d: get(%q) = %d, %v; want %d, %v", n, k, g, gok, w, wok)
			}
		}
	}
	var zero index[int]
	if _, ok := zero.get("x"); ok {
		t.Fatal("the zero index holds a key")
	}
}
