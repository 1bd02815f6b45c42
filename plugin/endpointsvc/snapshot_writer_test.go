package endpointsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// TestSnapshotCoalesced: 200 states applied back to back are written at
// most once per snapshotInterval, the file ends on the last state, and a
// stop writes a state still pending.
func TestSnapshotCoalesced(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "snap.json")
	e := &Endpointsvc{Zones: []string{"svc.orch."}, namespace: DefaultNamespace, ttl: 30, syncer: &syncer{snapshotPath: snap},
		source: idleSource{}}
	e.finish(fakeLookup)
	e.start(e.source)
	state := func(i int) *State {
		st := &State{Services: []Service{{ID: "s", Name: fmt.Sprintf("svc%d", i), Status: "active"}}}
		if err := st.Validate(); err != nil {
			t.Fatal(err)
		}
		return st
	}
	start := time.Now()
	for i := range 200 {
		e.apply(context.Background(), "test", state(i), true)
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	time.Sleep(snapshotInterval + 200*time.Millisecond)
	st := readSnapshot(t, snap)
	if st.Services[0].Name != "svc199" {
		t.Errorf("snapshot holds %q, want the last state svc199", st.Services[0].Name)
	}
	writes := int(e.snapshot.writes.Load())
	if max := int(elapsed/snapshotInterval) + 2; writes > max || writes < 1 {
		t.Errorf("%d writes for 200 states in %v, want 1 to %d", writes, elapsed.Round(time.Millisecond), max)
	}
	t.Logf("200 states in %v: %d snapshot writes", elapsed.Round(time.Millisecond), writes)

	// a state applied just before stop is written by the stop
	e.apply(context.Background(), "test", state(1000), true)
	e.stop()
	if st := readSnapshot(t, snap); st.Services[0].Name != "svc1000" {
		t.Errorf("after stop the snapshot holds %q, want svc1000", st.Services[0].Name)
	}
}

func readSnapshot(t *testing.T, path string) *State {
	t.Helper()
	b, err := persist.ReadFile(path)
	if err != nil || b == nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	st, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// idleSource reports nothing until stopped.
type idleSource struct{}

func (idleSource) Name() string { return "idle" }
func (idleSource) Run(ctx context.Context, s Sink) {
	s.Unchanged()
	<-ctx.Done()
}

// TestStateEncodeRoundTrip: the streamed snapshot decodes to the same state
// (the same hash) for every schema's fields, and equals json.Marshal's
// document field for field.
func TestStateEncodeRoundTrip(t *testing.T) {
	for _, path := range []string{"testdata/state.json", "testdata/spec-state.json"} {
		st := loadState(t, path)
		var buf bytes.Buffer
		if err := st.encode(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := DecodeState(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, buf.String())
		}
		if back.hash() != st.hash() {
			t.Errorf("%s: the decoded snapshot differs from the state", path)
		}
		want, _ := json.Marshal(st)
		var a, b any
		json.Unmarshal(want, &a)
		json.Unmarshal(buf.Bytes(), &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: streamed document differs from json.Marshal's:\n%s\n%s", path, buf.String(), want)
		}
	}
}
