package endpointsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
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
	for i := range st.Services {
		if err := cw.service(&st.Services[i]); err != nil {
			return err
		}
		for _, j := range byService[st.Services[i].ID] {
			t := &st.Tasks[j]
			cw.task(compactTask{node: t.NodeID, address: t.Address, hostname: t.Hostname, desired: t.DesiredStatus, actual: t.ActualStatus, ports: t.Ports})
		}
	}
	return cw.end()
}

// compactTask is a task as the compact form writes it: its address is ip,
// or address when ip is not valid.
type compactTask struct {
	node, hostname, desired, actual string
	address                         string
	ip                              netip.Addr
	ports                           []TaskPort
}

// compactWriter streams the compact form: the nodes and namespaces first,
// then one service and its tasks at a time, so that a large cluster's
// snapshot is never held in memory whole, nor a task made for it.
type compactWriter struct {
	w        io.Writer
	buf      []byte
	services int
	tasks    int         // tasks of the current service
	group    compactTask // the current group's statuses and ports
}

func newCompactWriter(w io.Writer, nodes []Node, namespaces []string) (*compactWriter, error) {
	cw := &compactWriter{w: w, buf: make([]byte, 0, 8192)}
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

// service ends the previous service and starts svc; its tasks follow.
func (cw *compactWriter) service(svc *Service) error {
	if err := cw.endService(); err != nil {
		return err
	}
	if cw.services > 0 {
		cw.buf = append(cw.buf, ",\n"...)
	}
	cw.services++
	cw.buf = append(cw.buf, `{"service":`...)
	cw.buf = appendService(cw.buf, svc)
	cw.buf = append(cw.buf, `,"groups":[`...)
	cw.tasks = 0
	return nil
}

// task writes a task of the current service: in the current group when it
// shares its statuses and ports, else in a new one.
func (cw *compactWriter) task(t compactTask) {
	g := &cw.group
	if cw.tasks == 0 || t.desired != g.desired || t.actual != g.actual || !samePorts(t.ports, g.ports) {
		if cw.tasks > 0 {
			cw.buf = append(cw.buf, "]},"...)
		}
		*g = t
		cw.buf = append(cw.buf, `{"desired":`...)
		cw.buf = appendJSONString(cw.buf, t.desired)
		cw.buf = append(cw.buf, `,"actual":`...)
		cw.buf = appendJSONString(cw.buf, t.actual)
		if len(t.ports) > 0 {
			cw.buf = append(cw.buf, `,"ports":[`...)
			for i, p := range t.ports {
				if i > 0 {
					cw.buf = append(cw.buf, ',')
				}
				cw.buf = appendTaskPort(cw.buf, p)
			}
			cw.buf = append(cw.buf, ']')
		}
		cw.buf = append(cw.buf, `,"tasks":[`...)
	} else {
		cw.buf = append(cw.buf, ',')
	}
	cw.tasks++
	cw.buf = append(cw.buf, '[')
	cw.buf = appendJSONString(cw.buf, t.node)
	cw.buf = append(cw.buf, ',')
	if t.ip.IsValid() {
		cw.buf = append(cw.buf, '"')
		cw.buf = t.ip.AppendTo(cw.buf)
		cw.buf = append(cw.buf, '"')
	} else {
		cw.buf = appendJSONString(cw.buf, t.address)
	}
	cw.buf = append(cw.buf, ',')
	cw.buf = appendJSONString(cw.buf, t.hostname)
	cw.buf = append(cw.buf, ']')
}

// appendService appends svc as json.Marshal encodes it (a test holds the
// two alike), without its reflection: a snapshot writes thousands.
func appendService(b []byte, svc *Service) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, svc.ID)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, svc.Name)
	if svc.Namespace != "" {
		b = append(b, `,"namespace":`...)
		b = appendJSONString(b, svc.Namespace)
	}
	b = append(b, `,"status":`...)
	b = appendJSONString(b, svc.Status)
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
			b = appendJSONString(b, a)
		}
		b = append(b, ']')
	}
	if svc.Headless {
		b = append(b, `,"headless":true`...)
	}
	if svc.ExternalName != "" {
		b = append(b, `,"external_name":`...)
		b = appendJSONString(b, svc.ExternalName)
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
		b = appendJSONString(b, name)
		b = append(b, ',')
	}
	if proto != "" {
		b = append(b, `"protocol":`...)
		b = appendJSONString(b, proto)
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
func (cw *compactWriter) endService() error {
	if cw.services == 0 {
		return nil
	}
	if cw.tasks > 0 {
		cw.buf = append(cw.buf, "]}"...)
	}
	cw.buf = append(cw.buf, "]}"...)
	cw.tasks = 0
	return cw.flush(false)
}

// end closes the document.
func (cw *compactWriter) end() error {
	if err := cw.endService(); err != nil {
		return err
	}
	cw.services = 0
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
