package endpointsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// logModel is a random source of one schema for the snapshot log's
// properties: a whole state, then random changes as patches, each with
// the whole new state as its snapshot.
type logModel interface {
	plugin(snapshot string) *Endpointsvc
	whole() feed.State
	step() feed.Patch
	// describe is a state's table as text: two states answer alike when
	// their descriptions are equal.
	describe(st feed.State) string
}

// dnsLogModel is a generated cluster (schema kubernetes); its patches
// carry the names whose content changed in a step, found by comparing
// each name's record before and after.
type dnsLogModel struct {
	c *clustergen.Cluster
	r *rand.Rand
}

func (m *dnsLogModel) plugin(snap string) *Endpointsvc {
	return dnsPlugin(30, &syncer{snapshotPath: snap}, "cluster.local.")
}

func (m *dnsLogModel) whole() feed.State {
	return kubesource.DNSCluster(m.c.Namespaces, m.c.Services, m.c.Slices)
}

func (m *dnsLogModel) describe(st feed.State) string {
	return k8sdns.Build(st.(*k8sdns.Cluster)).Describe()
}

// names is each name's content in c as a record.
func names(c *k8sdns.Cluster) map[k8sdns.Key]string {
	ch := map[k8sdns.Key]*k8sdns.Change{}
	get := func(k k8sdns.Key) *k8sdns.Change {
		if ch[k] == nil {
			ch[k] = &k8sdns.Change{Key: k}
		}
		return ch[k]
	}
	for _, s := range c.Services {
		get(k8sdns.Key{Namespace: s.Namespace, Name: s.Name}).Service = s
	}
	for _, sl := range c.Slices {
		x := get(k8sdns.Key{Namespace: sl.Namespace, Name: sl.Service})
		x.Slices = append(x.Slices, sl)
	}
	out := make(map[k8sdns.Key]string, len(ch))
	for k, x := range ch {
		slices.SortFunc(x.Slices, func(a, b *k8sdns.Slice) int { return strings.Compare(a.Name, b.Name) })
		out[k] = string(k8sdns.AppendChange(nil, *x))
	}
	return out
}

func (m *dnsLogModel) step() feed.Patch {
	before := m.whole().(*k8sdns.Cluster)
	m.c.Step(m.r)
	after := m.whole().(*k8sdns.Cluster)
	p := &k8sdns.Patch{Whole: func() *k8sdns.Cluster { return after }, WriteSnapshot: after.Snapshot}
	b, a := names(before), names(after)
	keys := map[k8sdns.Key]bool{}
	for k := range b {
		keys[k] = true
	}
	for k := range a {
		keys[k] = true
	}
	for _, k := range slices.SortedFunc(func(yield func(k8sdns.Key) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	}, k8sdns.Key.Compare) {
		if a[k] == b[k] {
			continue
		}
		ch := k8sdns.Change{Key: k}
		for _, s := range after.Services {
			if s.Namespace == k.Namespace && s.Name == k.Name {
				ch.Service = s
			}
		}
		for _, sl := range after.Slices {
			if sl.Namespace == k.Namespace && sl.Service == k.Name {
				ch.Slices = append(ch.Slices, sl)
			}
		}
		p.Changes = append(p.Changes, ch)
	}
	if !slices.Equal(before.Namespaces, after.Namespaces) {
		p.Namespaces, p.SetNamespaces = after.Namespaces, true
	}
	return p
}

// orchLogModel is a random orchestrator state (schema orch): services
// re-tasked, added and removed, nodes going down and up, as the
// kubernetes source patches them (a dirty node's services with it).
type orchLogModel struct {
	r        *rand.Rand
	services map[string]orch.Service
	tasks    map[string][]orch.Task
	nodes    map[string]orch.Node
	next     int
}

func newOrchLogModel(seed int64) *orchLogModel {
	m := &orchLogModel{r: rand.New(rand.NewSource(seed)), services: map[string]orch.Service{}, tasks: map[string][]orch.Task{}, nodes: map[string]orch.Node{}}
	for i := range 4 {
		n := fmt.Sprintf("n%d", i)
		m.nodes[n] = orch.Node{ID: n, Name: n, Address: fmt.Sprintf("10.0.0.%d", i+1), Status: "ready"}
	}
	for range 30 {
		m.add()
	}
	return m
}

func (m *orchLogModel) plugin(snap string) *Endpointsvc {
	return orchPlugin(30, &syncer{snapshotPath: snap}, "svc.orch.")
}

