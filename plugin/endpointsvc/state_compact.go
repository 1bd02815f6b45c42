package endpointsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The snapshot's compact form. A task is written as [node_id, address,
// hostname] in a group of its service's tasks that share desired and actual
// status and ports (the endpoints of one EndpointSlice), so that an
// endpoint costs ~25 bytes on disk instead of the ~200 of a task in the
// state document: 200,000 endpoints are ~6 MB. Task ids and versions are
// not kept (no answer reads them); decoding numbers the tasks
// "<service id>#<n>". The form is read only from a snapshot; state
// documents of the file and orch sources stay in DecodeState's form, which
// a snapshot may also hold (one written by an older meshdns).
//
//	{"format":"meshdns-state-compact/1","nodes":[…],"namespaces":[…],
//	 "services":[{"service":{…},"groups":[{"desired":"running",
//	 "actual":"healthy","ports":[…],"tasks":[["n1","10.1.0.5",""],…]}]}]}
const compactFormat = "meshdns-state-compact/1"

type compactDoc struct {
	Format     string           `json:"format"`
	Nodes      []Node           `json:"nodes"`
	Namespaces []string         `json:"namespaces,omitempty"`
	Services   []compactService `json:"services"`
}

type compactService struct {
	Service Service        `json:"service"`
	Groups  []compactGroup `json:"groups,omitempty"`
}

type compactGroup struct {
	Desired string      `json:"desired"`
	Actual  string      `json:"actual"`
	Ports   []TaskPort  `json:"ports,omitempty"`
	Tasks   [][3]string `json:"tasks"` // node id, address, hostname
}

// DecodeSnapshot parses and validates a snapshot: the compact form, or a
// state document (DecodeState's form).
func DecodeSnapshot(b []byte) (*State, error) {
	if !bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`{"format":`)) {
		return DecodeState(b)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var doc compactDoc
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if doc.Format != compactFormat {
		return nil, fmt.Errorf("state: unknown format %q", doc.Format)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("state: trailing data after the JSON document")
	}
	st := &State{Nodes: doc.Nodes, Namespaces: doc.Namespaces, Services: make([]Service, 0, len(doc.Services))}
	for _, cs := range doc.Services {
		st.Services = append(st.Services, cs.Service)
		n := 0
		for _, g := range cs.Groups {
			for _, x := range g.Tasks {
				st.Tasks = append(st.Tasks, Task{ID: cs.Service.ID + "#" + strconv.Itoa(n), ServiceID: cs.Service.ID,
					NodeID: x[0], Address: x[1], Hostname: x[2], DesiredStatus: g.Desired, ActualStatus: g.Actual, Ports: g.Ports})
				n++
			}
		}
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return st, nil
}

// encodeCompact writes st in the compact form.
func (st *State) encodeCompact(w io.Writer) error {
	byService := make(map[string][]int, len(st.Services))
	for i := range st.Tasks {
		byService[st.Tasks[i].ServiceID] = append(byService[st.Tasks[i].ServiceID], i)
	}
	cw, err := newCompactWriter(w, st.Nodes, st.Namespaces)
	if err != nil {
		return err
	}
	var tasks []Task
	for i := range st.Services {
		tasks = tasks[:0]
		for _, j := range byService[st.Services[i].ID] {
			tasks = append(tasks, st.Tasks[j])
		}
		if err := cw.service(&st.Services[i], tasks); err != nil {
			return err
		}
	}
	return cw.end()
}

// compactWriter streams the compact form: the nodes and namespaces first,
// then one service (with its tasks) at a time, so that a large cluster's
// snapshot is never held in memory whole.
type compactWriter struct {
	w     io.Writer
	buf   []byte
	first bool
}

func newCompactWriter(w io.Writer, nodes []Node, namespaces []string) (*compactWriter, error) {
	cw := &compactWriter{w: w, buf: make([]byte, 0, 4096), first: true}
	cw.buf = append(cw.buf, `{"format":"`+compactFormat+`","nodes":`...)
	if nodes == nil {
		nodes = []Node{}
	}
	if err := cw.json(nodes); err != nil {
		return nil, err
	}
	if len(namespaces) > 0 {
		cw.buf = append(cw.buf, `,"namespaces":`...)
		if err := cw.json(namespaces); err != nil {
			return nil, err
		}
	}
	cw.buf = append(cw.buf, `,"services":[`...)
	return cw, nil
}

// json appends v's encoding.
func (cw *compactWriter) json(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cw.buf = append(cw.buf, b...)
	return nil
}

// service writes svc and its tasks (any order; consecutive tasks that
// share statuses and ports share a group).
func (cw *compactWriter) service(svc *Service, tasks []Task) error {
	if !cw.first {
		cw.buf = append(cw.buf, ",\n"...)
	}
	cw.first = false
	cw.buf = append(cw.buf, `{"service":`...)
	if err := cw.json(svc); err != nil {
		return err
	}
	cw.buf = append(cw.buf, `,"groups":[`...)
	for i := range tasks {
		t := &tasks[i]
		if i == 0 || t.DesiredStatus != tasks[i-1].DesiredStatus || t.ActualStatus != tasks[i-1].ActualStatus || !samePorts(t.Ports, tasks[i-1].Ports) {
			if i > 0 {
				cw.buf = append(cw.buf, "]},"...)
			}
			cw.buf = append(cw.buf, `{"desired":`...)
			cw.buf = appendJSONString(cw.buf, t.DesiredStatus)
			cw.buf = append(cw.buf, `,"actual":`...)
			cw.buf = appendJSONString(cw.buf, t.ActualStatus)
			if len(t.Ports) > 0 {
				cw.buf = append(cw.buf, `,"ports":`...)
				if err := cw.json(t.Ports); err != nil {
					return err
				}
			}
			cw.buf = append(cw.buf, `,"tasks":[`...)
		} else {
			cw.buf = append(cw.buf, ',')
		}
		cw.buf = append(cw.buf, '[')
		cw.buf = appendJSONString(cw.buf, t.NodeID)
		cw.buf = append(cw.buf, ',')
		cw.buf = appendJSONString(cw.buf, t.Address)
		cw.buf = append(cw.buf, ',')
		cw.buf = appendJSONString(cw.buf, t.Hostname)
		cw.buf = append(cw.buf, ']')
	}
	if len(tasks) > 0 {
		cw.buf = append(cw.buf, "]}"...)
	}
	cw.buf = append(cw.buf, "]}"...)
	return cw.flush(false)
}

// end closes the document.
func (cw *compactWriter) end() error {
	cw.buf = append(cw.buf, "]}\n"...)
	return cw.flush(true)
}

func (cw *compactWriter) flush(always bool) error {
	if !always && len(cw.buf) < 4096 {
		return nil
	}
	_, err := cw.w.Write(cw.buf)
	cw.buf = cw.buf[:0]
	return err
}

// appendJSONString appends s as a JSON string: printable ASCII without
// quotes or backslashes as is (names, addresses, statuses), anything else
// through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
