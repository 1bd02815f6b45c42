package endpointsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// State is the orchestrator model every source maps onto: services, the
// tasks that run them, and the nodes the tasks run on. The file and orch
// sources decode it from JSON (DecodeState); other sources build it directly.
// A State is immutable once validated: names and ids are lowercased where
// DNS lookups use them, and every cross reference resolves.
type State struct {
	Services []Service `json:"services"`
	Tasks    []Task    `json:"tasks"`
	Nodes    []Node    `json:"nodes"`
	// Namespaces lists the namespaces that exist (schema kubernetes answers
	// NXDOMAIN under any other); empty: those of the services.
	Namespaces []string `json:"namespaces,omitempty"`
}

// Service is a named set of tasks with the ports it exposes.
type Service struct {
	ID        string        `json:"id"`
	Name      string        `json:"name"`
	Namespace string        `json:"namespace,omitempty"` // "" means "default"
	Status    string        `json:"status"`              // active, inactive, deleting
	Ports     []ServicePort `json:"ports,omitempty"`

	// The fields below are read by schema kubernetes only (the Kubernetes
	// DNS specification); the orch schema ignores them.

	// ClusterIPs are the Service's virtual IPs (spec.clusterIPs), answered
	// instead of the endpoints; none for a headless Service.
	ClusterIPs []string `json:"cluster_ips,omitempty"`
	// Headless marks a Service with clusterIP None: its names answer the
	// endpoints' own addresses.
	Headless bool `json:"headless,omitempty"`
	// ExternalName is the target of an ExternalName Service (answered as a
	// CNAME in its own spelling; no endpoints).
	ExternalName string `json:"external_name,omitempty"`
}

// ServicePort is a port of a service. PublishedPort is the port clients
// reach on every node (0: none); TargetPort the container port.
type ServicePort struct {
	Name          string `json:"name,omitempty"`
	Protocol      string `json:"protocol,omitempty"` // tcp (default), udp, sctp
	TargetPort    int    `json:"target_port"`
	PublishedPort int    `json:"published_port,omitempty"`
	// Port is the port clients use on the service's own address (a
	// Kubernetes Service's spec.ports[].port; schema kubernetes SRV).
	Port int `json:"port,omitempty"`
}

// Task is one running (or not) instance of a service on a node.
type Task struct {
	ID            string     `json:"id"`
	ServiceID     string     `json:"service_id"`
	NodeID        string     `json:"node_id,omitempty"` // "" while not scheduled
	Version       int64      `json:"version,omitempty"`
	DesiredStatus string     `json:"desired_status"`
	ActualStatus  string     `json:"actual_status"`
	Ports         []TaskPort `json:"ports,omitempty"`
	// Address is the task's own address (IP or hostname), for sources and
	// address modes that answer with endpoint addresses instead of node
	// addresses. Node mode ignores it. Optional.
	Address string `json:"address,omitempty"`
	// Hostname is the endpoint's own DNS label (an EndpointSlice endpoint's
	// hostname, a StatefulSet pod's name); schema kubernetes only.
	Hostname string `json:"hostname,omitempty"`
}

// TaskPort maps a container port of a task onto a host port of its node.
type TaskPort struct {
	Name          string `json:"name,omitempty"`
	Protocol      string `json:"protocol,omitempty"`
	ContainerPort int    `json:"container_port"`
	HostPort      int    `json:"host_port,omitempty"` // 0: not published on the host
}

// Node is a machine that runs tasks. Address is its advertise address:
// "ip", "ip:port", "[ipv6]:port", "hostname" or "hostname:port".
type Node struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
	Status  string `json:"status"` // ready, down, draining, disconnected, unknown
}

// Task statuses (desired and actual).
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusHealthy   = "healthy"
	StatusUnhealthy = "unhealthy"
	StatusFailed    = "failed"
	StatusStopped   = "stopped"
	StatusRemoved   = "removed"
)

// TaskStatuses lists every valid task status.
var TaskStatuses = []string{StatusPending, StatusRunning, StatusHealthy, StatusUnhealthy, StatusFailed, StatusStopped, StatusRemoved}

var (
	taskStatuses    = set(TaskStatuses...)
	serviceStatuses = set("active", "inactive", "deleting")
	nodeStatuses    = set("ready", "down", "draining", "disconnected", "unknown")
	protocols       = set("tcp", "udp", "sctp")
)

func set(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return m
}

// DefaultNamespace is the namespace of a service that names none.
const DefaultNamespace = "default"

// nodeNamespace is reserved: <node-name>.node.<zone> names nodes.
const nodeNamespace = "node"

