package jsonw

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestAppendStringIsJSON: AppendString writes every string as
// encoding/json does - each byte alone, and generated strings of bytes
// around the ones it must escape (seeded).
func TestAppendStringIsJSON(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("web-" + string([]byte{byte(c)}) + ".shop")
	}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 32))
		for range 2000 {
			b := make([]byte, r.IntN(24))
			for i := range b {
				if r.IntN(8) == 0 {
					b[i] = byte(r.IntN(256))
				} else {
					b[i] = byte('a' + r.IntN(26))
				}
			}
			check(string(b))
		}
	}
}
