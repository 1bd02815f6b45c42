package endpointsvc

import (
	"io"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"unique"

	"k8s.io/client-go/tools/cache"
)

// kubeStores are the informers' stores the mappings read. slices is
// indexed by Service ("namespace/name"), so that a patch finds a Service's
// slices without a scan.
type kubeStores struct {
	svcs   cache.Store
	slices cache.Indexer
	nodes  cache.Store // schema orch only
	nss    cache.Store // schema kubernetes only
}

// byService is the slice indexer's index of the Service a slice belongs to.
const byService = "service"

func sliceService(obj any) ([]string, error) {
	if sl, ok := obj.(*kSlice); ok && sl.service != "" {
		return []string{sl.service}, nil
	}
	return nil, nil
}

// kubeDirty collects what the informers' events changed between two
// patches: Services (by "namespace/name": theirs, or their slices'),
// nodes (by name) and whether a namespace came or went. The handlers of
// all informers write it; the source's goroutine takes it.
type kubeDirty struct {
	mu         sync.Mutex
	services   map[string]bool
	nodes      map[string]bool
	namespaces bool
}

func (d *kubeDirty) service(id string) {
	if id == "" {
		return
	}
	d.mu.Lock()
	if d.services == nil {
		d.services = map[string]bool{}
	}
	d.services[id] = true
	d.mu.Unlock()
}

func (d *kubeDirty) node(name string) {
	d.mu.Lock()
	if d.nodes == nil {
		d.nodes = map[string]bool{}
	}
	d.nodes[strings.ToLower(name)] = true
	d.mu.Unlock()
}

func (d *kubeDirty) namespace() {
	d.mu.Lock()
	d.namespaces = true
	d.mu.Unlock()
}

// take returns what changed and starts over.
func (d *kubeDirty) take() (services, nodes map[string]bool, namespaces bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	services, nodes, namespaces = d.services, d.nodes, d.namespaces
	d.services, d.nodes, d.namespaces = nil, nil, false
	return
}

// object unwraps a deleted object's tombstone.
func object(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// mark records what obj (any version of it) touches.
func (d *kubeDirty) mark(obj any) {
	switch o := object(obj).(type) {
	case *kService:
		d.service(strings.ToLower(o.Namespace + "/" + o.Name))
	case *kSlice:
		d.service(o.service)
	case *kNode:
		d.node(o.Name)
	case *kNamespace:
		d.namespace()
	}
}

// patch maps what changed since the last build or patch and hands it to s:
// the changed Services, each whole with its slices (and, for schema orch,
// every Service with an endpoint on a changed node). It reads only those
// Services' objects, except that a node change looks through the slices
// for the Services with endpoints on it.
func (k *kubeSource) patch(s Sink, st kubeStores, services, nodes map[string]bool, namespaces bool) {
	if len(services) == 0 && len(nodes) == 0 && !namespaces {
		return // what was marked went out with the last patch
	}
	if services == nil {
		services = map[string]bool{}
	}
	if len(nodes) > 0 && !k.spec {
		handles := make(map[unique.Handle[string]]bool, len(nodes))
		for n := range nodes {
			handles[unique.Make(n)] = true
		}
		for _, o := range st.slices.List() {
			sl, ok := o.(*kSlice)
			if !ok || sl.service == "" || services[sl.service] {
				continue
			}
			for i := range sl.endpoints {
				if handles[sl.endpoints[i].node] {
					services[sl.service] = true
					break
				}
			}
		}
	}
	var ks []*kService
	var kl []*kSlice
	var removed []svcKey
	ids := make([]string, 0, len(services))
	for id := range services {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if o, ok, _ := st.svcs.GetByKey(id); ok {
			ks = append(ks, o.(*kService))
		}
		for _, o := range k.slicesOf(st, id) {
			kl = append(kl, o)
		}
	}
	var mapped *State
	if k.spec {
		mapped = specState(ks, kl)
		if namespaces {
			mapped.Namespaces = k.namespaceList(st.nss)
		}
	} else {
		names := map[string]bool{}
		for n := range nodes {
			names[n] = true
		}
		for _, sl := range kl {
			for i := range sl.endpoints {
				if n := sl.endpoints[i].nodeName(); n != "" {
					names[n] = true
				}
			}
		}
		var kn []*kNode
		for n := range names {
			if o, ok, _ := st.nodes.GetByKey(n); ok {
				kn = append(kn, o.(*kNode))
			}
		}
		nodeList, known := kubeNodes(kn, k.nodeAddress)
		mapped = kubeServices(ks, kl, known)
		mapped.Nodes = nodeList
	}
	kept := make(map[string]bool, len(mapped.Services))
	for _, svc := range mapped.Services {
		kept[svc.ID] = true
	}
	for _, id := range ids {
		if !kept[id] {
			if ns, name, ok := strings.Cut(id, "/"); ok {
				removed = append(removed, svcKey{ns, name})
			}
		}
	}
	k.patches.Add(1)
	k.rebuilt.Add(int64(len(mapped.Services)))
	s.Patch(&Patch{
		State:         mapped,
		Removed:       removed,
		DirtyNodes:    nodes,
		SetNamespaces: namespaces && k.spec,
		Full:          func() *State { return k.state(st) },
		Snapshot:      func(w io.Writer) error { return k.writeSnapshot(w, st) },
	})
}

// slicesOf returns the slices of Service id.
func (k *kubeSource) slicesOf(st kubeStores, id string) []*kSlice {
	objs, _ := st.slices.ByIndex(byService, id)
	out := make([]*kSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*kSlice); ok {
			out = append(out, sl)
		}
	}
	return out
}

