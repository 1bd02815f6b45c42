package kubesource

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"
	"unsafe"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
)

// orchModel maps the objects onto the orchestrator model (schema orch), so
// that its one predicate (orch.IsEndpoint) and table serve them:
//
//   - a Service is a service (id "namespace/name", status active) whose
//     ports carry their nodePort as the published port; ExternalName
//     Services and a namespace named node are left out (the orch schema
//     reserves node, and the kubernetes plugin answers ExternalNames);
//   - an EndpointSlice endpoint is a task of its Service: terminating means
//     desired stopped (else running); ready is healthy, serving without
//     ready is running, otherwise unhealthy; nodeName is its node; its
//     first address is the task's address (an endpoint's addresses are
//     fungible); the slice's ports are the task's container ports;
//   - a Node is a node whose advertise address is its first address of the
//     preferred types (nodeAddress), status down when its Ready condition
//     is False, else ready. A node with no usable address is left out, and
//     endpoints on a node that is not known run on no node.
//
// Output is sorted (services by id, slices by name, nodes by name) so that
// the same objects give the same state; objects that cannot be mapped (a
// name that is not a DNS label) are left out. The states need not be
// validated: every name is checked and every reference resolves.
type orchModel struct {
	nodeAddress []string // node address types, in preference order (lowercased)

	// mapped holds each node a patch mapped, by its name in the store,
	// until a change marks it (changes.nodes) or the stores are mapped
	// whole: a patch looks up and maps only the nodes it has not. A node
	// the store did not hold is kept as not ok. Every change of a node
	// that mapping reads is marked (heartbeats, which change nothing it
	// reads, are skipped before), as patches already rely on to find the
	// Services on changed nodes.
	mu     sync.Mutex
	mapped map[unique.Handle[string]]mappedNode

	// reuse holds the arrays of the last patch's tasks and nodes, which
	// the next patch reuses (a flip's new arrays of ten Tasks and ten
	// Nodes were a fifth of its mapping and half of its page faults): a
	// patch's tasks are read only while the sink applies it, before the
	// loop makes the next (the change-log record is written from the
	// objects: Patch.WriteServices), and so are its nodes when it marks
	// none dirty (the record carries the dirty ones). Taken under mu, so
	// that a second patch at once makes its own.
	reuse reused
}

// reused are the arrays a patch hands to the next (empty, with room).
type reused struct {
	tasks []orch.Task
	nodes []orch.Node
}

// maxReused bounds the arrays a patch hands to the next: a node change
// can patch thousands of Services, whose arrays are not kept.
const maxReused = 1 << 12

// keep hands mapped's arrays to the next patch: its tasks, and its nodes
// when the patch marks no node dirty.
func (m *orchModel) keep(mapped *orch.State, nodes bool) {
	var r reused
	if cap(mapped.Tasks) <= maxReused {
		r.tasks = mapped.Tasks[:0]
	}
	if nodes && cap(mapped.Nodes) <= maxReused {
		r.nodes = mapped.Nodes[:0]
	}
	m.mu.Lock()
	m.reuse = r
	m.mu.Unlock()
}

// maxMappedNodes bounds orchModel.mapped: more than the largest
// clusters' nodes.
const maxMappedNodes = 1 << 15

// mappedNode is a node as mapped, or ok false when it is left out.
type mappedNode struct {
	node orch.Node
	ok   bool
}

// DefaultNodeAddress is the default preference order of node_address.
var DefaultNodeAddress = []string{"internalip", "externalip", "hostname"}

// NodeAddressTypes are the address types a node can report (lowercased).
var NodeAddressTypes = []string{"internalip", "externalip", "hostname", "internaldns", "externaldns"}

// nodeAddressTypes is len(NodeAddressTypes): a kNode holds an address of
// each (TestNodeAddressTypes).
const nodeAddressTypes = 5

func (m *orchModel) name() string { return "orch" }

func (m *orchModel) watchNodes() bool { return true }

// whole maps the stores' objects.
func (m *orchModel) whole(st stores) feed.State {
	m.mu.Lock()
	m.mapped = nil // whatever was marked before a whole mapping is gone
	m.mu.Unlock()
	var ks []*kService
	for _, o := range st.svcs.List() {
		if s, ok := o.(*kService); ok {
			ks = append(ks, s)
		}
	}
	var kl []*kSlice
	for _, o := range st.slices.List() {
		if sl, ok := o.(*kSlice); ok && !sl.skip && sl.sl.Service != "" {
			kl = append(kl, sl)
		}
	}
	nodes, known := m.nodes(allNodes(st))
	mapped := services(ks, kl, &known, nil)
	mapped.Nodes = nodes
	return mapped
}

