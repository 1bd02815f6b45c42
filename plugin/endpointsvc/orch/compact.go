package orch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
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
	st, err := DecodeDocument(b)
	if err != nil {
		return nil, err
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return st, nil
}

// DecodeDocument parses a state document or its compact form as written,
// without this model's rules (Validate): an older meshdns's schema
// kubernetes wrote its snapshots in these forms, and the k8sdns model
// reads them with its own.
func DecodeDocument(b []byte) (*State, error) {
	if !bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`{"format":`)) {
		st := new(State)
		if err := strictJSON(b, st); err != nil {
			return nil, err
		}
		return st, nil
	}
	var doc compactDoc
	if err := strictJSON(b, &doc); err != nil {
		return nil, err
	}
	if doc.Format != compactFormat {
		return nil, fmt.Errorf("state: unknown format %q", doc.Format)
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
	return st, nil
}

// Len is the number of services (a state without is empty).
func (st *State) Len() int { return len(st.Services) }

// Snapshot writes st in the compact form.
func (st *State) Snapshot(w io.Writer) error {
	cw, err := NewCompactWriter(w, st.Nodes, st.Namespaces)
	if err != nil {
		return err
	}
	return st.compact(cw)
}

// appendSnapshot appends st's snapshot (Snapshot's) to b.
func (st *State) appendSnapshot(b []byte) []byte { return appendCompact(b, st, st.compact) }

// appendCompact appends the compact form that starts with st's nodes and
// namespaces and whose services and end write writes to b.
func appendCompact(b []byte, st *State, write func(*CompactWriter) error) []byte {
	cw, _ := newCompactWriter(jsonw.Appender(b), st.Nodes, st.Namespaces) // appending fails on nothing
	_ = write(cw)
	return cw.Buf
}

// compact writes st's services and tasks with cw and ends it.
func (st *State) compact(cw *CompactWriter) error {
	if len(st.Services) == 1 { // a change log record, most often: no index
		if err := cw.Service(&st.Services[0]); err != nil {
			return err
		}
		for j := range st.Tasks {
			if st.Tasks[j].ServiceID == st.Services[0].ID {
				cw.task(&st.Tasks[j])
			}
		}
		return cw.End()
	}
	group, order, end := st.tasksByService()
	for i := range st.Services {
		if err := cw.Service(&st.Services[i]); err != nil {
			return err
		}
		g, start := group[st.Services[i].ID], 0
		if g > 0 {
			start = end[g-1]
		}
		for _, j := range order[start:end[g]] {
			cw.task(&st.Tasks[j])
		}
	}
	return cw.End()
}

// tasksByService orders st's tasks by service, with one counting sort
// (two arrays, not one growing per service): group numbers the services'
// IDs, and group g's tasks are order[end[g-1]:end[g]] (from 0 for the
// first), indexes in st.Tasks in their order.
func (st *State) tasksByService() (group map[string]int, order, end []int) {
	group = make(map[string]int, len(st.Services))
	for i := range st.Services {
		if _, ok := group[st.Services[i].ID]; !ok {
			group[st.Services[i].ID] = len(group)
		}
	}
	end = make([]int, len(group)) // counts, then where each group starts, then where it ends
	for j := range st.Tasks {
		if g, ok := group[st.Tasks[j].ServiceID]; ok {
			end[g]++
		}
	}
	sum := 0
	for g, n := range end {
		end[g] = sum
		sum += n
	}
	order = make([]int, sum)
	for j := range st.Tasks {
		if g, ok := group[st.Tasks[j].ServiceID]; ok {
			order[end[g]] = j
			end[g]++
		}
	}
	return group, order, end
}

// task writes t with Task.
func (cw *CompactWriter) task(t *Task) {
	cw.Task(CompactTask{Node: t.NodeID, Address: t.Address, Hostname: t.Hostname, Desired: t.DesiredStatus, Actual: t.ActualStatus, Ports: t.Ports})
}

// CompactTask is a task as the compact form writes it: its address is
// IP, or Address when IP is not valid.
type CompactTask struct {
	Node, Hostname, Desired, Actual string
	Address                         string
	IP                              netip.Addr
	Ports                           []TaskPort
}

