package orch

import (
	"bytes"
	"os"
	"testing"
)

func FuzzDecodeState(f *testing.F) {
	good, _ := os.ReadFile("testdata/state.json")
	f.Add(good)
	f.Add([]byte(`{"services":[],"tasks":[],"nodes":[]}`))
	f.Add([]byte(`{"nodes":[{"id":"n","name":"a","address":"[::1]:1","status":"ready"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeState(b)
		if err != nil {
			return
		}
		// a valid state builds a table, and its snapshot form decodes again
		BuildTable(st, []string{"svc.orch."}, true, true, nil)
		if _, err := DecodeState(mustJSON(t, st)); err != nil {
			t.Fatalf("snapshot of a valid state is invalid: %v", err)
		}
	})
}

// FuzzDecodeSnapshot: a snapshot in either form is rejected whole or
// decodes to a valid state that builds a table, and whose compact form
// decodes again to the same services.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, path := range []string{"testdata/state.json", "../k8sdns/testdata/spec-state.json"} {
		good, _ := os.ReadFile(path)
		f.Add(good)
		st, err := DecodeState(good)
		if err != nil {
			f.Fatal(err)
		}
		var b bytes.Buffer
		if err := st.Snapshot(&b); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte(`{"format":"meshdns-state-compact/1","nodes":[],"services":[{"service":{"id":"s","name":"a","status":"active"},"groups":[{"desired":"running","actual":"healthy","tasks":[["","10.0.0.1","h"]]}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		BuildTable(st, []string{"svc.orch."}, true, true, nil)
		var out bytes.Buffer
		if err := st.Snapshot(&out); err != nil {
			t.Fatal(err)
		}
		back, err := DecodeSnapshot(out.Bytes())
		if err != nil {
			t.Fatalf("the compact form of a valid state is invalid: %v\n%s", err, out.String())
		}
		if len(back.Services) != len(st.Services) || len(back.Tasks) != len(st.Tasks) {
			t.Fatalf("%d services, %d tasks after the round trip; want %d, %d", len(back.Services), len(back.Tasks), len(st.Services), len(st.Tasks))
		}
	})
}
