package k8sdns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// The snapshot form of a Cluster: every namespace, Service and
// EndpointSlice with every endpoint's addresses, hostname, node, target
// Pod and conditions, so that a restart answers from it exactly as the
// live table did. A slice's endpoints are parallel arrays (a hostname,
// node or pod array is left out when every entry is empty), conditions
// three characters each - ready, serving, terminating: y, n or - (unset):
//
//	{"format":"meshdns-k8sdns/1","namespaces":["shop"],
//	 "services":[{"namespace":"shop","name":"web","kind":"ClusterIP",
//	   "cluster_ips":["10.96.0.20"],"ports":[{"name":"http","protocol":"TCP","port":80}]}],
//	 "slices":[{"namespace":"shop","name":"web-x1","service":"web","type":"IPv4",
//	   "ports":[…],"addresses":[["10.244.1.5"]],"nodes":["n1"],"pods":["web-1"],"conditions":["yyn"]}],
//	 "pods":{"shop":["10.244.1.5","10.244.1.6"]}}
//
// With multicluster, slices also carry their multicluster labels
// ("import", "cluster": multicluster.kubernetes.io/service-name and
// source-cluster), and "imports" (after the slices) lists the
// ServiceImports in the form of a Service, kind ClusterSetIP or Headless:
//
//	"imports":[{"namespace":"shop","name":"web","kind":"ClusterSetIP","cluster_ips":["10.100.0.9"],"ports":[…]}]
//
// Both are left out without multicluster.
// A Service with external IPs or LoadBalancer ingresses (k8s_external)
// has them in "external_ips" (IPs or ingress hostnames, as written); a
// snapshot written before the field existed loads without them.
// "pods", the pod index of pods verified (the addresses of each
// namespace's running Pods, one per Pod), is left out without one; a
// snapshot written before it existed loads with no pod index.
// A replicated cluster (the replica source's) also keeps where it stands
// in the replication stream, "origin":"<epoch>/<generation>" (Origin).
// A snapshot of an older meshdns (a state document, or the compact form
// meshdns-state-compact/1) loads too (legacy.go).
const snapshotFormat = "meshdns-k8sdns/1"

type snapDoc struct {
	Format     string      `json:"format"`
	Origin     string      `json:"origin,omitempty"`
	Namespaces []string    `json:"namespaces"`
	Services   []snapSvc   `json:"services"`
	Slices     []snapSlice `json:"slices"`
	// Pods is the pod index (pods verified), by namespace: the addresses
	// of its running Pods, one per Pod. Left out without one; a snapshot
	// without it (of an older meshdns) loads with no pod index.
	Pods map[string][]string `json:"pods,omitempty"`
	// Imports are the ServiceImports (multicluster), left out without.
	Imports []snapSvc `json:"imports,omitempty"`
}

type snapSvc struct {
	Namespace       string     `json:"namespace"`
	Name            string     `json:"name"`
	Kind            string     `json:"kind"`
	ClusterIPs      []string   `json:"cluster_ips,omitempty"`
	ExternalName    string     `json:"external_name,omitempty"`
	Ports           []snapPort `json:"ports,omitempty"`
	PublishNotReady bool       `json:"publish_not_ready,omitempty"`
	ExternalIPs     []string   `json:"external_ips,omitempty"`
}

type snapPort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Port     int32  `json:"port"`
}

type snapSlice struct {
	Namespace  string     `json:"namespace"`
	Name       string     `json:"name"`
	Service    string     `json:"service,omitempty"`
	Import     string     `json:"import,omitempty"`
	Cluster    string     `json:"cluster,omitempty"`
	Type       string     `json:"type"`
	Ports      []snapPort `json:"ports,omitempty"`
	Addresses  [][]string `json:"addresses"`
	Hostnames  []string   `json:"hostnames,omitempty"`
	Nodes      []string   `json:"nodes,omitempty"`
	Pods       []string   `json:"pods,omitempty"`
	Conditions []string   `json:"conditions"`
}

// DecodeSnapshot reads a snapshot: this package's form, or an older
// meshdns's (a state document or meshdns-state-compact/1). Any invalid
// part (an unknown field, kind, type or condition, an address that does
// not parse or fit its slice) rejects the whole document, with an error
// naming it. Names are taken as written: whatever the kubernetes source
// stored, its snapshot loads (FuzzTransforms).
func DecodeSnapshot(b []byte) (*Cluster, error) {
	var head struct {
		Format string `json:"format"`
	}
	if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`{"format":`)) {
		_ = json.Unmarshal(b, &head) // a broken document fails below, with its error
	}
	if head.Format != snapshotFormat {
		return decodeLegacy(b)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var doc snapDoc
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("snapshot: trailing data after the JSON document")
	}
	return doc.cluster()
}