func allNodes(st stores) []*kNode {
	var kn []*kNode
	for _, o := range st.nodes.List() {
		if n, ok := o.(*kNode); ok {
			kn = append(kn, n)
		}
	}
	return kn
}

// patch maps the changed Services, each whole with its slices, and every
// Service with an endpoint on a changed node (found by a look through the
// slices), with the nodes their endpoints run on.
func (m *orchModel) patch(st stores, c changes, whole func() feed.State) feed.Patch {
	names := c.names
	if names == nil {
		names = map[string]bool{}
	}
	if len(c.nodes) > 0 {
		onNodes(st, c.nodes, names)
	}
	var ks []*kService
	var kl []*kSlice
	ids := sortedKeys(names)
	for _, id := range ids {
		if s := st.service(id); s != nil {
			ks = append(ks, s)
		}
		kl = append(kl, st.slicesOf(id)...)
	}
	m.mu.Lock()
	reuse := m.reuse
	m.reuse = reused{}
	m.mu.Unlock()
	nodes, known := m.usedNodes(st, kl, c.nodes, reuse.nodes)
	mapped := services(ks, kl, &known, reuse.tasks)
	mapped.Nodes = nodes
	m.keep(mapped, len(c.nodes) == 0)
	p := &orch.Patch{State: mapped, DirtyNodes: c.nodes, Programmed: programmed(st, c.triggers),
		Whole:         func() *orch.State { return whole().(*orch.State) },
		WriteSnapshot: func(w io.Writer) error { return m.snapshot(w, st) },
		WriteServices: func(cw *orch.CompactWriter) error { return writeServices(cw, mapped.Services, kl, &known) }}
	for _, id := range ids {
		// A changed name the patch maps no Service for is removed - unless
		// it is no Service's ID at all (a slice's label in capitals): the
		// mapping's IDs are the stored names, lowercase labels.
		if ns, name, ok := strings.Cut(id, "/"); ok && orch.ValidLabel(ns) && orch.ValidLabel(name) && !hasService(mapped.Services, id) {
			p.Removed = append(p.Removed, orch.SvcKey{Namespace: ns, Name: name})
		}
	}
	return p
}

// hasService reports whether svcs (sorted by ID) holds id.
func hasService(svcs []orch.Service, id string) bool {
	_, ok := serviceIndex(svcs, id)
	return ok
}

// serviceIndex is where svcs (sorted by ID) holds id, if it does.
func serviceIndex(svcs []orch.Service, id string) (int, bool) {
	return slices.BinarySearchFunc(svcs, id, func(s orch.Service, id string) int { return strings.Compare(s.ID, id) })
}

// onNodes adds to names the Services with an endpoint on one of nodes, by
// a look through every slice. A Node's change that DNS reads (its Ready
// condition, its addresses) is rare - heartbeats change neither and are
// skipped before this - so the slices carry no index by node, which every
// slice's change would pay for (an update of ten endpoints rewrote ten
// index sets: 10 us of a flip, in perf); a look through 50,000 slices is
// BenchmarkNodeChange's (10-20 ms on this machine).
func onNodes(st stores, nodes, names map[string]bool) {
	handles := make(map[unique.Handle[string]]bool, len(nodes))
	for n := range nodes {
		handles[unique.Make(n)] = true
	}
	for _, o := range st.slices.List() {
		sl, ok := o.(*kSlice)
		if !ok || sl.skip || sl.sl.Service == "" {
			continue
		}
		for i := range sl.sl.Endpoints {
			if handles[sl.sl.Endpoints[i].NodeName] {
				names[sl.Namespace+"/"+sl.sl.Service] = true
				break
			}
		}
	}
}

// knownNodes are the nodes a mapping kept - their names as the table has
// them (lowercased) - by the handle of their name in the store, which is
// the handle of the endpoints that run on them (an API server admits only
// lowercase node names: a store name and an endpoint's are the same
// string, and a map of handles hashes a pointer, not the string).
// A patch's few are looked through (no map to allocate per patch); a
// whole mapping's many are a map.
type knownNodes struct {
	few  []knownNode
	many map[unique.Handle[string]]string
}

