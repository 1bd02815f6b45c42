package orch

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

// State is the orchestrator model: services, the tasks that run them, and
// the nodes the tasks run on. The file and orch sources decode it from
// JSON (DecodeState); the kubernetes source maps Services, EndpointSlices
// and Nodes onto it. A State is immutable once validated: names and ids
// are lowercased where DNS lookups use them, and every cross reference
// resolves.
type State struct {
	Services []Service `json:"services"`
	Tasks    []Task    `json:"tasks"`
	Nodes    []Node    `json:"nodes"`
	// Namespaces is read by an older meshdns's schema kubernetes, whose
	// snapshots were state documents; this model ignores it.
	Namespaces []string `json:"namespaces,omitempty"`
}

// Service is a named set of tasks with the ports it exposes.
type Service struct {
	ID        string        `json:"id"`
	Name      string        `json:"name"`
	Namespace string        `json:"namespace,omitempty"` // "" means "default"
	Status    string        `json:"status"`              // active, inactive, deleting
	Ports     []ServicePort `json:"ports,omitempty"`

	// ClusterIPs, Headless and ExternalName were read by an older
	// meshdns's schema kubernetes (the k8sdns package reads such
	// documents); this model ignores them.
	ClusterIPs   []string `json:"cluster_ips,omitempty"`
	Headless     bool     `json:"headless,omitempty"`
	ExternalName string   `json:"external_name,omitempty"`
}

// ServicePort is a port of a service. PublishedPort is the port clients
// reach on every node (0: none); TargetPort the container port.
type ServicePort struct {
	Name          string `json:"name,omitempty"`
	Protocol      string `json:"protocol,omitempty"` // tcp (default), udp, sctp
	TargetPort    int    `json:"target_port"`
	PublishedPort int    `json:"published_port,omitempty"`
	// Port is the port clients use on the service's own address (a
	// Kubernetes Service's spec.ports[].port).
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
	// Hostname was read by an older meshdns's schema kubernetes; this
	// model ignores it (but for its syntax).
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

// NodeNamespace is reserved: <node-name>.node.<zone> names nodes.
const NodeNamespace = "node"

// DecodeState parses and validates a state document. Any invalid part
// rejects the whole document, with an error naming that part.
func DecodeState(b []byte) (*State, error) {
	st := new(State)
	if err := strictJSON(b, st); err != nil {
		return nil, err
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return st, nil
}

// strictJSON decodes one JSON document into v, with no unknown field and
// nothing after it.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("state: trailing data after the JSON document")
	}
	return nil
}

// Validate checks every part of st and normalises it in place (lowercased
// names, default namespace and protocol). It returns the first problem found.
func (st *State) Validate() error { return st.validate(false) }

// validate is Validate; with outside, a task's node need not be one of
// st's (a change log record carries the nodes that changed only: the
// others are the state's it is replayed onto, whose whole is validated).
func (st *State) validate(outside bool) error {
	nodeIDs, err := st.validateNodes()
	if err != nil {
		return err
	}
	if outside {
		nodeIDs = nil
	}
	for i, ns := range st.Namespaces {
		st.Namespaces[i] = strings.ToLower(ns)
		if !ValidLabel(st.Namespaces[i]) {
			return fmt.Errorf("state: namespaces[%d]: bad namespace %q", i, ns)
		}
	}
	svcIDs := make(map[string]bool, len(st.Services))
	svcNames := make(map[SvcKey]bool, len(st.Services))
	for i := range st.Services {
		if err := st.Services[i].validate(svcIDs, svcNames); err != nil {
			return fmt.Errorf("%s: %w", at("services", i, st.Services[i].ID), err)
		}
	}
	taskIDs := make(map[string]bool, len(st.Tasks))
	for i := range st.Tasks {
		if err := st.Tasks[i].validate(taskIDs, svcIDs, nodeIDs); err != nil {
			return fmt.Errorf("%s: %w", at("tasks", i, st.Tasks[i].ID), err)
		}
	}
	return nil
}

// validateNodes checks the nodes and returns their ids.
func (st *State) validateNodes() (map[string]bool, error) {
	nodeIDs := make(map[string]bool, len(st.Nodes))
	nodeNames := make(map[string]bool, len(st.Nodes))
	for i := range st.Nodes {
		n := &st.Nodes[i]
		where := at("nodes", i, n.ID)
		if n.ID == "" {
			return nil, fmt.Errorf("%s: empty id", where)
		}
		if nodeIDs[n.ID] {
			return nil, fmt.Errorf("%s: duplicate node id", where)
		}
		nodeIDs[n.ID] = true
		n.Name = strings.ToLower(n.Name)
		if !ValidName(n.Name) {
			return nil, fmt.Errorf("%s: bad node name %q", where, n.Name)
		}
		if nodeNames[n.Name] {
			return nil, fmt.Errorf("%s: duplicate node name %q", where, n.Name)
		}
		nodeNames[n.Name] = true
		if _, _, err := ParseAddress(n.Address); err != nil {
			return nil, fmt.Errorf("%s: bad address %q: %w", where, n.Address, err)
		}
		if !nodeStatuses[n.Status] {
			return nil, fmt.Errorf("%s: unknown status %q", where, n.Status)
		}
	}
	return nodeIDs, nil
}