// DecodeState parses and validates a state document. Any invalid part
// rejects the whole document, with an error naming that part.
func DecodeState(b []byte) (*State, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	st := new(State)
	if err := d.Decode(st); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("state: trailing data after the JSON document")
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return st, nil
}

// Validate checks every part of st and normalises it in place (lowercased
// names, default namespace and protocol). It returns the first problem found.
func (st *State) Validate() error {
	nodeIDs := make(map[string]bool, len(st.Nodes))
	nodeNames := make(map[string]bool, len(st.Nodes))
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if n.ID == "" {
			return fmt.Errorf("%s: empty id", at("nodes", i, n.ID))
		}
		if nodeIDs[n.ID] {
			return fmt.Errorf("%s: duplicate node id", at("nodes", i, n.ID))
		}
		nodeIDs[n.ID] = true
		n.Name = strings.ToLower(n.Name)
		if !validName(n.Name) {
			return fmt.Errorf("%s: bad node name %q", at("nodes", i, n.ID), n.Name)
		}
		if nodeNames[n.Name] {
			return fmt.Errorf("%s: duplicate node name %q", at("nodes", i, n.ID), n.Name)
		}
		nodeNames[n.Name] = true
		if _, _, err := ParseAddress(n.Address); err != nil {
			return fmt.Errorf("%s: bad address %q: %w", at("nodes", i, n.ID), n.Address, err)
		}
		if !nodeStatuses[n.Status] {
			return fmt.Errorf("%s: unknown status %q", at("nodes", i, n.ID), n.Status)
		}
	}

	for i, ns := range st.Namespaces {
		st.Namespaces[i] = strings.ToLower(ns)
		if !validLabel(st.Namespaces[i]) {
			return fmt.Errorf("state: namespaces[%d]: bad namespace %q", i, ns)
		}
	}

	svcIDs := make(map[string]bool, len(st.Services))
	svcNames := make(map[svcKey]bool, len(st.Services))
	for i := range st.Services {
		s := &st.Services[i]
		if s.ID == "" {
			return fmt.Errorf("%s: empty id", at("services", i, s.ID))
		}
		if svcIDs[s.ID] {
			return fmt.Errorf("%s: duplicate service id", at("services", i, s.ID))
		}
		svcIDs[s.ID] = true
		s.Name, s.Namespace = strings.ToLower(s.Name), strings.ToLower(s.Namespace)
		if s.Namespace == "" {
			s.Namespace = DefaultNamespace
		}
		if !validLabel(s.Name) {
			return fmt.Errorf("%s: bad service name %q", at("services", i, s.ID), s.Name)
		}
		if !validLabel(s.Namespace) || s.Namespace == nodeNamespace {
			return fmt.Errorf("%s: bad namespace %q", at("services", i, s.ID), s.Namespace)
		}
		if svcNames[svcKey{s.Namespace, s.Name}] {
			return fmt.Errorf("%s: duplicate service %q in namespace %q", at("services", i, s.ID), s.Name, s.Namespace)
		}
		svcNames[svcKey{s.Namespace, s.Name}] = true
		if !serviceStatuses[s.Status] {
			return fmt.Errorf("%s: unknown status %q", at("services", i, s.ID), s.Status)
		}
		if err := s.validateKube(); err != nil {
			return fmt.Errorf("%s: %w", at("services", i, s.ID), err)
		}
		var seen map[portKey]bool
		for j := range s.Ports {
			p := &s.Ports[j]
			if err := normPort(&p.Name, &p.Protocol); err != nil {
				return fmt.Errorf("%s: ports[%d]: %w", at("services", i, s.ID), j, err)
			}
			if !validPort(p.TargetPort, false) || !validPort(p.PublishedPort, true) || !validPort(p.Port, true) {
				return fmt.Errorf("%s: ports[%d]: bad port number", at("services", i, s.ID), j)
			}
			if p.Name != "" {
				if seen == nil {
					seen = map[portKey]bool{}
				}
				if seen[portKey{p.Name, p.Protocol}] {
					return fmt.Errorf("%s: ports[%d]: duplicate port %q/%s", at("services", i, s.ID), j, p.Name, p.Protocol)
				}
				seen[portKey{p.Name, p.Protocol}] = true
			}
		}
	}

	taskIDs := make(map[string]bool, len(st.Tasks))
	for i := range st.Tasks {
		t := &st.Tasks[i]
		if t.ID == "" {
			return fmt.Errorf("%s: empty id", at("tasks", i, t.ID))
		}
		if taskIDs[t.ID] {
			return fmt.Errorf("%s: duplicate task id", at("tasks", i, t.ID))
		}
		taskIDs[t.ID] = true
		if !svcIDs[t.ServiceID] {
			return fmt.Errorf("%s: unknown service_id %q", at("tasks", i, t.ID), t.ServiceID)
		}
		if t.NodeID != "" && !nodeIDs[t.NodeID] {
			return fmt.Errorf("%s: unknown node_id %q", at("tasks", i, t.ID), t.NodeID)
		}
		if !taskStatuses[t.DesiredStatus] {
			return fmt.Errorf("%s: unknown desired_status %q", at("tasks", i, t.ID), t.DesiredStatus)
		}
		if !taskStatuses[t.ActualStatus] {
			return fmt.Errorf("%s: unknown actual_status %q", at("tasks", i, t.ID), t.ActualStatus)
		}
		if t.Address != "" {
			if _, _, err := ParseAddress(t.Address); err != nil {
				return fmt.Errorf("%s: bad address %q: %w", at("tasks", i, t.ID), t.Address, err)
			}
		}
		if t.Hostname = strings.ToLower(t.Hostname); t.Hostname != "" && !validLabel(t.Hostname) {
			return fmt.Errorf("%s: bad hostname %q", at("tasks", i, t.ID), t.Hostname)
		}
		for j := range t.Ports {
			p := &t.Ports[j]
			if err := normPort(&p.Name, &p.Protocol); err != nil {
				return fmt.Errorf("%s: ports[%d]: %w", at("tasks", i, t.ID), j, err)
			}
			if !validPort(p.ContainerPort, false) || !validPort(p.HostPort, true) {
				return fmt.Errorf("%s: ports[%d]: bad port number", at("tasks", i, t.ID), j)
			}
		}
	}
	return nil
}