type knownNode struct {
	h    unique.Handle[string]
	name string
}

// fewKnown is how many nodes knownNodes looks through.
const fewKnown = 32

func newKnownNodes(n int) knownNodes {
	if n <= fewKnown {
		return knownNodes{few: make([]knownNode, 0, n)}
	}
	return knownNodes{many: make(map[unique.Handle[string]]string, n)}
}

func (k *knownNodes) add(h unique.Handle[string], name string) {
	if k.many != nil {
		k.many[h] = name
		return
	}
	k.few = append(k.few, knownNode{h, name})
}

// name is node h's name, or "" when it is not known.
func (k *knownNodes) name(h unique.Handle[string]) string {
	if k.many != nil {
		return k.many[h]
	}
	for _, n := range k.few {
		if n.h == h {
			return n.name
		}
	}
	return ""
}

// usedNodes maps the nodes a patch carries - the changed ones and those
// the slices' endpoints run on, each from the store - as nodes maps them,
// through m.mapped: a node that did not change since it was last mapped
// is neither looked up nor mapped again. They are appended to out[:0]
// when it has room for them all.
func (m *orchModel) usedNodes(st stores, kl []*kSlice, changed map[string]bool, out []orch.Node) ([]orch.Node, knownNodes) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mapped == nil || len(m.mapped) > maxMappedNodes {
		m.mapped = map[unique.Handle[string]]mappedNode{} // names of nodes long gone, after years of autoscaling
	}
	var room [16]unique.Handle[string] // a patch's few nodes, mostly
	used := room[:0]
	for n := range changed {
		h := unique.Make(n)
		delete(m.mapped, h)
		used = append(used, h)
	}
	for _, sl := range kl {
		for i := range sl.sl.Endpoints {
			if h := sl.sl.Endpoints[i].NodeName; h != (unique.Handle[string]{}) {
				used = append(used, h)
			}
		}
	}
	slices.SortFunc(used, func(a, b unique.Handle[string]) int { return strings.Compare(a.Value(), b.Value()) }) // as nodes sorts them
	used = slices.Compact(used)
	if cap(out) < len(used) {
		out = make([]orch.Node, 0, len(used))
	}
	out = out[:0]
	known := newKnownNodes(len(used))
	names := newNameSet(len(used))
	for _, h := range used {
		mn, ok := m.mapped[h]
		if !ok {
			if o, held, _ := st.nodes.GetByKey(h.Value()); held {
				mn.node, mn.ok = m.mapNode(o.(*kNode))
			}
			m.mapped[h] = mn
		}
		if mn.ok && !names.add(out, mn.node.Name) {
			known.add(h, mn.node.Name)
			out = append(out, mn.node)
		}
	}
	return out, known
}

// nameSet tells whether a node name is taken: for the few nodes of most
// patches by a look through the nodes kept, else through a set.
type nameSet map[string]bool

func newNameSet(n int) nameSet {
	if n < 32 {
		return nil
	}
	return make(nameSet, n)
}

// add reports whether out (the nodes kept) holds a node named name, and
// notes name as held.
func (s nameSet) add(out []orch.Node, name string) (had bool) {
	if s == nil {
		return slices.ContainsFunc(out, func(n orch.Node) bool { return n.Name == name })
	}
	had, s[name] = s[name], true
	return had
}

// nodes maps nodes (sorted by name in place) and returns those it kept:
// of two whose names are one in lower case, the first.
func (m *orchModel) nodes(nodes []*kNode) ([]orch.Node, knownNodes) {
	out := make([]orch.Node, 0, len(nodes))
	slices.SortFunc(nodes, func(a, b *kNode) int { return strings.Compare(a.Name, b.Name) })
	known := newKnownNodes(len(nodes))
	names := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		node, ok := m.mapNode(n)
		if !ok || names[node.Name] {
			continue
		}
		names[node.Name] = true
		known.add(unique.Make(n.Name), node.Name)
		out = append(out, node)
	}
	return out, known
}

// mapNode maps one node, or reports that it is left out: a name that is
// not valid, or no address of the preferred types that parses.
func (m *orchModel) mapNode(n *kNode) (orch.Node, bool) {
	name := strings.ToLower(n.Name)
	if !orch.ValidName(name) {
		return orch.Node{}, false
	}
	pref := m.nodeAddress
	if len(pref) == 0 {
		pref = DefaultNodeAddress
	}
	for _, t := range pref {
		if a := n.address(t); a != "" {
			if _, _, err := orch.ParseAddress(a); err == nil {
				status := "ready"
				if n.readyFalse {
					status = "down"
				}
				return orch.Node{ID: name, Name: name, Address: a, Status: status}, true
			}
		}
	}
	return orch.Node{}, false
}

