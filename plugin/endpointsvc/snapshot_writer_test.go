package endpointsvc

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// TestSnapshotCoalesced: 200 states applied back to back are written at
// most once per persist.DefaultInterval, the file ends on the last state, and a
// stop writes a state still pending.
func TestSnapshotCoalesced(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "snap.json")
	e := orchPlugin(30, &syncer{snapshotPath: snap}, "svc.orch.")
	e.source = idleSource{}
	e.start(e.source)
	state := func(i int) *orch.State {
		st := &orch.State{Services: []orch.Service{{ID: "s", Name: fmt.Sprintf("svc%d", i), Status: "active"}}}
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
	// the last state is written one interval after the previous write at
	// the latest; a loaded machine (make test's fuzzers and peer builds
	// beside it) may run the writer later, so wait for it, boundedly,
	// rather than sleep one interval and read
	time.Sleep(persist.DefaultInterval)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st := readSnapshot(t, snap)
		if st.Services[0].Name == "svc199" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot holds %q 10 s after the last state, want the last state svc199", st.Services[0].Name)
		}
	}
	writes := int(e.snapshot.Writes())
	if max := int(elapsed/persist.DefaultInterval) + 2; writes > max || writes < 1 {
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

func readSnapshot(t *testing.T, path string) *orch.State {
	t.Helper()
	b, err := persist.ReadFile(path)
	if err != nil || b == nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	st, err := orch.DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// idleSource reports nothing until stopped.
type idleSource struct{}

func (idleSource) Name() string { return "idle" }
func (idleSource) Key() string  { return "idle" }
func (idleSource) Run(ctx context.Context, s feed.Sink) {
	s.Unchanged()
	<-ctx.Done()
}