// namespaceList is the sorted names of the namespaces (those configured,
// when namespaces is set).
func (k *kubeSource) namespaceList(nss cache.Store) []string {
	want := set(k.namespaces...)
	var out []string
	for _, o := range nss.List() {
		if n, ok := o.(*kNamespace); ok && validLabel(strings.ToLower(n.Name)) && (len(want) == 0 || want[strings.ToLower(n.Name)]) {
			out = append(out, strings.ToLower(n.Name))
		}
	}
	sort.Strings(out)
	return out
}

// writeSnapshot writes the stores' whole state in the compact form, one
// Service at a time (mapped as a patch maps it), so that no whole state
// is built.
func (k *kubeSource) writeSnapshot(w io.Writer, st kubeStores) error {
	var nodes []Node
	var known map[string]bool
	var namespaces []string
	if k.spec {
		namespaces = k.namespaceList(st.nss)
	} else {
		var kn []*kNode
		for _, o := range st.nodes.List() {
			if n, ok := o.(*kNode); ok {
				kn = append(kn, n)
			}
		}
		nodes, known = kubeNodes(kn, k.nodeAddress)
	}
	cw, err := newCompactWriter(w, nodes, namespaces)
	if err != nil {
		return err
	}
	var svcs []*kService
	for _, o := range st.svcs.List() {
		if s, ok := o.(*kService); ok {
			svcs = append(svcs, s)
		}
	}
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].less(&svcs[j].kMeta) })
	for _, svc := range svcs {
		mapped, ok := orchService(svc)
		if k.spec {
			mapped, ok = specService(svc)
		}
		if !ok {
			continue
		}
		if err := cw.service(&mapped); err != nil {
			return err
		}
		// the tasks the mappings would make of the slices (sliceTasks),
		// written without making them
		slices := k.slicesOf(st, mapped.ID)
		sortSlices(slices)
		for _, sl := range slices {
			ports := taskPorts(sl)
			for i := range sl.endpoints {
				t := compactTask{ports: ports, desired: StatusRunning}
				if sl.addressType == addressFQDN {
					t.address = sl.fqdns[i]
				} else {
					t.ip = netip.AddrFrom16(sl.endpoints[i].ip).Unmap()
				}
				if k.spec {
					t.hostname, t.actual = specEndpoint(sl, i, svc.notReady)
				} else {
					t.node, t.desired, t.actual = kubeEndpoint(sl, i, known)
				}
				cw.task(t)
			}
		}
	}
	return cw.end()
}