func (m *orchLogModel) add() string {
	m.next++
	ns := fmt.Sprintf("ns%d", m.r.Intn(3))
	name := fmt.Sprintf("svc%d", m.next)
	id := ns + "/" + name
	m.services[id] = orch.Service{ID: id, Name: name, Namespace: ns, Status: "active",
		Ports: []orch.ServicePort{{Name: "http", Protocol: "tcp", TargetPort: 80, Port: 80}}}
	m.retask(id)
	return id
}

func (m *orchLogModel) retask(id string) {
	var ts []orch.Task
	for j := range m.r.Intn(5) {
		t := orch.Task{ID: fmt.Sprintf("%s/%d/%d", id, m.next, j), ServiceID: id, NodeID: fmt.Sprintf("n%d", m.r.Intn(4)),
			DesiredStatus: orch.StatusRunning, ActualStatus: orch.StatusHealthy,
			Ports: []orch.TaskPort{{Name: "http", Protocol: "tcp", ContainerPort: 80}}, Address: fmt.Sprintf("10.244.%d.%d", m.r.Intn(3), m.r.Intn(50)+1)}
		if m.r.Intn(3) == 0 {
			t.ActualStatus = orch.StatusUnhealthy
		}
		ts = append(ts, t)
	}
	m.tasks[id] = ts
}

// state is the state of the services ids (all: nil) with the nodes
// their tasks run on (all: nil ids).
func (m *orchLogModel) state(ids []string) *orch.State {
	st := &orch.State{}
	all := ids == nil
	if all {
		ids = slices.Sorted(func(yield func(string) bool) {
			for id := range m.services {
				if !yield(id) {
					return
				}
			}
		})
	}
	used := map[string]bool{}
	for _, id := range ids {
		st.Services = append(st.Services, m.services[id])
		st.Tasks = append(st.Tasks, m.tasks[id]...)
		for _, t := range m.tasks[id] {
			used[t.NodeID] = true
		}
	}
	for _, n := range []string{"n0", "n1", "n2", "n3"} {
		if all || used[n] {
			st.Nodes = append(st.Nodes, m.nodes[n])
		}
	}
	if err := st.Validate(); err != nil {
		panic(err)
	}
	return st
}

func (m *orchLogModel) whole() feed.State { return m.state(nil) }

func (m *orchLogModel) step() feed.Patch {
	changed := map[string]bool{}
	p := &orch.Patch{DirtyNodes: map[string]bool{}}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range m.services {
			if !yield(id) {
				return
			}
		}
	})
	switch op := m.r.Intn(10); {
	case op < 2:
		changed[m.add()] = true
	case op < 4 && len(ids) > 0:
		id := ids[m.r.Intn(len(ids))]
		s := m.services[id]
		p.Removed = append(p.Removed, orch.SvcKey{Namespace: s.Namespace, Name: s.Name})
		delete(m.services, id)
		delete(m.tasks, id)
	case op < 5:
		n := fmt.Sprintf("n%d", m.r.Intn(4))
		node := m.nodes[n]
		node.Status = map[string]string{"ready": "down", "down": "ready"}[node.Status]
		m.nodes[n] = node
		p.DirtyNodes[n] = true
		for id, ts := range m.tasks {
			for _, t := range ts {
				if t.NodeID == n {
					changed[id] = true
				}
			}
		}
	case len(ids) > 0:
		id := ids[m.r.Intn(len(ids))]
		m.retask(id)
		changed[id] = true
	}
	p.State = m.state(slices.Sorted(func(yield func(string) bool) {
		for id := range changed {
			if !yield(id) {
				return
			}
		}
	}))
	for n := range p.DirtyNodes {
		if !slices.ContainsFunc(p.State.Nodes, func(x orch.Node) bool { return x.Name == n }) {
			p.State.Nodes = append(p.State.Nodes, m.nodes[n])
		}
	}
	after := m.state(nil)
	p.Whole = func() *orch.State { return after }
	p.WriteSnapshot = after.Snapshot
	return p
}