// services maps Services and their slices (sorting kl in place); an
// endpoint runs on its node when known has the node, else on none. The
// tasks are appended to tasks[:0] when it has room for them all.
func services(ks []*kService, kl []*kSlice, known *knownNodes, tasks []orch.Task) *orch.State {
	st := &orch.State{Services: make([]orch.Service, 0, len(ks))}
	for _, s := range ks {
		if svc, ok := orchService(s); ok {
			st.Services = append(st.Services, svc)
		}
	}
	slices.SortFunc(st.Services, func(a, b orch.Service) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(kl, func(a, b *kSlice) int { return a.compare(&b.kMeta) })
	n := 0
	for _, sl := range kl {
		n += len(sl.sl.Endpoints)
	}
	if cap(tasks) < n {
		tasks = make([]orch.Task, 0, n) // a Task is ~150 bytes: no growth by doubling
	}
	st.Tasks = tasks[:0]
	for _, sl := range kl {
		id := sl.Namespace + "/" + sl.sl.Service // exactly: a label in capitals names no Service
		if !hasService(st.Services, id) {
			continue
		}
		ports := taskPorts(&sl.sl)
		tids := taskIDs(strings.ToLower(sl.Namespace)+"/"+sl.Name+"/", len(sl.sl.Endpoints))
		var addrs strList
		if sl.sl.Type != k8sdns.FQDN {
			addrs = taskAddrs(&sl.sl)
		}
		for i := range sl.sl.Endpoints {
			t := orch.Task{ID: tids.at(i), ServiceID: id, Ports: ports, Address: address(&sl.sl, addrs, i)}
			if sl.sl.Type == k8sdns.FQDN && !validFQDN(t.Address) {
				continue // an FQDN the orch model cannot answer with
			}
			t.NodeID, t.DesiredStatus, t.ActualStatus = endpointStatus(&sl.sl.Endpoints[i], known)
			st.Tasks = append(st.Tasks, t)
		}
	}
	return st
}

// strList is n strings end to end in one string (one allocation for a
// slice's tasks, not one each): a slice's task IDs or addresses.
type strList struct {
	all  string
	ends []int
}

// newStrList writes n strings end to end into one, the ith appended by
// add; size is about their bytes.
func newStrList(n, size int, add func(b []byte, i int) []byte) strList {
	b := make([]byte, 0, size)
	ends := make([]int, n)
	for i := range n {
		b = add(b, i)
		ends[i] = len(b)
	}
	return strList{all: unsafe.String(unsafe.SliceData(b), len(b)), ends: ends} // b is never written again
}

// taskIDs makes the IDs prefix+"0" to prefix+(n-1).
func taskIDs(prefix string, n int) strList {
	return newStrList(n, n*(len(prefix)+3), func(b []byte, i int) []byte {
		return strconv.AppendInt(append(b, prefix...), int64(i), 10)
	})
}

// taskAddrs are the first addresses of an IP slice's endpoints as text,
// written into one string (a string each was a third of a flip's
// allocations).
func taskAddrs(sl *k8sdns.Slice) strList {
	return newStrList(len(sl.Endpoints), len(sl.Endpoints)*16, func(b []byte, i int) []byte { return sl.Addr(i, 0).AppendTo(b) })
}

// address is endpoint i's first address as text: an FQDN slice's as
// it is, an IP slice's from addrs (taskAddrs).
func address(sl *k8sdns.Slice, addrs strList, i int) string {
	if sl.Type == k8sdns.FQDN {
		return sl.FQDNAddr(i, 0)
	}
	return addrs.at(i)
}

// at is the ith string.
func (l strList) at(i int) string {
	start := 0
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.all[start:l.ends[i]]
}

// orchMapped is a Service as orchService maps it.
type orchMapped struct {
	svc orch.Service
	ok  bool
}

// orchService is s as mapped (mapService), mapped once per stored
// object. The result's Ports are shared by every mapping of s: no reader
// writes them.
func orchService(s *kService) (orch.Service, bool) {
	m := s.orch.Load()
	if m == nil {
		m = &orchMapped{}
		m.svc, m.ok = mapService(s)
		s.orch.Store(m) // two goroutines at once store equal mappings
	}
	return m.svc, m.ok
}

// mapService maps one Service, or reports that it leaves it out. Its ID
// is its stored namespace and name, which the API server keeps to
// lowercase labels; one that is not (no API server stores it) is left
// out, so that every match of a slice's label, the index's, the
// compaction's (slicesFor) and the mapping's, is an exact one, as the
// stock plugin's is.
func mapService(s *kService) (orch.Service, bool) {
	name, ns := s.Name, s.Namespace
	if s.skip || s.svc.Kind == k8sdns.ExternalName || !orch.ValidLabel(name) || !orch.ValidLabel(ns) || ns == orch.NodeNamespace {
		return orch.Service{}, false
	}
	return orch.Service{ID: ns + "/" + name, Name: name, Namespace: ns, Status: "active", Ports: servicePorts(s)}, true
}

// endpointStatus is an endpoint as schema orch maps it: its node when
// known, desired stopped when terminating (else running), actual healthy
// when ready, running when only serving (unset serving: as ready), else
// unhealthy.
func endpointStatus(ep *k8sdns.Endpoint, known *knownNodes) (node, desired, actual string) {
	node = known.name(ep.NodeName)
	desired = orch.StatusRunning
	if ep.Terminating == k8sdns.True {
		desired = orch.StatusStopped
	}
	switch {
	case ep.IsReady():
		actual = orch.StatusHealthy
	case ep.Serving == k8sdns.True:
		actual = orch.StatusRunning
	default:
		actual = orch.StatusUnhealthy
	}
	return node, desired, actual
}

// taskPorts are a slice's valid ports as task ports (shared by its tasks).
func taskPorts(sl *k8sdns.Slice) []orch.TaskPort { return appendTaskPorts(nil, sl) }

// appendTaskPorts appends a slice's ports as tasks' ports to ports.
func appendTaskPorts(ports []orch.TaskPort, sl *k8sdns.Slice) []orch.TaskPort {
	for _, p := range sl.Ports {
		name, proto := strings.ToLower(p.Name), lowerProtocol(p.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		if orch.ValidProtocol(proto) && orch.ValidPort(int(p.Port), false) && (name == "" || orch.ValidLabel(name)) {
			ports = append(ports, orch.TaskPort{Name: name, Protocol: proto, ContainerPort: int(p.Port)})
		}
	}
	return ports
}

// lowerProtocol is a port's protocol lowercased, the API's three (which
// it spells in capitals) without a new string: strings.ToLower made one
// for every port of every slice a patch or a snapshot maps.
func lowerProtocol(p string) string {
	switch p {
	case "TCP":
		return "tcp"
	case "UDP":
		return "udp"
	case "SCTP":
		return "sctp"
	}
	return strings.ToLower(p)
}

// servicePorts are a Service's valid ports, each name and protocol once:
// the Service's port as TargetPort (what slices' ports are matched with by
// name) and Port, the nodePort as PublishedPort.
func servicePorts(s *kService) []orch.ServicePort {
	var out []orch.ServicePort
	for i, p := range s.svc.Ports {
		name, proto := strings.ToLower(p.Name), lowerProtocol(p.Protocol)
		var nodePort int32
		if s.nodePorts != nil {
			nodePort = s.nodePorts[i]
		}
		if !orch.ValidProtocol(proto) || !orch.ValidPort(int(p.Port), false) || !orch.ValidPort(int(nodePort), true) ||
			(name != "" && !orch.ValidLabel(name)) ||
			slices.ContainsFunc(out, func(o orch.ServicePort) bool { return o.Name == name && o.Protocol == proto }) {
			continue // a Service has a few ports: a look through them, no set
		}
		out = append(out, orch.ServicePort{Name: name, Protocol: proto, TargetPort: int(p.Port), Port: int(p.Port), PublishedPort: int(nodePort)})
	}
	return out
}

// snapshot writes the stores' state in the compact form, one Service at a
// time (mapped as a patch maps it), so that no whole state is built:
// Services in (namespace, name) order, each with its slices, which one
// walk through all the slices in (namespace, Service, name) order finds
// (a look-up in the slices' index per Service was a fifth of the write).
func (m *orchModel) snapshot(w io.Writer, st stores) error {
	nodes, known := m.nodes(allNodes(st))
	cw, err := orch.NewCompactWriter(w, nodes, nil)
	if err != nil {
		return err
	}
	var svcs []*kService
	for _, o := range st.svcs.List() {
		if s, ok := o.(*kService); ok {
			svcs = append(svcs, s)
		}
	}
	slices.SortFunc(svcs, func(a, b *kService) int { return a.compare(&b.kMeta) })
	sls := servedSlices(st)
	var ports []orch.TaskPort // a slice's, reused: the writer copies what it keeps
	for _, s := range svcs {
		var mine []*kSlice
		mine, sls = slicesFor(sls, s)
		svc, ok := orchService(s) // mapped once per stored object
		if !ok {
			continue
		}
		if err := cw.Service(&svc); err != nil {
			return err
		}
		for _, sl := range mine {
			ports = writeTasks(cw, sl, &known, ports)
		}
	}
	return cw.End()
}

// writeServices writes svcs (a patch's, as services mapped them from kl)
// with the tasks of their slices in kl, in the order services gave them:
// a patch's change-log record, written from the objects as the snapshot
// is, so that no task is kept for it. Each slice's Service is looked up
// once, as services does (a node's change can patch thousands).
func writeServices(cw *orch.CompactWriter, svcs []orch.Service, kl []*kSlice, known *knownNodes) error {
	type owned struct{ svc, slice int }
	mine := make([]owned, 0, len(kl))
	for j, sl := range kl {
		if i, ok := serviceIndex(svcs, sl.Namespace+"/"+sl.sl.Service); ok {
			mine = append(mine, owned{i, j})
		}
	}
	slices.SortStableFunc(mine, func(a, b owned) int { return a.svc - b.svc }) // kl's order within a Service
	var ports []orch.TaskPort                                                  // a slice's, reused: the writer copies what it keeps
	for i := range svcs {
		if err := cw.Service(&svcs[i]); err != nil {
			return err
		}
		for len(mine) > 0 && mine[0].svc == i {
			ports = writeTasks(cw, kl[mine[0].slice], known, ports)
			mine = mine[1:]
		}
	}
	return nil
}

// writeTasks writes the tasks of sl's endpoints as services maps them,
// and returns ports (scratch for the slice's ports, the writer copies
// what it keeps) for the next slice.
func writeTasks(cw *orch.CompactWriter, sl *kSlice, known *knownNodes, ports []orch.TaskPort) []orch.TaskPort {
	ports = appendTaskPorts(ports[:0], &sl.sl)
	for i := range sl.sl.Endpoints {
		t := orch.CompactTask{Ports: ports}
		if sl.sl.Type == k8sdns.FQDN {
			if t.Address = sl.sl.FQDNAddr(i, 0); !validFQDN(t.Address) {
				continue
			}
		} else {
			t.IP = sl.sl.Addr(i, 0)
		}
		t.Node, t.Desired, t.Actual = endpointStatus(&sl.sl.Endpoints[i], known)
		cw.Task(t)
	}
	return ports
}

// servedSlices are the stored slices labelled with a Service (those the
// slices' index holds), in (namespace, Service, name) order.
func servedSlices(st stores) []*kSlice {
	var out []*kSlice
	for _, o := range st.slices.List() {
		if sl, ok := o.(*kSlice); ok && !sl.skip && sl.sl.Service != "" {
			out = append(out, sl)
		}
	}
	slices.SortFunc(out, func(a, b *kSlice) int {
		if c := feed.CompareNames(a.Namespace, a.sl.Service, b.Namespace, b.sl.Service); c != 0 {
			return c // cmp.Or would compare the names too, every time
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// slicesFor splits sls (servedSlices' order, past every Service before s)
// into s's slices and the rest, past s.
func slicesFor(sls []*kSlice, s *kService) (mine, rest []*kSlice) {
	i := 0
	for i < len(sls) && feed.CompareNames(sls[i].Namespace, sls[i].sl.Service, s.Namespace, s.Name) < 0 {
		i++ // slices of a Service that is not stored
	}
	j := i
	for j < len(sls) && sls[j].Namespace == s.Namespace && sls[j].sl.Service == s.Name {
		j++
	}
	return sls[i:j], sls[j:]
}

// validFQDN reports whether an FQDN address is one the orch model answers
// with (the mapping leaves the others out).
func validFQDN(a string) bool {
	_, host, err := orch.ParseAddress(a)
	return err == nil && host != ""
}
