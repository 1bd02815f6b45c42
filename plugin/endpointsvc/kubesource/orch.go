package endpointsvc

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Node address types, in the default preference order of node_address.
var defaultNodeAddress = []string{"internalip", "externalip", "hostname"}

// nodeAddressTypes are the address types a node can report.
var nodeAddressTypes = set("internalip", "externalip", "hostname", "internaldns", "externaldns")

// kubeState maps slim Kubernetes objects onto the model, so that the one
// predicate (IsEndpoint) and the one table builder serve them:
//
//   - a Service is a service (id "namespace/name", status active) whose ports
//     carry their nodePort as the published port; ExternalName Services and
//     Services outside the namespaces are left out (the kubernetes plugin
//     answers those);
//   - an EndpointSlice endpoint is a task of its Service: terminating means
//     desired stopped (else running); ready is healthy, serving without
//     ready is running, otherwise unhealthy; nodeName is its node; its first
//     address is the task's address (IPv4, IPv6, or FQDN for addressType
//     FQDN); the slice's ports are the task's container ports;
//   - a Node is a node whose advertise address is its first address of the
//     preferred types (nodeAddress), status down when its Ready condition is
//     False, else ready. A node with no usable address is left out, and
//     endpoints on a node that is not known run on no node.
//
// Output is sorted (services by id, slices by name, nodes by name) so that
// the same objects give the same state. Objects that cannot be mapped (a
// name that is not a DNS label, an address of the wrong family) are skipped.
func kubeState(services []*kService, slices []*kSlice, nodes []*kNode, nodeAddress []string) *State {
	ns, known := kubeNodes(nodes, nodeAddress)
	st := kubeServices(services, slices, known)
	st.Nodes = ns
	return st
}

// kubeNodes maps nodes (sorted by name in place) and returns the names of
// those it kept.
func kubeNodes(nodes []*kNode, nodeAddress []string) ([]Node, map[string]bool) {
	if len(nodeAddress) == 0 {
		nodeAddress = defaultNodeAddress
	}
	out := make([]Node, 0, len(nodes))
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		name := strings.ToLower(n.Name)
		if !validName(name) || known[name] {
			continue
		}
		addr := ""
		for _, t := range nodeAddress {
			if a := n.addresses[t]; a != "" {
				if _, _, err := ParseAddress(a); err == nil {
					addr = a
					break
				}
			}
		}
		if addr == "" {
			continue
		}
		status := "ready"
		if n.readyFalse {
			status = "down"
		}
		known[name] = true
		out = append(out, Node{ID: name, Name: name, Address: addr, Status: status})
	}
	return out, known
}

// kubeServices maps services and their slices for schema orch; an endpoint
// runs on its node when known has the node's name, else on none.
func kubeServices(services []*kService, slices []*kSlice, known map[string]bool) *State {
	st := &State{Services: make([]Service, 0, len(services))}
	svcs := make(map[string]bool, len(services))
	for _, s := range services {
		svc, ok := orchService(s)
		if !ok {
			continue
		}
		svcs[svc.ID] = true
		st.Services = append(st.Services, svc)
	}
	sort.Slice(st.Services, func(i, j int) bool { return st.Services[i].ID < st.Services[j].ID })

	st.Tasks = sliceTasks(slices, svcs, func(sl *kSlice, i int, t *Task) {
		t.NodeID, t.DesiredStatus, t.ActualStatus = kubeEndpoint(sl, i, known)
	})
	return st
}

// orchService maps one Service for schema orch, or reports that it leaves
// it out.
func orchService(s *kService) (Service, bool) {
	name, ns := strings.ToLower(s.Name), strings.ToLower(s.Namespace)
	if s.skip || s.externalName || !validLabel(name) || !validLabel(ns) || ns == nodeNamespace {
		return Service{}, false
	}
	return Service{ID: ns + "/" + name, Name: name, Namespace: ns, Status: "active", Ports: servicePorts(s)}, true
}

