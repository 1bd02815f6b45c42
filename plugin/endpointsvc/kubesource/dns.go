package kubesource

import (
	"io"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// dnsModel maps the objects onto the Kubernetes DNS model (schema
// kubernetes): the slim objects are that model's, so a whole cluster is
// the stores' contents and a patch hands over the changed names' objects
// as they are. Namespaces are watched (names in others are NXDOMAIN);
// Nodes are not.
type dnsModel struct {
	namespaces map[string]bool // the configured namespaces; nil: all
}

func (m *dnsModel) name() string { return "kubernetes" }

func (m *dnsModel) watchNodes() bool { return false }

// whole is the stores' cluster.
func (m *dnsModel) whole(st stores) feed.State {
	c := &k8sdns.Cluster{Namespaces: m.namespaceList(st.nss)}
	for _, o := range st.svcs.List() {
		if s, ok := o.(*kService); ok && !s.skip {
			c.Services = append(c.Services, &s.svc)
		}
	}
	for _, o := range sliceObjects(st) {
		if sl, ok := o.(*kSlice); ok && !sl.skip && (sl.sl.Service != "" || sl.sl.Import != "") {
			c.Slices = append(c.Slices, &sl.sl)
		}
	}
	if st.pods != nil {
		c.Pods = st.pods.all()
	}
	for _, s := range importObjects(st) {
		c.Imports = append(c.Imports, &s.svc)
	}
	return c
}

// sliceObjects are the slice store's objects (none with noendpoints).
func sliceObjects(st stores) []any {
	if st.slices == nil {
		return nil
	}
	return st.slices.List()
}

// patch is the changed names' Services and slices, and the namespace
// list when a namespace came or went.
func (m *dnsModel) patch(st stores, c changes, whole func() feed.State) feed.Patch {
	p := &k8sdns.Patch{
		Whole:         func() *k8sdns.Cluster { return whole().(*k8sdns.Cluster) },
		WriteSnapshot: func(w io.Writer) error { return m.snapshot(w, st) },
		Programmed:    programmed(st, c.triggers),
	}
	for _, name := range sortedKeys(c.names) {
		ns, n, _ := strings.Cut(name, "/")
		ch := k8sdns.Change{Key: k8sdns.Key{Namespace: ns, Name: n}}
		if s := st.service(name); s != nil && !s.skip {
			ch.Service = &s.svc
		}
		for _, sl := range st.slicesOf(name) {
			ch.Slices = append(ch.Slices, &sl.sl)
		}
		p.Changes = append(p.Changes, ch)
	}
	if len(c.imports) > 0 {
		p.Changes = append(p.Changes, m.importChanges(st, c.imports)...)
	}
	if c.namespaces {
		p.Namespaces, p.SetNamespaces = m.namespaceList(st.nss), true
	}
	if st.pods != nil && len(c.pods) > 0 {
		p.Pods = make([]k8sdns.PodAddr, 0, len(c.pods))
		for a := range c.pods {
			p.Pods = append(p.Pods, st.pods.get(a))
		}
		slices.SortFunc(p.Pods, func(a, b k8sdns.PodAddr) int { return a.Addr.Compare(b.Addr) })
	}
	return p
}

// namespaceList is the sorted names of the namespaces (those configured,
// when namespaces is set).
func (m *dnsModel) namespaceList(nss cache.Store) []string {
	var out []string
	for _, o := range nss.List() {
		if n, ok := o.(*kNamespace); ok && (m.namespaces == nil || m.namespaces[strings.ToLower(n.Name)]) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// snapshot writes the stores' cluster in the model's snapshot form, one
// object at a time, Services and slices sorted, so that no whole cluster
// is built.
func (m *dnsModel) snapshot(w io.Writer, st stores) error {
	sw, err := k8sdns.NewSnapshotWriter(w, m.namespaceList(st.nss))
	if err != nil {
		return err
	}
	var svcs []*kService
	for _, o := range st.svcs.List() {
		if s, ok := o.(*kService); ok && !s.skip {
			svcs = append(svcs, s)
		}
	}
	slices.SortFunc(svcs, func(a, b *kService) int { return a.compare(&b.kMeta) })
	for _, s := range svcs {
		if err := sw.Service(&s.svc); err != nil {
			return err
		}
	}
	var sls []*kSlice
	for _, o := range sliceObjects(st) {
		if sl, ok := o.(*kSlice); ok && !sl.skip && (sl.sl.Service != "" || sl.sl.Import != "") {
			sls = append(sls, sl)
		}
	}
	slices.SortFunc(sls, func(a, b *kSlice) int { return a.compare(&b.kMeta) })
	for _, sl := range sls {
		if err := sw.Slice(&sl.sl); err != nil {
			return err
		}
	}
	if imps := importObjects(st); len(imps) > 0 {
		svcs := make([]*k8sdns.Service, len(imps))
		for i, s := range imps {
			svcs[i] = &s.svc
		}
		if err := sw.Imports(svcs); err != nil {
			return err
		}
	}
	if st.pods != nil {
		if ps := st.pods.all(); len(ps) > 0 {
			if err := sw.Pods(ps); err != nil {
				return err
			}
		}
	}
	return sw.Close()
}

// sortedKeys returns a set's keys in order.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// DNSCluster maps API objects onto the Kubernetes DNS model exactly as the
// source's transforms do, multicluster labels kept (for tests and tools
// that start from API objects; DNSImports maps ServiceImports). The
// objects are not changed.
func DNSCluster(namespaces []*corev1.Namespace, services []*corev1.Service, eps []*discoveryv1.EndpointSlice) *k8sdns.Cluster {
	c := &k8sdns.Cluster{}
	for _, n := range namespaces {
		c.Namespaces = append(c.Namespaces, n.Name)
	}
	slices.Sort(c.Namespaces)
	for _, s := range services {
		o, _ := transformService(nil)(s.DeepCopy())
		c.Services = append(c.Services, &o.(*kService).svc)
	}
	for _, sl := range eps {
		o, _ := transformSlice(nil, true)(sl.DeepCopy())
		if k := o.(*kSlice); k.sl.Service != "" || k.sl.Import != "" {
			c.Slices = append(c.Slices, &k.sl)
		}
	}
	return c
}