// cluster makes the Cluster of a decoded document, checking every part.
func (doc *snapDoc) cluster() (*Cluster, error) {
	c := &Cluster{Origin: doc.Origin, Namespaces: doc.Namespaces, Services: make([]*Service, 0, len(doc.Services)), Slices: make([]*Slice, 0, len(doc.Slices))}
	for i := range doc.Services {
		s, err := doc.Services[i].service()
		if err != nil {
			return nil, fmt.Errorf("snapshot: services[%d] (%s/%s): %w", i, doc.Services[i].Namespace, doc.Services[i].Name, err)
		}
		c.Services = append(c.Services, s)
	}
	for i := range doc.Slices {
		sl, err := doc.Slices[i].slice()
		if err != nil {
			return nil, fmt.Errorf("snapshot: slices[%d] (%s/%s): %w", i, doc.Slices[i].Namespace, doc.Slices[i].Name, err)
		}
		c.Slices = append(c.Slices, sl)
	}
	for i := range doc.Imports {
		s, err := doc.Imports[i].importService()
		if err != nil {
			return nil, fmt.Errorf("snapshot: imports[%d] (%s/%s): %w", i, doc.Imports[i].Namespace, doc.Imports[i].Name, err)
		}
		c.Imports = append(c.Imports, s)
	}
	pods, err := decodePods(doc.Pods)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	c.Pods = pods
	return c, nil
}

func (ss *snapSvc) service() (*Service, error) {
	s := &Service{Namespace: ss.Namespace, Name: ss.Name, ExternalName: ss.ExternalName, PublishNotReady: ss.PublishNotReady, Ports: ports(ss.Ports), ExternalIPs: ss.ExternalIPs}
	switch ss.Kind {
	case "ClusterIP":
		s.Kind = ClusterIP
	case "Headless":
		s.Kind = Headless
	case "ExternalName":
		s.Kind = ExternalName
	default:
		return nil, fmt.Errorf("unknown kind %q", ss.Kind)
	}
	for _, a := range ss.ClusterIPs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("bad cluster IP %q", a)
		}
		s.ClusterIPs = append(s.ClusterIPs, ip.Unmap())
	}
	return s, nil
}

// importService reads a ServiceImport in the form of a Service: kind
// ClusterSetIP (a Service of kind ClusterIP) or Headless, no external
// name.
func (ss *snapSvc) importService() (*Service, error) {
	switch {
	case ss.Kind != "ClusterSetIP" && ss.Kind != "Headless":
		return nil, fmt.Errorf("unknown ServiceImport kind %q", ss.Kind)
	case ss.ExternalName != "" || ss.PublishNotReady || len(ss.ExternalIPs) > 0:
		return nil, errors.New("a ServiceImport has no external_name, publish_not_ready or external_ips")
	}
	c := *ss
	if c.Kind == "ClusterSetIP" {
		c.Kind = "ClusterIP"
	}
	return c.service()
}

func ports(ps []snapPort) []Port {
	if len(ps) == 0 {
		return nil
	}
	out := make([]Port, len(ps))
	for i, p := range ps {
		out[i] = Port{Name: p.Name, Protocol: Protocol(p.Protocol), Port: p.Port}
	}
	return out
}

func (ss *snapSlice) slice() (*Slice, error) {
	t, ok := ParseAddressType(ss.Type)
	if !ok {
		return nil, fmt.Errorf("unknown type %q", ss.Type)
	}
	n := len(ss.Addresses)
	for _, a := range [][]string{ss.Hostnames, ss.Nodes, ss.Pods, ss.Conditions} {
		if a != nil && len(a) != n {
			return nil, fmt.Errorf("%d addresses, but %d entries in a parallel array", n, len(a))
		}
	}
	if len(ss.Conditions) != n {
		return nil, errors.New("conditions missing")
	}
	sl := &Slice{Namespace: ss.Namespace, Name: ss.Name, Service: ss.Service, Import: ss.Import, Cluster: ss.Cluster, Type: t, Ports: ports(ss.Ports), Endpoints: make([]Endpoint, 0, n)}
	for i, addrs := range ss.Addresses {
		e := EndpointSpec{Addresses: addrs, Hostname: at(ss.Hostnames, i), TargetRef: at(ss.Pods, i), NodeName: at(ss.Nodes, i)}
		var err error
		if e.Ready, e.Serving, e.Terminating, err = parseConditions(ss.Conditions[i]); err != nil {
			return nil, fmt.Errorf("endpoints[%d]: %w", i, err)
		}
		if err := sl.Add(e); err != nil {
			return nil, fmt.Errorf("endpoints[%d]: %w", i, err)
		}
	}
	sl.Compact()
	return sl, nil
}

func at(a []string, i int) string {
	if a == nil {
		return ""
	}
	return a[i]
}