// validate checks and normalises service s; ids and names hold those of
// the services before it, and get its own.
func (s *Service) validate(ids map[string]bool, names map[SvcKey]bool) error {
	if s.ID == "" {
		return errors.New("empty id")
	}
	if ids[s.ID] {
		return errors.New("duplicate service id")
	}
	ids[s.ID] = true
	s.Name, s.Namespace = strings.ToLower(s.Name), strings.ToLower(s.Namespace)
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	if !ValidLabel(s.Name) {
		return fmt.Errorf("bad service name %q", s.Name)
	}
	if !ValidLabel(s.Namespace) || s.Namespace == NodeNamespace {
		return fmt.Errorf("bad namespace %q", s.Namespace)
	}
	if names[SvcKey{s.Namespace, s.Name}] {
		return fmt.Errorf("duplicate service %q in namespace %q", s.Name, s.Namespace)
	}
	names[SvcKey{s.Namespace, s.Name}] = true
	if !serviceStatuses[s.Status] {
		return fmt.Errorf("unknown status %q", s.Status)
	}
	seen := map[portKey]bool{}
	for j := range s.Ports {
		p := &s.Ports[j]
		if err := normPort(&p.Name, &p.Protocol); err != nil {
			return fmt.Errorf("ports[%d]: %w", j, err)
		}
		if !ValidPort(p.TargetPort, false) || !ValidPort(p.PublishedPort, true) || !ValidPort(p.Port, true) {
			return fmt.Errorf("ports[%d]: bad port number", j)
		}
		if p.Name != "" {
			if seen[portKey{p.Name, p.Protocol}] {
				return fmt.Errorf("ports[%d]: duplicate port %q/%s", j, p.Name, p.Protocol)
			}
			seen[portKey{p.Name, p.Protocol}] = true
		}
	}
	return nil
}

// validate checks and normalises task t; ids holds the tasks' ids before
// it and gets its own, svcIDs and nodeIDs are the state's (nodeIDs nil:
// any node).
func (t *Task) validate(ids, svcIDs, nodeIDs map[string]bool) error {
	if t.ID == "" {
		return errors.New("empty id")
	}
	if ids[t.ID] {
		return errors.New("duplicate task id")
	}
	ids[t.ID] = true
	if !svcIDs[t.ServiceID] {
		return fmt.Errorf("unknown service_id %q", t.ServiceID)
	}
	if t.NodeID != "" && nodeIDs != nil && !nodeIDs[t.NodeID] {
		return fmt.Errorf("unknown node_id %q", t.NodeID)
	}
	if !taskStatuses[t.DesiredStatus] {
		return fmt.Errorf("unknown desired_status %q", t.DesiredStatus)
	}
	if !taskStatuses[t.ActualStatus] {
		return fmt.Errorf("unknown actual_status %q", t.ActualStatus)
	}
	if t.Address != "" {
		if _, _, err := ParseAddress(t.Address); err != nil {
			return fmt.Errorf("bad address %q: %w", t.Address, err)
		}
	}
	if t.Hostname = strings.ToLower(t.Hostname); t.Hostname != "" && !ValidLabel(t.Hostname) {
		return fmt.Errorf("bad hostname %q", t.Hostname)
	}
	for j := range t.Ports {
		p := &t.Ports[j]
		if err := normPort(&p.Name, &p.Protocol); err != nil {
			return fmt.Errorf("ports[%d]: %w", j, err)
		}
		if !ValidPort(p.ContainerPort, false) || !ValidPort(p.HostPort, true) {
			return fmt.Errorf("ports[%d]: bad port number", j)
		}
	}
	return nil
}

// at names part i of kind in an error message: `state: tasks[3] (id "t-d")`.
func at(kind string, i int, id string) string {
	return fmt.Sprintf("state: %s[%d] (id %q)", kind, i, id)
}

// ValidProtocol reports whether p is a protocol of the model (lowercased).
func ValidProtocol(p string) bool { return protocols[p] }

func normPort(name, proto *string) error {
	*name, *proto = strings.ToLower(*name), strings.ToLower(*proto)
	if *proto == "" {
		*proto = "tcp"
	}
	if !protocols[*proto] {
		return fmt.Errorf("unknown protocol %q", *proto)
	}
	if *name != "" && !ValidLabel(*name) {
		return fmt.Errorf("bad port name %q", *name)
	}
	return nil
}

// ValidPort reports whether p is a port number (or 0, with zeroOK).
func ValidPort(p int, zeroOK bool) bool {
	return (zeroOK && p == 0) || (p > 0 && p <= 65535)
}

// ValidLabel reports whether s is a lowercase RFC 1123 label: letters,
// digits and inner hyphens, 1 to 63 characters.
func ValidLabel(s string) bool {
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

// ValidName reports whether s is one or more dot-separated valid labels
// (a node name may be a host's FQDN), at most 200 characters so that
// <name>.node.<zone> still fits a DNS name.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !ValidLabel(l) {
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
	if a, err := netip.ParseAddr(s); err == nil { // the common case, without the port forms' errors
		if a.Zone() != "" {
			return ip, "", errors.New("zoned IPv6 address")
		}
		return a.Unmap(), "", nil
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
	if !ValidName(h) || strings.Trim(h[strings.LastIndexByte(h, '.')+1:], "0123456789") == "" {
		return ip, "", errors.New("neither an IP address nor a hostname")
	}
	return ip, dns.Fqdn(h), nil
}