// describe is the state with services sorted, each with its tasks in
// order but for their ids (a snapshot renumbers them), and nodes sorted.
func (m *orchLogModel) describe(st feed.State) string {
	s := st.(*orch.State)
	type svc struct {
		S     orch.Service
		Tasks []orch.Task
	}
	var out struct {
		Services []svc
		Nodes    []orch.Node
	}
	for _, x := range s.Services {
		v := svc{S: x}
		for _, t := range s.Tasks {
			if t.ServiceID == x.ID {
				t.ID, t.Version = "", 0
				v.Tasks = append(v.Tasks, t)
			}
		}
		out.Services = append(out.Services, v)
	}
	slices.SortFunc(out.Services, func(a, b svc) int { return strings.Compare(a.S.ID, b.S.ID) })
	out.Nodes = slices.Clone(s.Nodes)
	slices.SortFunc(out.Nodes, func(a, b orch.Node) int { return strings.Compare(a.Name, b.Name) })
	b, _ := json.Marshal(out)
	return string(b)
}

// logModels are the properties' models, one per schema, for a seed.
func logModels(seed int64) map[string]logModel {
	return map[string]logModel{
		"kubernetes": &dnsLogModel{c: clustergen.Generate(seed, clustergen.Small()), r: rand.New(rand.NewSource(seed))},
		"orch":       newOrchLogModel(seed),
	}
}

// logged is an instance whose snapshot writer is driven by hand (Flush
// after each change), and the truth it is checked against: the
// description of the source's state after each change since the log was
// last started, and the files as they were just before that.
type logged struct {
	t           *testing.T
	m           logModel
	e           *Endpointsvc
	path        string
	since       []string // the state after 0, 1, ... records of the current log
	compactions int64
	// the snapshot and log just before the last compaction
	oldSnap, oldLog []byte
}

func newLogged(t *testing.T, m logModel) *logged {
	l := &logged{t: t, m: m, path: t.TempDir() + "/snap"}
	l.e = m.plugin(l.path)
	l.e.snapshot = l.e.newSnapshotWriter()
	st := m.whole()
	l.e.apply(context.Background(), "test", st, true)
	l.e.snapshot.Flush()
	l.since = []string{m.describe(st)}
	l.compactions = l.e.snapshot.Compactions()
	return l
}

// change applies one random change, flushes, and notes what the files
// now hold.
func (l *logged) change() {
	l.t.Helper()
	snap, _ := os.ReadFile(l.path)
	lg, _ := os.ReadFile(persist.LogPath(l.path))
	p := l.m.step()
	l.e.applyPatch(context.Background(), p)
	l.e.snapshot.Flush()
	var buf bytes.Buffer
	if err := p.Snapshot(&buf); err != nil {
		l.t.Fatal(err)
	}
	var st feed.State
	var err error
	if st, err = l.e.schema.decodeSnapshot(buf.Bytes()); err != nil {
		l.t.Fatal(err)
	}
	now := l.m.describe(st)
	if c := l.e.snapshot.Compactions(); c != l.compactions {
		l.compactions, l.since, l.oldSnap, l.oldLog = c, nil, snap, lg
	}
	l.since = append(l.since, now)
}

// loaded is what a new instance serves from the files as they are.
func (l *logged) loaded() string {
	l.t.Helper()
	st, _, err := l.m.plugin(l.path).readSnapshot()
	if err != nil || st == nil {
		l.t.Fatalf("reading the snapshot: %v (%v)", err, st)
	}
	return l.m.describe(st)
}

// records are the byte offsets in the log where each of its records ends.
func (l *logged) records() (lg []byte, ends []int) {
	l.t.Helper()
	snap, err := os.ReadFile(l.path)
	if err != nil {
		l.t.Fatal(err)
	}
	if lg, err = os.ReadFile(persist.LogPath(l.path)); err != nil {
		l.t.Fatal(err)
	}
	_, ends, tail := persist.ParseLog(lg, persist.BaseOf(l.path, snap))
	if tail != nil {
		l.t.Fatalf("the log as written: %v", tail)
	}
	return lg, ends
}

