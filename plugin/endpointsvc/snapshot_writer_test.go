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
// most once per persist.DefaultInterval, the file ends on the last state, and a
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
	time.Sleep(persist.DefaultInterval + 200*time.Millisecond)
	st := readSnapshot(t, snap)
	if st.Services[0].Name != "svc199" {
		t.Errorf("snapshot holds %q, want the last state svc199", st.Services[0].Name)
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

func readSnapshot(t *testing.T, path string) *State {
	t.Helper()
	b, err := persist.ReadFile(path)
	if err != nil || b == nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	st, err := DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// idleSource reports nothing until stopped.
type idleSource struct{}

func (idleSource) Name() string { return "idle" }
func (idleSource) Key() string  { return "idle" }
func (idleSource) Run(ctx context.Context, s Sink) {
	s.Unchanged()
	<-ctx.Done()
}

// TestCompactRoundTrip: the compact snapshot decodes to the same
// services, nodes and namespaces and, per service in order, the same tasks
// but for their ids and versions, for every schema's fields; and a state
// document (an older meshdns's snapshot) still loads.
func TestCompactRoundTrip(t *testing.T) {
	for _, path := range []string{"testdata/state.json", "testdata/spec-state.json"} {
		st := loadState(t, path)
		var buf bytes.Buffer
		if err := st.encodeCompact(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, buf.String())
		}
		if !reflect.DeepEqual(back.Services, st.Services) || !reflect.DeepEqual(back.Nodes, st.Nodes) || !reflect.DeepEqual(back.Namespaces, st.Namespaces) {
			t.Errorf("%s: services, nodes or namespaces differ:\n%s", path, buf.String())
		}
		if a, b := tasksByService(st), tasksByService(back); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: tasks differ:\n%v\n%v", path, a, b)
		}
		legacy, _ := json.Marshal(st)
		if old, err := DecodeSnapshot(legacy); err != nil || !reflect.DeepEqual(old, st) {
			t.Errorf("%s: a state document as snapshot: %v", path, err)
		}
		full, _ := json.Marshal(st)
		if buf.Len() >= len(full) {
			t.Errorf("%s: compact form %d bytes, the state document %d", path, buf.Len(), len(full))
		}
	}
	bad := []string{`{"format":"meshdns-state-compact/9","nodes":[],"services":[]}`,
		`{"format":"meshdns-state-compact/1","nodes":[],"services":[{"service":{"id":"s","name":"Bad_Name","status":"active"}}]}`,
		`{"format":"meshdns-state-compact/1","nodes":[],"services":[],"extra":1}`}
	for _, b := range bad {
		if _, err := DecodeSnapshot([]byte(b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
}

// TestCompactHandWrittenJSON: the hand-written encodings of services and
// task ports are json.Marshal's, byte for byte.
func TestCompactHandWrittenJSON(t *testing.T) {
	for _, path := range []string{"testdata/state.json", "testdata/spec-state.json"} {
		st := loadState(t, path)
		for i := range st.Services {
			want, _ := json.Marshal(&st.Services[i])
			if got := appendService(nil, &st.Services[i]); string(got) != string(want) {
				t.Errorf("service %s:\n got %s\nwant %s", st.Services[i].ID, got, want)
			}
		}
		for _, task := range st.Tasks {
			for _, p := range task.Ports {
				want, _ := json.Marshal(p)
				if got := appendTaskPort(nil, p); string(got) != string(want) {
					t.Errorf("task port:\n got %s\nwant %s", got, want)
				}
			}
		}
	}
	odd := Service{ID: "a\"b<", Name: "x", Status: "active", Ports: []ServicePort{{TargetPort: 1}}, ClusterIPs: []string{"::1", "10.0.0.1"}, Headless: true, ExternalName: "é.example."}
	want, _ := json.Marshal(&odd)
	if got := appendService(nil, &odd); string(got) != string(want) {
		t.Errorf("odd service:\n got %s\nwant %s", got, want)
	}
}

// tasksByService lists each service's tasks in order, without id and
// version.
func tasksByService(st *State) map[string][]Task {
	out := map[string][]Task{}
	for _, task := range st.Tasks {
		task.ID, task.Version = "", 0
		if len(task.Ports) == 0 {
			task.Ports = nil
		}
		out[task.ServiceID] = append(out[task.ServiceID], task)
	}
	return out
}
