package k8sdns_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// logRun is a generated cluster's run as the snapshot's change log sees
// it: snapshots of some of its states, each step's record, and each
// state's whole table (tables[k]: after k steps).
type logRun struct {
	snaps  map[int][]byte
	recs   [][]byte
	tables []string
}

func newLogRun(t *testing.T, seed int64, cfg clustergen.Config, steps int, snapAt ...int) *logRun {
	c := clustergen.Generate(seed, cfg)
	r := rand.New(rand.NewSource(seed))
	run := &logRun{snaps: map[int][]byte{}}
	keep := func(k int) {
		m := model(c)
		run.tables = append(run.tables, k8sdns.Build(m).Describe())
		for _, at := range snapAt {
			if at == k {
				var buf bytes.Buffer
				if err := m.Snapshot(&buf); err != nil {
					t.Fatal(err)
				}
				run.snaps[k] = buf.Bytes()
			}
		}
	}
	keep(0)
	for k := 1; k <= steps; k++ {
		labels := sliceLabels(c)
		ch := c.Step(r)
		run.recs = append(run.recs, k8sdns.AppendPatchRecord(nil, patchOf(c, ch, labels)))
		keep(k)
	}
	return run
}

func replayed(t *testing.T, snap []byte, recs [][]byte) (string, int, error) {
	t.Helper()
	c, err := k8sdns.DecodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	out, n, err := k8sdns.Replay(c, recs)
	return k8sdns.Build(out).Describe(), n, err
}

// TestLogReplayEqualsBuilt: the snapshot of a generated cluster with the
// records of the random steps after it replayed onto it (Services, slices,
// Pods and imports added, changed, moved and deleted, namespaces added)
// gives, after any number of steps, the table built whole from that
// step's cluster.
func TestLogReplayEqualsBuilt(t *testing.T) {
	for name, cfg := range configs() {
		for _, seed := range seeds(2) {
			t.Run(fmt.Sprint(name, seed), func(t *testing.T) {
				run := newLogRun(t, seed, cfg, 80, 0)
				for k := 0; k <= len(run.recs); k += 1 + k/6 {
					got, n, err := replayed(t, run.snaps[0], run.recs[:k])
					if err != nil || n != k {
						t.Fatalf("%d records: %d replayed, %v", k, n, err)
					}
					if got != run.tables[k] {
						t.Fatalf("snapshot + %d records differs from the whole build:\n%s\nwant:\n%s", k, got, run.tables[k])
					}
				}
			})
		}
	}
}

// TestLogReplayOverNewerSnapshot: records i.. replayed onto the snapshot
// of the state after j >= i steps (a compaction's snapshot is the state as
// it stands when the write runs, which may hold records appended after
// it) give the last state's table.
func TestLogReplayOverNewerSnapshot(t *testing.T) {
	for name, cfg := range configs() {
		seed := int64(len(name) + 3)
		r := rand.New(rand.NewSource(seed))
		j := 10 + r.Intn(40)
		run := newLogRun(t, seed, cfg, 60, j)
		for range 4 {
			i := r.Intn(j + 1)
			got, n, err := replayed(t, run.snaps[j], run.recs[i:])
			if err != nil || n != len(run.recs)-i {
				t.Fatalf("%s: %d of %d records replayed: %v", name, n, len(run.recs)-i, err)
			}
			if want := run.tables[len(run.recs)]; got != want {
				t.Fatalf("%s: the snapshot after %d steps + records %d.. differs from the whole build:\n%s\nwant:\n%s", name, j, i, got, want)
			}
		}
	}
}

// TestLogReplayStopsAtBadRecord: a record that does not decode ends the
// replay: the records before it are applied, none after it.
func TestLogReplayStopsAtBadRecord(t *testing.T) {
	run := newLogRun(t, 9, clustergen.Small(), 30, 0)
	bad := [][]byte{[]byte(`{"patch":2}`), []byte(`not json`), []byte(`{"patch":1,"pods":[{"addr":"nope","namespaces":[]}]}`),
		[]byte("{\"patch\":1}\n{\"namespace\":\"a\"}"), []byte(`{"patch":1,"extra":true}`)}
	for i, b := range bad {
		k := 2 + 5*i
		recs := append(append(append([][]byte{}, run.recs[:k]...), b), run.recs[k:]...)
		got, n, err := replayed(t, run.snaps[0], recs)
		if err == nil || n != k {
			t.Fatalf("bad record %q at %d: %d replayed, %v", b, k, n, err)
		}
		if got != run.tables[k] {
			t.Fatalf("bad record %q at %d: the table is not that of the %d records before it", b, k, k)
		}
	}
}
