package orch

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// churnModel is a random cluster that changes a few services or nodes at
// a time, as a Kubernetes source sees it: it yields each step's whole state
// and the patch of that step.
type churnModel struct {
	r        *rand.Rand
	services map[string]*Service
	tasks    map[string][]Task // by service id
	nodes    map[string]Node
	next     int
}

func newChurnModel(seed uint64) *churnModel {
	m := &churnModel{r: rand.New(rand.NewPCG(seed, 1)), services: map[string]*Service{}, tasks: map[string][]Task{}, nodes: map[string]Node{}}
	for i := range 8 {
		m.nodes[fmt.Sprintf("n%d", i)] = Node{ID: fmt.Sprintf("n%d", i), Name: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("10.0.0.%d", i+1), Status: "ready"}
	}
	for range 40 {
		m.addService()
	}
	return m
}

func (m *churnModel) addService() string {
	m.next++
	ns := fmt.Sprintf("ns%d", m.r.IntN(4))
	name := fmt.Sprintf("svc%d", m.next)
	s := &Service{ID: ns + "/" + name, Name: name, Namespace: ns, Status: "active",
		Ports: []ServicePort{{Name: "http", Protocol: "tcp", TargetPort: 80, Port: 80, PublishedPort: 30000 + m.next%1000}}}
	m.services[s.ID] = s
	m.retask(s.ID)
	return s.ID
}

// retask gives service id a new random set of tasks.
func (m *churnModel) retask(id string) {
	var ts []Task
	for j := range m.r.IntN(6) {
		t := Task{ID: fmt.Sprintf("%s/%d/%d", id, m.next, j), ServiceID: id, DesiredStatus: StatusRunning, ActualStatus: StatusHealthy,
			Ports:   []TaskPort{{Name: "http", Protocol: "tcp", ContainerPort: 80}},
			Address: fmt.Sprintf("10.244.%d.%d", m.r.IntN(3), m.r.IntN(40)+1)} // addresses repeat across services
		if m.r.IntN(4) == 0 {
			t.ActualStatus = StatusUnhealthy
		}
		t.NodeID = fmt.Sprintf("n%d", m.r.IntN(len(m.nodes)+1)) // n8 does not exist: no node
		if _, ok := m.nodes[t.NodeID]; !ok {
			t.NodeID = ""
		}
		ts = append(ts, t)
	}
	m.tasks[id] = ts
}

// state is the whole state, services sorted by id.
func (m *churnModel) state() *State {
	st := &State{}
	ids := make([]string, 0, len(m.services))
	for id := range m.services {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st.Services = append(st.Services, *m.services[id])
		st.Tasks = append(st.Tasks, m.tasks[id]...)
	}
	names := make([]string, 0, len(m.nodes))
	for n := range m.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		st.Nodes = append(st.Nodes, m.nodes[n])
	}
	if err := st.Validate(); err != nil {
		panic(err)
	}
	return st
}

// step changes a few services (or, for schema orch, a node) and returns
// the patch a source would send.
func (m *churnModel) step() (*State, []SvcKey, map[string]bool) {
	changed := map[string]bool{}
	var removed []SvcKey
	dirty := map[string]bool{}
	for range m.r.IntN(4) + 1 {
		ids := make([]string, 0, len(m.services))
		for id := range m.services {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		switch op := m.r.IntN(10); {
		case op < 2:
			changed[m.addService()] = true
		case op < 4 && len(ids) > 0:
			id := ids[m.r.IntN(len(ids))]
			s := m.services[id]
			removed = append(removed, SvcKey{s.Namespace, s.Name})
			delete(m.services, id)
			delete(m.tasks, id)
			delete(changed, id)
		case op < 5:
			n := fmt.Sprintf("n%d", m.r.IntN(len(m.nodes)))
			node := m.nodes[n]
			if node.Status == "ready" {
				node.Status = "down"
			} else {
				node.Status = "ready"
			}
			if m.r.IntN(2) == 0 {
				node.Address = fmt.Sprintf("10.1.0.%d", m.r.IntN(200)+1)
			}
			m.nodes[n] = node
			dirty[n] = true
		case len(ids) > 0:
			id := ids[m.r.IntN(len(ids))]
			m.retask(id)
			changed[id] = true
		}
	}
	for id, ts := range m.tasks { // every service with a task on a dirty node
		for _, t := range ts {
			if dirty[t.NodeID] {
				changed[id] = true
			}
		}
	}
	p := &State{}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range changed {
			if !yield(id) {
				return
			}
		}
	})
	nodes := map[string]bool{}
	for n := range dirty {
		nodes[n] = true
	}
	for _, id := range ids {
		p.Services = append(p.Services, *m.services[id])
		p.Tasks = append(p.Tasks, m.tasks[id]...)
		for _, t := range m.tasks[id] {
			if t.NodeID != "" {
				nodes[t.NodeID] = true
			}
		}
	}
	for n := range nodes {
		p.Nodes = append(p.Nodes, m.nodes[n])
	}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return p, removed, dirty
}

// TestPatchEqualsWholeBuild: over 300 random steps (services added,
// removed, their endpoints changed, nodes going down or moving), the table
// patched step by step equals the table built whole from each step's
// state, in node and in endpoint mode.
func TestPatchEqualsWholeBuild(t *testing.T) {
	zones := []string{"cluster.test."}
	for _, endpointMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("endpoint=%v", endpointMode), func(t *testing.T) {
			m := newChurnModel(7)
			tbl := BuildTable(m.state(), zones, false, endpointMode, nil)
			for i := range 300 {
				p, removed, dirty := m.step()
				tbl = tbl.Patched(&Patch{State: p, Removed: removed, DirtyNodes: dirty}, zones, false, endpointMode, nil)
				want := BuildTable(m.state(), zones, false, endpointMode, nil)
				if a, b := contents(tbl), contents(want); !reflect.DeepEqual(a, b) {
					t.Fatalf("step %d: patched table differs from the whole build:\n%+v\n%+v", i, a, b)
				}
			}
		})
	}
}

// tableContents is what a table holds, whatever the shape of its tries.
type tableContents struct {
	services          map[SvcKey]*svcEntry
	nodes             map[string]*nodeEntry
	n, eps, conflicts int
}

func contents(t *Table) tableContents {
	c := tableContents{services: map[SvcKey]*svcEntry{}, nodes: map[string]*nodeEntry{}, n: t.nServices, eps: t.nEndpts, conflicts: t.nConflicts}
	for k, v := range t.services.All() {
		c.services[k] = v
	}
	for k, v := range t.nodes.All() {
		c.nodes[k] = v
	}
	return c
}