// CompactWriter streams the compact form: the nodes and namespaces first,
// then one service and its tasks at a time, so that a large cluster's
// snapshot is never held in memory whole, nor a task made for it.
type CompactWriter struct {
	*jsonw.Writer
	services int
	tasks    int         // tasks of the current service
	group    CompactTask // the current group's statuses and ports (its own copy of them)
}

// NewCompactWriter starts the compact form of a state with nodes and
// namespaces; its services and tasks follow.
func NewCompactWriter(w io.Writer, nodes []Node, namespaces []string) (*CompactWriter, error) {
	return newCompactWriter(jsonw.NewWriter(w), nodes, namespaces)
}

func newCompactWriter(jw *jsonw.Writer, nodes []Node, namespaces []string) (*CompactWriter, error) {
	cw := &CompactWriter{Writer: jw}
	cw.Buf = append(cw.Buf, `{"format":"`+compactFormat+`","nodes":`...)
	cw.Buf = appendNodes(cw.Buf, nodes)
	if len(namespaces) > 0 {
		cw.Buf = append(cw.Buf, `,"namespaces":`...)
		if err := cw.json(namespaces); err != nil {
			return nil, err
		}
	}
	cw.Buf = append(cw.Buf, `,"services":[`...)
	return cw, nil
}

// appendNodes appends nodes as encoding/json writes them (a change
// log record carries a few: written by hand, not by reflection).
func appendNodes(b []byte, nodes []Node) []byte {
	b = append(b, '[')
	for i := range nodes {
		n := &nodes[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = jsonw.AppendString(b, n.ID)
		b = append(b, `,"name":`...)
		b = jsonw.AppendString(b, n.Name)
		b = append(b, `,"address":`...)
		b = jsonw.AppendString(b, n.Address)
		b = append(b, `,"status":`...)
		b = jsonw.AppendString(b, n.Status)
		b = append(b, '}')
	}
	return append(b, ']')
}

// json appends v's encoding.
func (cw *CompactWriter) json(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cw.Buf = append(cw.Buf, b...)
	return nil
}

// Service ends the previous service and starts svc; its tasks follow.
func (cw *CompactWriter) Service(svc *Service) error {
	if err := cw.endService(); err != nil {
		return err
	}
	if cw.services > 0 {
		cw.Buf = append(cw.Buf, ",\n"...)
	}
	cw.services++
	cw.Buf = append(cw.Buf, `{"service":`...)
	cw.Buf = appendService(cw.Buf, svc)
	cw.Buf = append(cw.Buf, `,"groups":[`...)
	cw.tasks = 0
	return nil
}

// Task writes a task of the current service: in the current group when it
// shares its statuses and ports, else in a new one. The caller may reuse
// t.Ports once it returns (the group keeps a copy).
func (cw *CompactWriter) Task(t CompactTask) {
	g := &cw.group
	if cw.tasks == 0 || t.Desired != g.Desired || t.Actual != g.Actual || !samePorts(t.Ports, g.Ports) {
		if cw.tasks > 0 {
			cw.Buf = append(cw.Buf, "]},"...)
		}
		ports := append(g.Ports[:0], t.Ports...)
		*g = t
		g.Ports = ports
		cw.Buf = append(cw.Buf, `{"desired":`...)
		cw.Buf = jsonw.AppendString(cw.Buf, t.Desired)
		cw.Buf = append(cw.Buf, `,"actual":`...)
		cw.Buf = jsonw.AppendString(cw.Buf, t.Actual)
		if len(t.Ports) > 0 {
			cw.Buf = append(cw.Buf, `,"ports":[`...)
			for i, p := range t.Ports {
				if i > 0 {
					cw.Buf = append(cw.Buf, ',')
				}
				cw.Buf = appendTaskPort(cw.Buf, p)
			}
			cw.Buf = append(cw.Buf, ']')
		}
		cw.Buf = append(cw.Buf, `,"tasks":[`...)
	} else {
		cw.Buf = append(cw.Buf, ',')
	}
	cw.tasks++
	cw.Buf = append(cw.Buf, '[')
	cw.Buf = jsonw.AppendString(cw.Buf, t.Node)
	cw.Buf = append(cw.Buf, ',')
	if t.IP.IsValid() {
		cw.Buf = append(cw.Buf, '"')
		cw.Buf = t.IP.AppendTo(cw.Buf)
		cw.Buf = append(cw.Buf, '"')
	} else {
		cw.Buf = jsonw.AppendString(cw.Buf, t.Address)
	}
	cw.Buf = append(cw.Buf, ',')
	cw.Buf = jsonw.AppendString(cw.Buf, t.Hostname)
	cw.Buf = append(cw.Buf, ']')
}

// appendService appends svc as json.Marshal encodes it (a test holds the
// two alike), without its reflection: a snapshot writes thousands.
func appendService(b []byte, svc *Service) []byte {
	b = append(b, `{"id":`...)
	b = jsonw.AppendString(b, svc.ID)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, svc.Name)
	if svc.Namespace != "" {
		b = append(b, `,"namespace":`...)
		b = jsonw.AppendString(b, svc.Namespace)
	}
	b = append(b, `,"status":`...)
	b = jsonw.AppendString(b, svc.Status)
	if len(svc.Ports) > 0 {
		b = append(b, `,"ports":[`...)
		for i, p := range svc.Ports {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendPortHead(b, p.Name, p.Protocol)
			b = appendIntField(b, `"target_port":`, p.TargetPort, false)
			b = appendIntField(b, `,"published_port":`, p.PublishedPort, true)
			b = appendIntField(b, `,"port":`, p.Port, true)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(svc.ClusterIPs) > 0 {
		b = append(b, `,"cluster_ips":[`...)
		for i, a := range svc.ClusterIPs {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonw.AppendString(b, a)
		}
		b = append(b, ']')
	}
	if svc.Headless {
		b = append(b, `,"headless":true`...)
	}
	if svc.ExternalName != "" {
		b = append(b, `,"external_name":`...)
		b = jsonw.AppendString(b, svc.ExternalName)
	}
	return append(b, '}')
}

// appendTaskPort appends p as TaskPort's JSON encoding.
func appendTaskPort(b []byte, p TaskPort) []byte {
	b = appendPortHead(b, p.Name, p.Protocol)
	b = appendIntField(b, `"container_port":`, p.ContainerPort, false)
	b = appendIntField(b, `,"host_port":`, p.HostPort, true)
	return append(b, '}')
}

// appendPortHead opens a port's object with its name and protocol, each
// left out when empty (omitempty), each followed by a comma.
func appendPortHead(b []byte, name, proto string) []byte {
	b = append(b, '{')
	if name != "" {
		b = append(b, `"name":`...)
		b = jsonw.AppendString(b, name)
		b = append(b, ',')
	}
	if proto != "" {
		b = append(b, `"protocol":`...)
		b = jsonw.AppendString(b, proto)
		b = append(b, ',')
	}
	return b
}

// appendIntField appends key (with its quotes, colon and any leading
// comma) and n, or nothing when n is 0 and omitZero (omitempty).
func appendIntField(b []byte, key string, n int, omitZero bool) []byte {
	if omitZero && n == 0 {
		return b
	}
	b = append(b, key...)
	return strconv.AppendInt(b, int64(n), 10)
}

// endService closes the current service, if any.
func (cw *CompactWriter) endService() error {
	if cw.services == 0 {
		return nil
	}
	if cw.tasks > 0 {
		cw.Buf = append(cw.Buf, "]}"...)
	}
	cw.Buf = append(cw.Buf, "]}"...)
	cw.tasks = 0
	return cw.Flush(false)
}

// End closes the document.
func (cw *CompactWriter) End() error {
	if err := cw.endService(); err != nil {
		return err
	}
	cw.services = 0
	cw.Buf = append(cw.Buf, "]}\n"...)
	return cw.Flush(true)
}

// samePorts reports whether two tasks share their ports: the same slice
// (the tasks of one EndpointSlice), or equal ones.
func samePorts(a, b []TaskPort) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
