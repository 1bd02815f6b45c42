package k8sdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
)

// An older meshdns wrote schema kubernetes's snapshots in the orchestrator
// state's forms: the state document (services, tasks, nodes, namespaces,
// with the fields cluster_ips, headless, external_name, port and hostname)
// and its compact form meshdns-state-compact/1. Both still load, and the
// state document is also what `source file` serves under schema
// kubernetes (corefile/cluster.Corefile's snapshot is one). They are read
// here with the Kubernetes model's own rules: any DNS label is a
// namespace (node, pod and svc too), and a task is a ready endpoint when
// the orchestrator's predicate admitted it (its service active, desired
// running, actual running or healthy, its node, if any, not down).

// decodeLegacy reads a state document or its compact form.
func decodeLegacy(b []byte) (*Cluster, error) {
	doc, err := orch.DecodeDocument(b)
	if err != nil {
		return nil, err
	}
	return legacyCluster(doc)
}

// legacyCluster maps a state document onto the model.
func legacyCluster(doc *orch.State) (*Cluster, error) {
	down := make(map[string]bool, len(doc.Nodes))
	for _, n := range doc.Nodes {
		down[n.ID] = n.Status == "down"
	}
	c := &Cluster{}
	byID := make(map[string]int, len(doc.Services))
	active := make([]bool, len(doc.Services))
	names := make(map[Key]bool, len(doc.Services))
	for i := range doc.Services {
		ls := &doc.Services[i]
		s, err := legacyService(ls)
		if err != nil {
			return nil, fmt.Errorf("state: services[%d] (id %q): %w", i, ls.ID, err)
		}
		if _, dup := byID[ls.ID]; dup || ls.ID == "" {
			return nil, fmt.Errorf("state: services[%d] (id %q): empty or duplicate id", i, ls.ID)
		}
		byID[ls.ID], active[i] = i, ls.Status == "active"
		if names[Key{Namespace: s.Namespace, Name: s.Name}] {
			return nil, fmt.Errorf("state: services[%d] (id %q): duplicate service %q in namespace %q", i, ls.ID, s.Name, s.Namespace)
		}
		names[Key{Namespace: s.Namespace, Name: s.Name}] = true
		c.Services = append(c.Services, s)
	}
	groups := make([][]orch.Task, len(doc.Services))
	for i, t := range doc.Tasks {
		si, ok := byID[t.ServiceID]
		if !ok {
			return nil, fmt.Errorf("state: tasks[%d] (id %q): unknown service_id %q", i, t.ID, t.ServiceID)
		}
		if _, ok := down[t.NodeID]; t.NodeID != "" && !ok {
			return nil, fmt.Errorf("state: tasks[%d] (id %q): unknown node_id %q", i, t.ID, t.NodeID)
		}
		groups[si] = append(groups[si], t)
	}
	for i, ts := range groups {
		sls, err := legacySlices(c.Services[i], ts, active[i], down)
		if err != nil {
			return nil, fmt.Errorf("state: service %q: %w", doc.Services[i].ID, err)
		}
		c.Slices = append(c.Slices, sls...)
	}
	c.Namespaces = doc.Namespaces
	for i, ns := range c.Namespaces {
		if c.Namespaces[i] = strings.ToLower(ns); !orch.ValidLabel(c.Namespaces[i]) {
			return nil, fmt.Errorf("state: namespaces[%d]: bad namespace %q", i, ns)
		}
	}
	if len(c.Namespaces) == 0 { // none listed: those of the services
		for _, s := range c.Services {
			c.Namespaces = append(c.Namespaces, s.Namespace)
		}
		slices.Sort(c.Namespaces)
		c.Namespaces = slices.Compact(c.Namespaces)
	}
	return c, nil
}

// legacyService maps a service of the state document.
func legacyService(ls *orch.Service) (*Service, error) {
	s := &Service{Name: strings.ToLower(ls.Name), Namespace: strings.ToLower(ls.Namespace)}
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	if !orch.ValidLabel(s.Name) || !orch.ValidLabel(s.Namespace) {
		return nil, fmt.Errorf("bad name %q or namespace %q", ls.Name, ls.Namespace)
	}
	kinds := 0
	switch {
	case ls.ExternalName != "":
		s.Kind, s.ExternalName = ExternalName, ls.ExternalName
		kinds++
	case ls.Headless:
		s.Kind = Headless
	}
	if ls.Headless {
		kinds++
	}
	for _, a := range ls.ClusterIPs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("bad cluster IP %q", a)
		}
		s.ClusterIPs = append(s.ClusterIPs, ip.Unmap())
	}
	if len(s.ClusterIPs) > 0 {
		kinds++
	}
	if kinds > 1 {
		return nil, errors.New("a service is only one of cluster IPs, headless and external name")
	}
	for _, p := range ls.Ports {
		port := p.Port
		if port == 0 {
			port = p.TargetPort
		}
		if port <= 0 || port > 65535 {
			return nil, fmt.Errorf("bad port %d", port)
		}
		s.Ports = append(s.Ports, Port{Name: p.Name, Protocol: legacyProtocol(p.Protocol), Port: int32(port)})
	}
	return s, nil
}

// legacySlices maps the tasks of service s onto slices: one per address
// family and set of ports, in task order.
func legacySlices(s *Service, tasks []orch.Task, active bool, down map[string]bool) ([]*Slice, error) {
	var out []*Slice
	for _, t := range tasks {
		if t.Address == "" {
			continue // a task on a node, without an address of its own: nothing to answer with
		}
		addr := t.Address
		if h, _, err := net.SplitHostPort(addr); err == nil {
			addr = h // "ip:port", "[ipv6]:port", "host:port": the port is not the endpoint's
		}
		typ := FQDN
		if ip, err := netip.ParseAddr(addr); err == nil {
			typ, addr = IPv6, ip.Unmap().String()
			if ip.Unmap().Is4() {
				typ = IPv4
			}
		} else if addr = strings.TrimSuffix(addr, "."); strings.ContainsAny(addr, ":/ ") || addr == "" {
			return nil, fmt.Errorf("task %q: bad address %q", t.ID, t.Address)
		}
		ports := make([]Port, len(t.Ports))
		for i, p := range t.Ports {
			ports[i] = Port{Name: p.Name, Protocol: legacyProtocol(p.Protocol), Port: int32(p.ContainerPort)}
		}
		var sl *Slice
		for _, o := range out {
			if o.Type == typ && slices.Equal(o.Ports, ports) {
				sl = o
			}
		}
		if sl == nil {
			sl = &Slice{Namespace: s.Namespace, Name: s.Name + "-" + strconv.Itoa(len(out)), Service: s.Name, Type: typ, Ports: ports}
			out = append(out, sl)
		}
		ready := active && t.DesiredStatus == "running" && (t.ActualStatus == "running" || t.ActualStatus == "healthy") && !down[t.NodeID]
		e := EndpointSpec{Addresses: []string{addr}, Hostname: strings.ToLower(t.Hostname), Ready: False}
		if ready {
			e.Ready = True
		}
		if err := sl.Add(e); err != nil {
			return nil, fmt.Errorf("task %q: %w", t.ID, err)
		}
	}
	for _, sl := range out {
		sl.Compact()
	}
	return out, nil
}

// legacyProtocol is a state document's protocol (lowercase, default tcp)
// as the API writes it.
func legacyProtocol(p string) string {
	if p == "" {
		return "TCP"
	}
	return Protocol(strings.ToUpper(p))
}
