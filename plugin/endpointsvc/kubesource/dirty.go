package kubesource

import (
	"net/netip"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// stores are the informers' stores the mappings read. slices is indexed
// by the Service a slice is labelled with ("namespace/name", the label as
// written), so that a patch finds a name's slices without a scan.
type stores struct {
	svcs    cache.Store
	slices  cache.Indexer
	nodes   cache.Store // schema orch only
	nss     cache.Store // schema kubernetes only
	imports cache.Store // multicluster only
	pods    *podIndex   // pods verified only
}

// byService is the slice indexer's index of the Service a slice is
// labelled with.
const byService = "service"

func sliceService(obj any) ([]string, error) {
	if sl, ok := obj.(*kSlice); ok && !sl.skip && sl.sl.Service != "" {
		return []string{sl.Namespace + "/" + sl.sl.Service}, nil
	}
	return nil, nil
}

// slicesOf returns the slices labelled with name ("namespace/name").
func (st stores) slicesOf(name string) []*kSlice {
	if st.slices == nil {
		return nil // noendpoints
	}
	objs, _ := st.slices.ByIndex(byService, name)
	out := make([]*kSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*kSlice); ok {
			out = append(out, sl)
		}
	}
	return out
}

// service returns the Service name ("namespace/name"), or nil.
func (st stores) service(name string) *kService {
	o, ok, _ := st.svcs.GetByKey(name)
	if !ok {
		return nil
	}
	s, _ := o.(*kService)
	return s
}

// changes is what the informers' events changed since the last build or
// patch: names ("namespace/name": a Service's, or a slice's label, before
// and after the change), nodes (by name), and whether a namespace came or
// went.
type changes struct {
	names      map[string]bool
	imports    map[string]bool // ServiceImport names ("namespace/name"): an import's, or a slice's multicluster label, before and after
	nodes      map[string]bool
	pods       map[netip.Addr]bool // addresses of Pods that came, went or changed
	namespaces bool
	triggers   []trigger // trigger times of the slices that came or changed (programmed.go)
}

func (c *changes) empty() bool {
	return len(c.names) == 0 && len(c.imports) == 0 && len(c.nodes) == 0 && len(c.pods) == 0 && !c.namespaces
}

// dirty collects the changes; the handlers of all informers write it, the
// source's goroutine takes it.
type dirty struct {
	mu sync.Mutex
	c  changes
}

// object unwraps a deleted object's tombstone.
func object(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// mark records what obj (any version of it) touches.
func (d *dirty) mark(obj any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch o := object(obj).(type) {
	case *kService:
		d.name(o.Namespace + "/" + o.Name)
	case *kSlice:
		if o.sl.Service != "" {
			d.name(o.Namespace + "/" + o.sl.Service)
		}
		if o.sl.Import != "" {
			d.importName(o.Namespace + "/" + o.sl.Import)
		}
	case *kImport:
		d.importName(o.Namespace + "/" + o.Name)
	case *kNode:
		if d.c.nodes == nil {
			d.c.nodes = map[string]bool{}
		}
		d.c.nodes[o.Name] = true
	case *kNamespace:
		d.c.namespaces = true
	}
}

// triggered records the trigger time of a slice that came or changed
// (obj is its new version), if it has one.
func (d *dirty) triggered(obj any) {
	sl, ok := obj.(*kSlice)
	if !ok || sl.trigger == 0 || sl.skip || sl.sl.Service == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.c.triggers = append(d.c.triggers, trigger{name: sl.Namespace + "/" + sl.sl.Service, at: sl.trigger})
}

func (d *dirty) name(n string) {
	if d.c.names == nil {
		d.c.names = map[string]bool{}
	}
	d.c.names[n] = true
}

func (d *dirty) importName(n string) {
	if d.c.imports == nil {
		d.c.imports = map[string]bool{}
	}
	d.c.imports[n] = true
}

// markAddrs records Pod addresses.
func (d *dirty) markAddrs(addrs []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c.pods == nil {
		d.c.pods = map[netip.Addr]bool{}
	}
	for _, a := range addrs {
		d.c.pods[a] = true
	}
}

// take returns what changed and starts over.
func (d *dirty) take() changes {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.c
	d.c = changes{}
	return c
}