// conditionChars are the characters of Unset, False and True.
const conditionChars = "-ny"

func parseConditions(s string) (ready, serving, terminating Condition, err error) {
	if len(s) != 3 {
		return 0, 0, 0, fmt.Errorf("bad conditions %q", s)
	}
	var c [3]Condition
	for i := range c {
		switch s[i] {
		case '-':
			c[i] = Unset
		case 'n':
			c[i] = False
		case 'y':
			c[i] = True
		default:
			return 0, 0, 0, fmt.Errorf("bad conditions %q", s)
		}
	}
	return c[0], c[1], c[2], nil
}

// Snapshot writes the cluster in the snapshot form.
func (c *Cluster) Snapshot(w io.Writer) error {
	sw, err := newSnapshotWriter(w, c.Namespaces, c.Origin)
	if err != nil {
		return err
	}
	for _, s := range c.Services {
		if err := sw.Service(s); err != nil {
			return err
		}
	}
	for _, sl := range c.Slices {
		if err := sw.Slice(sl); err != nil {
			return err
		}
	}
	if len(c.Imports) > 0 {
		if err := sw.Imports(c.Imports); err != nil {
			return err
		}
	}
	if len(c.Pods) > 0 {
		if err := sw.Pods(c.Pods); err != nil {
			return err
		}
	}
	return sw.Close()
}

// SnapshotWriter streams the snapshot form: the namespaces, then every
// Service, then every slice, then the ServiceImports and the pod index,
// so that a large cluster's snapshot is never held in memory whole.
type SnapshotWriter struct {
	*jsonw.Writer
	services int  // written so far; -1 once the slices began
	slices   int  // written so far; -1 once they ended (imports)
	pods     bool // the pod index was written: only Close may follow
}

// Imports writes the ServiceImports (multicluster), after the slices;
// only Pods and Close may follow.
func (sw *SnapshotWriter) Imports(imps []*Service) error {
	if sw.pods || sw.slices < 0 {
		return errors.New("snapshot: the imports after the pods, or twice")
	}
	if sw.services >= 0 {
		sw.Buf = append(sw.Buf, "],\n\"slices\":["...)
		sw.services = -1
	}
	sw.Buf = append(sw.Buf, "],\n\"imports\":["...)
	for i, s := range imps {
		if i > 0 {
			sw.Buf = append(sw.Buf, ",\n"...)
		}
		sw.Buf = appendService(sw.Buf, s, true)
		if err := sw.Flush(false); err != nil {
			return err
		}
	}
	sw.slices = -1
	return sw.Flush(false)
}

// NewSnapshotWriter starts a snapshot of a cluster with namespaces.
func NewSnapshotWriter(w io.Writer, namespaces []string) (*SnapshotWriter, error) {
	return newSnapshotWriter(w, namespaces, "")
}

// newSnapshotWriter starts a snapshot of a cluster with namespaces and
// origin ("" none).
func newSnapshotWriter(w io.Writer, namespaces []string, origin string) (*SnapshotWriter, error) {
	sw := &SnapshotWriter{Writer: jsonw.NewWriter(w)}
	sw.Buf = append(sw.Buf, `{"format":"`+snapshotFormat+`"`...)
	if origin != "" {
		sw.Buf = append(sw.Buf, `,"origin":`...)
		sw.Buf = jsonw.AppendString(sw.Buf, origin)
	}
	sw.Buf = append(sw.Buf, `,"namespaces":`...)
	sw.Buf = jsonw.AppendStrings(sw.Buf, namespaces)
	sw.Buf = append(sw.Buf, ",\n\"services\":["...)
	return sw, nil
}

// Service writes a Service; every Service comes before the first slice.
func (sw *SnapshotWriter) Service(s *Service) error {
	if sw.services < 0 {
		return errors.New("snapshot: a Service after the slices")
	}
	if sw.services > 0 {
		sw.Buf = append(sw.Buf, ",\n"...)
	}
	sw.services++
	sw.Buf = appendService(sw.Buf, s, false)
	return sw.Flush(false)
}

// appendService appends a Service's snapshot form, or (imp) a
// ServiceImport's: kind ClusterSetIP for ClusterIP.
func appendService(b []byte, s *Service, imp bool) []byte {
	b = append(b, `{"namespace":`...)
	b = jsonw.AppendString(b, s.Namespace)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, s.Name)
	b = append(b, `,"kind":"`...)
	if imp && s.Kind == ClusterIP {
		b = append(b, "ClusterSetIP"...)
	} else {
		b = append(b, s.Kind.String()...)
	}
	b = append(b, '"')
	if len(s.ClusterIPs) > 0 {
		b = append(b, `,"cluster_ips":`...)
		b = jsonw.AppendAddrs(b, s.ClusterIPs)
	}
	if s.ExternalName != "" {
		b = append(b, `,"external_name":`...)
		b = jsonw.AppendString(b, s.ExternalName)
	}
	b = appendPorts(b, s.Ports)
	if s.PublishNotReady {
		b = append(b, `,"publish_not_ready":true`...)
	}
	if len(s.ExternalIPs) > 0 {
		b = append(b, `,"external_ips":`...)
		b = jsonw.AppendStrings(b, s.ExternalIPs)
	}
	return append(b, '}')
}

