package orch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// logRun is a churn model's run as the snapshot's change log sees it:
// the snapshot of the state before the first step, each step's record,
// and each state's whole table (tables[k]: after k steps).
type logRun struct {
	snaps  map[int][]byte // the snapshot of the state after k steps, for some k
	recs   [][]byte
	tables []tableContents
}

var logZones = []string{"cluster.test."}

func snapshotOf(t *testing.T, st *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := st.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// newLogRun runs steps random steps of seed's model, keeping the
// snapshots of the states after the steps in snapAt.
func newLogRun(t *testing.T, seed uint64, steps int, endpointMode bool, snapAt ...int) *logRun {
	m := newChurnModel(seed)
	run := &logRun{snaps: map[int][]byte{}}
	keep := func(k int) {
		st := m.state()
		run.tables = append(run.tables, contents(BuildTable(st, logZones, false, endpointMode, nil)))
		for _, at := range snapAt {
			if at == k {
				run.snaps[k] = snapshotOf(t, st)
			}
		}
	}
	keep(0)
	for k := 1; k <= steps; k++ {
		p, removed, dirty := m.step()
		run.recs = append(run.recs, AppendPatchRecord(nil, &Patch{State: p, Removed: removed, DirtyNodes: dirty}))
		keep(k)
	}
	return run
}

// replayed is the table of snapshot snap with recs replayed onto it.
func replayed(t *testing.T, snap []byte, recs [][]byte, endpointMode bool) (tableContents, int, error) {
	t.Helper()
	st, err := DecodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	out, n, err := Replay(st, recs)
	return contents(BuildTable(out, logZones, false, endpointMode, nil)), n, err
}

// TestLogReplayEqualsBuilt: the snapshot of a random state with the
// records of the random steps after it replayed onto it (services added,
// removed and re-tasked, nodes going down and moving) gives, after any
// number of steps, the table built whole from that step's state, in node
// and in endpoint mode.
func TestLogReplayEqualsBuilt(t *testing.T) {
	for _, endpointMode := range []bool{false, true} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("endpoint=%v/%d", endpointMode, seed), func(t *testing.T) {
				run := newLogRun(t, seed+1, 120, endpointMode, 0)
				for k := 0; k <= len(run.recs); k += 1 + k/8 {
					got, n, err := replayed(t, run.snaps[0], run.recs[:k], endpointMode)
					if err != nil || n != k {
						t.Fatalf("%d records: %d replayed, %v", k, n, err)
					}
					if !reflect.DeepEqual(got, run.tables[k]) {
						t.Fatalf("snapshot + %d records differs from the whole build:\n%+v\n%+v", k, got, run.tables[k])
					}
				}
			})
		}
	}
}

// TestLogReplayOverNewerSnapshot: a compaction writes the snapshot of a
// later state than the records it drops (the source's state as it stands
// when the write runs); the records appended after it may include some the
// snapshot already holds. Replaying records i.. onto the snapshot of the
// state after j >= i steps gives the last state's table all the same.
func TestLogReplayOverNewerSnapshot(t *testing.T) {
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 2))
		j := 20 + r.IntN(60)
		run := newLogRun(t, seed+11, 100, seed%2 == 0, j)
		for range 5 {
			i := r.IntN(j + 1)
			got, n, err := replayed(t, run.snaps[j], run.recs[i:], seed%2 == 0)
			if err != nil || n != len(run.recs)-i {
				t.Fatalf("seed %d: %d of %d records replayed: %v", seed, n, len(run.recs)-i, err)
			}
			if want := run.tables[len(run.recs)]; !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d: the snapshot after %d steps + records %d.. differs from the whole build", seed, j, i)
			}
		}
	}
}

// TestLogReplayStopsAtBadRecord: a record that does not decode (or
// validate) ends the replay: the records before it are applied, none
// after it.
func TestLogReplayStopsAtBadRecord(t *testing.T) {
	run := newLogRun(t, 5, 30, false, 0)
	const empty = `{"format":"meshdns-state-compact/1","nodes":[],"services":[]}`
	bad := [][]byte{[]byte("{\"patch\":1}\n" + `{"format":"meshdns-state-compact/1","nodes":[],"services":[{"service":{"id":"x","name":"Bad_Name","status":"active"}}]}`),
		[]byte("{\"patch\":2}\n" + empty), []byte(`{"patch":1}`), []byte("not json\n" + empty), []byte("{\"patch\":1,\"extra\":1}\n" + empty),
		[]byte("{\"patch\":1}\n" + empty + "{}")}
	for i, b := range bad {
		k := 3 + 5*i
		recs := append(append(append([][]byte{}, run.recs[:k]...), b), run.recs[k:]...)
		got, n, err := replayed(t, run.snaps[0], recs, false)
		if err == nil || n != k {
			t.Fatalf("bad record %s at %d: %d replayed, %v", b, k, n, err)
		}
		if !reflect.DeepEqual(got, run.tables[k]) {
			t.Fatalf("bad record %s at %d: the table is not that of the %d records before it", b, k, k)
		}
	}
}

// TestRecordCarriesChangedNodesOnly: a record carries the nodes the patch
// marks dirty, not every node its tasks run on (those are on disk
// already); it decodes, and replays onto a state that has the others.
func TestRecordCarriesChangedNodesOnly(t *testing.T) {
	nodes := []Node{{ID: "n1", Name: "n1", Address: "10.0.0.1", Status: "ready"}, {ID: "n2", Name: "n2", Address: "10.0.0.2", Status: "down"}}
	svc := Service{ID: "ns/web", Name: "web", Namespace: "ns", Status: "active"}
	tasks := []Task{{ID: "t1", ServiceID: "ns/web", NodeID: "n1", DesiredStatus: StatusRunning, ActualStatus: StatusHealthy, Address: "10.1.0.1"},
		{ID: "t2", ServiceID: "ns/web", NodeID: "n2", DesiredStatus: StatusRunning, ActualStatus: StatusHealthy, Address: "10.1.0.2"}}
	base := &State{Nodes: []Node{nodes[0], {ID: "n2", Name: "n2", Address: "10.0.0.2", Status: "ready"}}, Services: []Service{svc}, Tasks: tasks[:1]}
	rec := AppendPatchRecord(nil, &Patch{State: &State{Nodes: nodes, Services: []Service{svc}, Tasks: tasks}, DirtyNodes: map[string]bool{"n2": true}})
	p, err := DecodePatchRecord(rec)
	if err != nil {
		t.Fatalf("%v\n%s", err, rec)
	}
	if len(p.State.Nodes) != 1 || p.State.Nodes[0].Name != "n2" {
		t.Errorf("the record carries nodes %+v, want n2 (dirty) only", p.State.Nodes)
	}
	out, n, err := Replay(base, [][]byte{rec})
	if err != nil || n != 1 {
		t.Fatalf("replay: %d applied, %v", n, err)
	}
	want := BuildTable(&State{Nodes: nodes, Services: []Service{svc}, Tasks: tasks}, logZones, false, true, nil)
	if g, w := contents(BuildTable(out, logZones, false, true, nil)), contents(want); !reflect.DeepEqual(g, w) {
		t.Errorf("replayed:\n%+v\nwant:\n%+v", g, w)
	}
}