// TestSnapshotLogEqualsState: for random changes in both schemas, each
// flushed as the writer would (appended to the log, or the snapshot
// written whole when the log passes its size), the snapshot with its
// log replayed is the source's state after every change, across
// compactions; a clean stop compacts the log and keeps the state.
func TestSnapshotLogEqualsState(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		for name, m := range logModels(seed) {
			t.Run(fmt.Sprint(name, seed), func(t *testing.T) {
				l := newLogged(t, m)
				appends := 0
				for i := range 120 {
					l.change()
					if got, want := l.loaded(), l.since[len(l.since)-1]; got != want {
						t.Fatalf("change %d: the snapshot and its log load\n%s\nwant\n%s", i, got, want)
					}
					if len(l.since) > 1 {
						appends++
					}
				}
				if l.compactions < 2 || appends < 40 {
					t.Fatalf("%d compactions, %d changes appended: the run did not exercise the log", l.compactions, appends)
				}
				want := l.since[len(l.since)-1]
				if _, ends := l.records(); len(ends) == 0 {
					l.change() // a record to compact
					want = l.since[len(l.since)-1]
				}
				before := l.compactions
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				l.e.snapshot.Run(ctx) // a clean stop
				if l.e.snapshot.Compactions() != before+1 {
					t.Fatalf("a clean stop with records in the log did not compact it")
				}
				if lg, ends := l.records(); len(ends) != 0 {
					t.Fatalf("after the compaction at stop the log holds %d records (%d bytes)", len(ends), len(lg))
				}
				if got := l.loaded(); got != want {
					t.Fatalf("after the compaction at stop the snapshot loads\n%s\nwant\n%s", got, want)
				}
			})
		}
	}
}

// TestSnapshotLogDamaged: a log cut at a random byte (a crash in the
// middle of an append) or with a random byte changed loads as the
// snapshot with exactly the whole records before the damage: never a
// table the source did not have.
func TestSnapshotLogDamaged(t *testing.T) {
	for _, seed := range []int64{4, 5} {
		for name, m := range logModels(seed) {
			t.Run(fmt.Sprint(name, seed), func(t *testing.T) {
				l := newLogged(t, m)
				for i := 0; len(l.since) < 6; i++ {
					if i > 200 {
						t.Fatalf("no log of 5 records in 200 changes")
					}
					l.change()
				}
				lg, ends := l.records()
				r := rand.New(rand.NewSource(seed))
				for range 40 {
					pos := r.Intn(len(lg) + 1)
					whole := 0 // records wholly before pos
					for _, end := range ends {
						if end <= pos {
							whole++
						}
					}
					damaged := lg[:pos]
					what := fmt.Sprintf("cut at byte %d of %d", pos, len(lg))
					if pos < len(lg) && r.Intn(2) == 0 {
						damaged = slices.Clone(lg)
						damaged[pos] ^= byte(1 + r.Intn(255))
						what = fmt.Sprintf("byte %d of %d changed", pos, len(lg))
					}
					if err := os.WriteFile(persist.LogPath(l.path), damaged, 0o644); err != nil {
						t.Fatal(err)
					}
					if got, want := l.loaded(), l.since[whole]; got != want {
						t.Fatalf("log %s: loads\n%s\nwant the snapshot with its %d whole records before it\n%s", what, got, whole, want)
					}
				}
			})
		}
	}
}

// TestSnapshotLogOtherBase: a log whose header names another snapshot (a
// crash between a compaction's snapshot and its new log) is ignored: the
// snapshot alone loads; the next instance's first write is whole, and its
// log then follows the new snapshot.
func TestSnapshotLogOtherBase(t *testing.T) {
	for name, m := range logModels(6) {
		t.Run(name, func(t *testing.T) {
			l := newLogged(t, m)
			for i := 0; l.oldLog == nil || len(l.since) < 3; i++ {
				if i > 300 {
					t.Fatalf("no compaction after a log with records in 300 changes")
				}
				l.change()
			}
			if _, ends := l.records(); len(ends) == 0 {
				t.Fatal("no records in the log")
			}
			// the log before the compaction, beside the snapshot it wrote
			if err := os.WriteFile(persist.LogPath(l.path), l.oldLog, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, want := l.loaded(), l.since[0]; got != want {
				t.Fatalf("a log of another snapshot: loads\n%s\nwant the snapshot alone\n%s", got, want)
			}
			// the resync: a new instance loads the snapshot, the source patches it
			e := m.plugin(l.path)
			e.loadSnapshot(context.Background())
			e.snapshot = e.newSnapshotWriter()
			p := m.step()
			e.applyPatch(context.Background(), p)
			e.snapshot.Flush()
			if e.snapshot.Compactions() != 1 {
				t.Fatalf("the new instance's first write: %d whole writes, want 1", e.snapshot.Compactions())
			}
			var buf bytes.Buffer
			if err := p.Snapshot(&buf); err != nil {
				t.Fatal(err)
			}
			st, err := e.schema.decodeSnapshot(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if _, ends := l.records(); len(ends) != 0 {
				t.Fatalf("the new log holds %d records", len(ends))
			}
			if got, want := l.loaded(), m.describe(st); got != want {
				t.Fatalf("after the resync: loads\n%s\nwant\n%s", got, want)
			}
		})
	}
}
