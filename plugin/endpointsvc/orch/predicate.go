package orch

// IsEndpoint is THE predicate: it decides whether task t of service svc,
// running on node n (nil when unscheduled or unknown), is an endpoint. Every
// record type (A, AAAA, SRV, node names) and every source uses this one
// function, so no two surfaces can disagree about which tasks count.
//
// A task is an endpoint when its service is active, its desired status is
// running, its actual status is running or healthy (unhealthy too with
// includeUnhealthy), and its node exists and is not down. A task that runs
// on no node (node_id empty) but carries its own address - an external
// endpoint, such as an FQDN EndpointSlice endpoint - has no node to check.
func IsEndpoint(svc *Service, t *Task, n *Node, includeUnhealthy bool) bool {
	if svc == nil || t == nil {
		return false
	}
	if n == nil {
		if t.NodeID != "" || t.Address == "" {
			return false
		}
	} else if n.Status == "down" {
		return false
	}
	if svc.Status != "active" || t.DesiredStatus != StatusRunning {
		return false
	}
	switch t.ActualStatus {
	case StatusRunning, StatusHealthy:
		return true
	case StatusUnhealthy:
		return includeUnhealthy
	}
	return false
}

// Endpoint is one task the predicate admitted, with the node it runs on.
type Endpoint struct {
	Task *Task
	Node *Node
}

// ServiceEndpoints is a service and its endpoint set.
type ServiceEndpoints struct {
	Service   *Service
	Endpoints []Endpoint
}

// EndpointSet applies IsEndpoint to every task of a validated state and
// returns one entry per service, in the state's service order, endpoints in
// task order. Services without endpoints are present with an empty set.
func EndpointSet(st *State, includeUnhealthy bool) []ServiceEndpoints {
	nodes := newIndex[*Node](len(st.Nodes))
	for i := range st.Nodes {
		nodes.add(st.Nodes[i].ID, &st.Nodes[i])
	}
	out := make([]ServiceEndpoints, len(st.Services))
	svcs := newIndex[int](len(st.Services))
	for i := range st.Services {
		out[i].Service = &st.Services[i]
		svcs.add(st.Services[i].ID, i)
	}
	// two passes: count each service's endpoints, then fill one array
	// (no append growth: this runs over every task of a large cluster)
	admitted := func(i int) (int, *Node, bool) {
		t := &st.Tasks[i]
		si, ok := svcs.get(t.ServiceID)
		if !ok {
			return 0, nil, false
		}
		n, _ := nodes.get(t.NodeID)
		return si, n, IsEndpoint(out[si].Service, t, n, includeUnhealthy)
	}
	counts := make([]int, len(out))
	total := 0
	for i := range st.Tasks {
		if si, _, ok := admitted(i); ok {
			counts[si]++
			total++
		}
	}
	all := make([]Endpoint, 0, total)
	for si, c := range counts {
		out[si].Endpoints, all = all[:0:c], all[c:c]
	}
	for i := range st.Tasks {
		if si, n, ok := admitted(i); ok {
			out[si].Endpoints = append(out[si].Endpoints, Endpoint{Task: &st.Tasks[i], Node: n})
		}
	}
	return out
}