// at names part i of kind in an error message: `state: tasks[3] (id "t-d")`.
func at(kind string, i int, id string) string {
	return fmt.Sprintf("state: %s[%d] (id %q)", kind, i, id)
}

func normPort(name, proto *string) error {
	*name, *proto = strings.ToLower(*name), strings.ToLower(*proto)
	if *proto == "" {
		*proto = "tcp"
	}
	if !protocols[*proto] {
		return fmt.Errorf("unknown protocol %q", *proto)
	}
	if *name != "" && !validLabel(*name) {
		return fmt.Errorf("bad port name %q", *name)
	}
	return nil
}

func validPort(p int, zeroOK bool) bool {
	return (zeroOK && p == 0) || (p > 0 && p <= 65535)
}

// validLabel reports whether s is a lowercase RFC 1123 label: letters,
// digits and inner hyphens, 1 to 63 characters.
func validLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validName reports whether s is one or more dot-separated valid labels
// (a node name may be a host's FQDN), at most 200 characters so that
// <name>.node.<zone> still fits a DNS name.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !validLabel(l) {
			return false
		}
	}
	return true
}

// ParseAddress splits an advertise address ("ip", "ip:port", "[ipv6]:port",
// "hostname", "hostname:port") into either an IP or a hostname (lowercased,
// fully qualified). The port, if any, is dropped.
func ParseAddress(s string) (ip netip.Addr, host string, err error) {
	if s == "" {
		return ip, "", errors.New("empty")
	}
	h := s
	if ap, err := netip.ParseAddrPort(s); err == nil {
		h = ap.Addr().String()
	} else if hh, port, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return ip, "", fmt.Errorf("bad port %q", port)
		}
		h = hh
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return ip, "", errors.New("zoned IPv6 address")
		}
		return a.Unmap(), "", nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if !validName(h) || strings.Trim(h[strings.LastIndexByte(h, '.')+1:], "0123456789") == "" {
		return ip, "", errors.New("neither an IP address nor a hostname")
	}
	return ip, dns.Fqdn(h), nil
}

// validateKube checks and normalises the fields schema kubernetes reads:
// cluster IPs are IP addresses (canonical text), an external name is a
// hostname (lowercased, fully qualified), and a Service is at most one of
// headless, ExternalName and ClusterIP.
func (s *Service) validateKube() error {
	for j, a := range s.ClusterIPs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("bad cluster IP %q", a)
		}
		s.ClusterIPs[j] = ip.Unmap().String()
	}
	if s.ExternalName != "" {
		n := strings.TrimSuffix(s.ExternalName, ".")
		if !validName(strings.ToLower(n)) {
			return fmt.Errorf("bad external name %q", s.ExternalName)
		}
		s.ExternalName = n + "." // answered as written, as the kubernetes plugin does
	}
	kinds := 0
	for _, b := range []bool{len(s.ClusterIPs) > 0, s.Headless, s.ExternalName != ""} {
		if b {
			kinds++
		}
	}
	if kinds > 1 {
		return errors.New("a service is only one of cluster IPs, headless and external name")
	}
	return nil
}