// Slice writes a slice.
func (sw *SnapshotWriter) Slice(sl *Slice) error {
	if sw.pods || sw.slices < 0 {
		return errors.New("snapshot: a slice after the imports or the pods")
	}
	if sw.services >= 0 {
		sw.Buf = append(sw.Buf, "],\n\"slices\":["...)
		sw.services = -1
	}
	if sw.slices > 0 {
		sw.Buf = append(sw.Buf, ",\n"...)
	}
	sw.slices++
	sw.Buf = appendSlice(sw.Buf, sl)
	return sw.Flush(false)
}

// appendSlice appends a slice's snapshot form.
func appendSlice(b []byte, sl *Slice) []byte {
	b = append(b, `{"namespace":`...)
	b = jsonw.AppendString(b, sl.Namespace)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, sl.Name)
	if sl.Service != "" {
		b = append(b, `,"service":`...)
		b = jsonw.AppendString(b, sl.Service)
	}
	if sl.Import != "" {
		b = append(b, `,"import":`...)
		b = jsonw.AppendString(b, sl.Import)
	}
	if sl.Cluster != "" {
		b = append(b, `,"cluster":`...)
		b = jsonw.AppendString(b, sl.Cluster)
	}
	b = append(b, `,"type":"`...)
	b = append(b, sl.Type.String()...)
	b = append(b, '"')
	b = appendPorts(b, sl.Ports)
	b = append(b, `,"addresses":[`...)
	for i := range sl.Endpoints {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j := range sl.Endpoints[i].Len() {
			if j > 0 {
				b = append(b, ',')
			}
			if sl.Type == FQDN {
				b = jsonw.AppendString(b, sl.FQDNAddr(i, j))
			} else {
				b = append(b, '"')
				b = sl.Addr(i, j).AppendTo(b)
				b = append(b, '"')
			}
		}
		b = append(b, ']')
	}
	b = append(b, ']')
	b = appendColumn(b, `,"hostnames":[`, sl, sl.Hostname)
	b = appendColumn(b, `,"nodes":[`, sl, func(i int) string { return sl.Endpoints[i].Node() })
	b = appendColumn(b, `,"pods":[`, sl, sl.TargetRef)
	b = append(b, `,"conditions":[`...)
	for i := range sl.Endpoints {
		e := &sl.Endpoints[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"', conditionChars[e.Ready], conditionChars[e.Serving], conditionChars[e.Terminating], '"')
	}
	return append(b, "]}"...)
}

// appendColumn appends key and one string per endpoint, or nothing when
// every one is empty.
func appendColumn(b []byte, key string, sl *Slice, f func(int) string) []byte {
	empty := true
	for i := range sl.Endpoints {
		if f(i) != "" {
			empty = false
			break
		}
	}
	if empty {
		return b
	}
	b = append(b, key...)
	for i := range sl.Endpoints {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.AppendString(b, f(i))
	}
	return append(b, ']')
}

func appendPorts(b []byte, ps []Port) []byte {
	if len(ps) == 0 {
		return b
	}
	b = append(b, `,"ports":[`...)
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if p.Name != "" {
			b = append(b, `"name":`...)
			b = jsonw.AppendString(b, p.Name)
			b = append(b, ',')
		}
		if p.Protocol != "" {
			b = append(b, `"protocol":`...)
			b = jsonw.AppendString(b, p.Protocol)
			b = append(b, ',')
		}
		b = append(b, `"port":`...)
		b = strconv.AppendInt(b, int64(p.Port), 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// Close ends the document.
func (sw *SnapshotWriter) Close() error {
	if sw.services >= 0 {
		sw.Buf = append(sw.Buf, "],\n\"slices\":["...)
	}
	if !sw.pods { // the slices' or the imports' array is open
		sw.Buf = append(sw.Buf, ']')
	}
	sw.Buf = append(sw.Buf, "}\n"...)
	return sw.Flush(true)
}

// Protocol returns the canonical copy of a port protocol, so that the
// ports of thousands of objects share the three usual words.
func Protocol(p string) string {
	switch p {
	case "TCP":
		return "TCP"
	case "UDP":
		return "UDP"
	case "SCTP":
		return "SCTP"
	}
	return p
}