// kubeEndpoint is endpoint i of slice sl as schema orch maps it: its node
// when known, desired stopped when terminating (else running), actual
// healthy when ready, running when only serving, else unhealthy.
func kubeEndpoint(sl *kSlice, i int, known map[string]bool) (node, desired, actual string) {
	ep := &sl.endpoints[i]
	if n := ep.nodeName(); known[n] {
		node = n
	}
	desired = StatusRunning
	if ep.terminating {
		desired = StatusStopped
	}
	switch {
	case ep.ready:
		actual = StatusHealthy
	case ep.serving:
		actual = StatusRunning
	default:
		actual = StatusUnhealthy
	}
	return node, desired, actual
}

// validEndpointAddress reports whether address fits the slice's addressType.
func validEndpointAddress(addressType, address string) bool {
	switch addressType {
	case "IPv4", "IPv6":
		ip, err := netip.ParseAddr(address)
		if err != nil || ip.Zone() != "" {
			return false
		}
		return (addressType == "IPv4") == ip.Unmap().Is4()
	case "FQDN":
		_, host, err := ParseAddress(address)
		return err == nil && host != "" && !strings.Contains(address, ":")
	}
	return false
}

// sliceTasks maps the endpoints of the slices whose Service is in svcs
// onto tasks, slices ordered by namespace and name (so that the same
// objects give the same state); status sets each task's schema-specific
// fields (it starts desired running, actual unhealthy).
func sliceTasks(slices []*kSlice, svcs map[string]bool, status func(sl *kSlice, i int, t *Task)) []Task {
	sortSlices(slices)
	n := 0
	for _, sl := range slices {
		if svcs[sl.service] {
			n += len(sl.endpoints)
		}
	}
	tasks := make([]Task, 0, n)
	for _, sl := range slices {
		if !svcs[sl.service] {
			continue
		}
		ports := taskPorts(sl)
		for i := range sl.endpoints {
			t := sliceTask(sl, i, ports)
			status(sl, i, &t)
			tasks = append(tasks, t)
		}
	}
	return tasks
}

// sortSlices orders slices by namespace and name.
func sortSlices(slices []*kSlice) {
	sort.Slice(slices, func(i, j int) bool { return slices[i].less(&slices[j].kMeta) })
}

// taskPorts are a slice's valid ports as task ports (shared by its tasks).
func taskPorts(sl *kSlice) []TaskPort {
	var ports []TaskPort
	for _, p := range sl.ports {
		if protocols[p.protocol] && validPort(int(p.port), false) && (p.name == "" || validLabel(p.name)) {
			ports = append(ports, TaskPort{Name: p.name, Protocol: p.protocol, ContainerPort: int(p.port)})
		}
	}
	return ports
}

// sliceTask is endpoint i of slice sl as a task of its Service: desired
// running, actual unhealthy until the schema's mapping says otherwise.
func sliceTask(sl *kSlice, i int, ports []TaskPort) Task {
	return Task{
		ID:            strings.ToLower(sl.Namespace) + "/" + sl.Name + "/" + strconv.Itoa(i),
		ServiceID:     sl.service,
		DesiredStatus: StatusRunning,
		ActualStatus:  StatusUnhealthy,
		Ports:         ports,
		Address:       sl.address(i), // the transform kept only valid addresses
	}
}

// servicePorts are a Service's valid ports, each name and protocol once:
// the Service's port as TargetPort (what slices' ports are matched with by
// name) and Port, the nodePort as PublishedPort.
func servicePorts(s *kService) []ServicePort {
	var out []ServicePort
	seen := map[portKey]bool{}
	for _, p := range s.ports {
		if !protocols[p.protocol] || !validPort(int(p.port), false) || !validPort(int(p.nodePort), true) ||
			(p.name != "" && !validLabel(p.name)) || seen[portKey{p.name, p.protocol}] {
			continue
		}
		seen[portKey{p.name, p.protocol}] = true
		out = append(out, ServicePort{Name: p.name, Protocol: p.protocol, TargetPort: int(p.port), Port: int(p.port), PublishedPort: int(p.nodePort)})
	}
	return out
}
