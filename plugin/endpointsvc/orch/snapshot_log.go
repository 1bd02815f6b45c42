package orch

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// The change log's record of a patch (the snapshot's change log, package
// persist, frames it): a head line, then the patch's State in the
// snapshot's compact form (compact.go: the services that changed with all
// their tasks, ~25 bytes a task, and the nodes that changed):
//
//	{"patch":1,"removed":[["shop","web"]],"dirty_nodes":["n1"]}
//	{"format":"meshdns-state-compact/1","nodes":[…],"services":[…]}
//
// "removed" lists the services gone ([namespace, name]), "dirty_nodes"
// the names of the nodes that changed (their entries are the state's, or
// gone). Each part is the whole new content of what it names, so a record
// replayed onto a snapshot that holds it already changes nothing. A task
// may run on a node the record does not carry: a node that did not change
// is the state's the record is replayed onto (every node a patch does not
// mark dirty is in the table already, as the source maps nodes), and the
// replayed state is validated whole.

type logHead struct {
	Patch      int         `json:"patch"`
	Removed    [][2]string `json:"removed,omitempty"`
	DirtyNodes []string    `json:"dirty_nodes,omitempty"`
}

// AppendRecord appends p's change-log record (AppendPatchRecord).
func (p *Patch) AppendRecord(b []byte) []byte { return AppendPatchRecord(b, p) }

// AppendPatchRecord appends p's change-log record.
func AppendPatchRecord(b []byte, p *Patch) []byte {
	b = append(b, `{"patch":1`...)
	if len(p.Removed) > 0 {
		b = append(b, `,"removed":[`...)
		for i, k := range p.Removed {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = jsonw.AppendString(b, k.Namespace)
			b = append(b, ',')
			b = jsonw.AppendString(b, k.Name)
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	if len(p.DirtyNodes) > 0 {
		b = append(b, `,"dirty_nodes":[`...)
		for i, n := range slices.Sorted(maps.Keys(p.DirtyNodes)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonw.AppendString(b, n)
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	st := *p.State
	// the nodes that changed only: the others are on disk already (and
	// without any, State.Nodes is not read: a source may have reused it)
	st.Nodes = nil
	if len(p.DirtyNodes) > 0 {
		for _, n := range p.State.Nodes {
			if p.DirtyNodes[n.Name] {
				st.Nodes = append(st.Nodes, n)
			}
		}
	}
	if p.WriteServices == nil {
		return st.appendSnapshot(b)
	}
	return appendCompact(b, &st, func(cw *CompactWriter) error {
		if err := p.WriteServices(cw); err != nil {
			return err
		}
		return cw.End()
	})
}

// DecodePatchRecord reads a change-log record into a patch (its State,
// Removed and DirtyNodes); its State is checked as a snapshot is, but for
// its tasks' nodes, which may be outside it (Replay validates the
// replayed state whole).
func DecodePatchRecord(b []byte) (*Patch, error) {
	head, doc, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return nil, errors.New("patch record: no state after the head")
	}
	var h logHead
	if err := strictJSON(head, &h); err != nil {
		return nil, fmt.Errorf("patch record: head: %w", err)
	}
	if h.Patch != 1 {
		return nil, fmt.Errorf("patch record: version %d, want 1", h.Patch)
	}
	st, err := DecodeDocument(doc)
	if err == nil {
		err = st.validate(true)
	}
	if err != nil {
		return nil, fmt.Errorf("patch record: %w", err)
	}
	p := &Patch{State: st, DirtyNodes: make(map[string]bool, len(h.DirtyNodes))}
	for _, k := range h.Removed {
		p.Removed = append(p.Removed, SvcKey{Namespace: k[0], Name: k[1]})
	}
	for _, n := range h.DirtyNodes {
		p.DirtyNodes[n] = true
	}
	return p, nil
}

// replay is a state being replayed: services by key, in the order they
// came, each with its tasks, and nodes by name.
type replay struct {
	order    []SvcKey
	services map[SvcKey]Service
	tasks    map[string][]Task // by service id
	nodes    map[string]Node
	nodeSeq  []string
}

func svcKey(s *Service) SvcKey {
	ns := s.Namespace
	if ns == "" {
		ns = "default"
	}
	return SvcKey{Namespace: ns, Name: s.Name}
}

func newReplay(st *State) *replay {
	r := &replay{services: make(map[SvcKey]Service, len(st.Services)), tasks: map[string][]Task{}, nodes: map[string]Node{}}
	for i := range st.Services {
		k := svcKey(&st.Services[i])
		r.order = append(r.order, k)
		r.services[k] = st.Services[i]
	}
	for _, t := range st.Tasks {
		r.tasks[t.ServiceID] = append(r.tasks[t.ServiceID], t)
	}
	for _, n := range st.Nodes {
		r.nodes[n.Name] = n
		r.nodeSeq = append(r.nodeSeq, n.Name)
	}
	return r
}

// apply applies p as Table.Patched does: the services of p.State (each
// with all its tasks) replace or join the state's, those of p.Removed go,
// and the nodes named in p.DirtyNodes become p.State's of that name (or
// go); another node of p.State joins when there is none of its name.
// Work in proportion to p.
func (r *replay) apply(p *Patch) {
	drop := func(k SvcKey) {
		if s, ok := r.services[k]; ok {
			delete(r.tasks, s.ID)
			delete(r.services, k)
		}
	}
	for _, k := range p.Removed {
		drop(k)
	}
	for i := range p.State.Services {
		s := p.State.Services[i]
		k := svcKey(&s)
		if _, ok := r.services[k]; !ok {
			r.order = append(r.order, k)
		}
		drop(k)
		r.services[k] = s
	}
	for _, t := range p.State.Tasks {
		r.tasks[t.ServiceID] = append(r.tasks[t.ServiceID], t)
	}
	for n := range p.DirtyNodes {
		delete(r.nodes, n)
	}
	for _, n := range p.State.Nodes {
		if _, ok := r.nodes[n.Name]; !ok {
			r.nodes[n.Name] = n
			r.nodeSeq = append(r.nodeSeq, n.Name)
		}
	}
}

// state makes the replayed state, validated.
func (r *replay) state(namespaces []string) (*State, error) {
	out := &State{Namespaces: namespaces}
	seen := map[SvcKey]bool{}
	for _, k := range r.order {
		s, ok := r.services[k]
		if !ok || seen[k] {
			continue
		}
		seen[k] = true
		out.Services = append(out.Services, s)
		out.Tasks = append(out.Tasks, r.tasks[s.ID]...)
	}
	named := map[string]bool{}
	for _, name := range r.nodeSeq {
		if n, ok := r.nodes[name]; ok && !named[name] {
			named[name] = true
			out.Nodes = append(out.Nodes, n)
		}
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// Replay applies change-log records, in order, to the state of a
// snapshot, and returns the state they lead to and how many it applied:
// all, or those before the first that does not decode (err says which);
// a result that does not validate returns st and 0 applied.
func Replay(st *State, recs [][]byte) (*State, int, error) {
	if len(recs) == 0 {
		return st, 0, nil
	}
	r := newReplay(st)
	n := 0
	var rerr error
	for i, b := range recs {
		p, err := DecodePatchRecord(b)
		if err != nil {
			rerr = fmt.Errorf("change log record %d: %w", i+1, err)
			break
		}
		r.apply(p)
		n++
	}
	out, err := r.state(st.Namespaces)
	if err != nil {
		return st, 0, fmt.Errorf("change log: the replayed state: %w", err)
	}
	return out, n, rerr
}
