package kubesource

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/typed/apis/v1alpha1"
)

// Multicluster (the kubernetes plugin's `multicluster`): ServiceImports of
// the MCS API (multicluster.x-k8s.io/v1alpha1) are watched as the
// kubernetes plugin watches them - every namespace (or the one
// configured), selected by the namespace_labels selector (that plugin
// hands it to this informer: kept, so that the same objects count) - and
// the EndpointSlices keep their multicluster.kubernetes.io/service-name
// and source-cluster labels: a slice with the first is an endpoint slice
// of that ServiceImport (the kubernetes plugin's second slice informer
// selects the same slices: the labels selector and that label).

// kImport is the slim form of a ServiceImport: the model's, as a Service.
type kImport struct {
	kMeta
	svc  k8sdns.Service
	skip bool // outside the configured namespaces
}

func (k *kImport) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies k (shared, never modified, inner slices).
func (k *kImport) DeepCopyObject() runtime.Object { c := *k; return &c }

// transformImport converts a *ServiceImport into a *kImport.
func transformImport(namespaces map[string]bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		s, ok := obj.(*mcsapi.ServiceImport)
		if !ok {
			return obj, nil
		}
		k := &kImport{kMeta: slimMeta(&s.ObjectMeta)}
		if namespaces != nil && !namespaces[strings.ToLower(s.Namespace)] {
			k.skip = true
			return k, nil
		}
		k.svc = modelImport(s)
		return k, nil
	}
}

// modelImport is a ServiceImport as the model keeps it: type Headless is
// kind Headless, any other ClusterIP with spec.ips (those that are
// addresses: the kubernetes plugin would answer another as a CNAME
// target, which no ClusterSetIP is), spec.ports as written.
func modelImport(s *mcsapi.ServiceImport) k8sdns.Service {
	m := k8sdns.Service{Namespace: intern(s.Namespace), Name: s.Name}
	if s.Spec.Type == mcsapi.Headless {
		m.Kind = k8sdns.Headless
	} else {
		for _, ip := range s.Spec.IPs {
			if a, err := netip.ParseAddr(ip); err == nil && a.Zone() == "" {
				m.ClusterIPs = append(m.ClusterIPs, a.Unmap())
			}
		}
	}
	if len(s.Spec.Ports) > 0 {
		m.Ports = make([]k8sdns.Port, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			m.Ports[i] = k8sdns.Port{Name: p.Name, Protocol: k8sdns.Protocol(string(p.Protocol)), Port: p.Port}
		}
	}
	return m
}

// DNSImports maps ServiceImports onto the model as the source's
// transform does (for tests and tools). The objects are not changed.
func DNSImports(imps []*mcsapi.ServiceImport) []*k8sdns.Service {
	out := make([]*k8sdns.Service, 0, len(imps))
	for _, s := range imps {
		m := modelImport(s)
		out = append(out, &m)
	}
	return out
}

// byImport is the slice indexer's index of the ServiceImport a slice is
// labelled with ("namespace/name").
const byImport = "import"

func sliceImport(obj any) ([]string, error) {
	if sl, ok := obj.(*kSlice); ok && !sl.skip && sl.sl.Import != "" {
		return []string{sl.Namespace + "/" + sl.sl.Import}, nil
	}
	return nil, nil
}

// importsOf returns the slices labelled with ServiceImport name
// ("namespace/name").
func (st stores) importsOf(name string) []*kSlice {
	if st.slices == nil {
		return nil
	}
	objs, _ := st.slices.ByIndex(byImport, name)
	out := make([]*kSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*kSlice); ok {
			out = append(out, sl)
		}
	}
	return out
}

// serviceImport returns the ServiceImport name ("namespace/name"), or nil.
func (st stores) serviceImport(name string) *kImport {
	if st.imports == nil {
		return nil
	}
	o, ok, _ := st.imports.GetByKey(name)
	if !ok {
		return nil
	}
	s, _ := o.(*kImport)
	return s
}

// importInformer makes the ServiceImport informer in namespace ns ("" all)
// on the factory (started and stopped with the others).
func (k *Source) importInformer(w *watcher, client mcsv1alpha1.MulticlusterV1alpha1Interface, ns string, in map[string]bool) slimInformer {
	lw := &importLists{client: client, ns: ns, selector: k.cfg.API.NamespaceLabels}
	inf := w.factory.InformerFor(&mcsapi.ServiceImport{}, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(
			cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{ListWithContextFunc: lw.list, WatchFuncWithContext: lw.watch}, client),
			&mcsapi.ServiceImport{}, resync, cache.Indexers{})
	})
	w.stores.imports = inf.GetStore()
	return slimInformer{inf: inf, fn: reuse(inf.GetStore(), transformImport(in))}
}

// importLists lists and watches ServiceImports. An API server without
// the resource (the MCS API's CRD is not installed: 404) has none: the
// list is empty, so that the source syncs and serves everything else
// (the kubernetes plugin would never sync, and be never ready), and the
// watch fails with errNoImports, which is no outage (onError), so that
// the reflector lists again after its backoff (at most 30 s): a CRD
// installed later is seen then. Logged once each time it goes away.
type importLists struct {
	client   mcsv1alpha1.MulticlusterV1alpha1Interface
	ns       string
	selector string

	mu     sync.Mutex
	absent bool
}

// errNoImports is the watch's error while the resource does not exist.
var errNoImports = apierrors.NewNotFound(schema.GroupResource{Group: mcsapi.GroupName, Resource: "serviceimports"}, "")

func (l *importLists) list(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	o.LabelSelector = l.selector
	list, err := l.client.ServiceImports(l.ns).List(ctx, o)
	if apierrors.IsNotFound(err) {
		l.setAbsent(true, err)
		return &mcsapi.ServiceImportList{ListMeta: metav1.ListMeta{ResourceVersion: "0"}}, nil
	}
	if err == nil {
		l.setAbsent(false, nil)
	}
	return list, err
}

func (l *importLists) watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.mu.Lock()
	absent := l.absent
	l.mu.Unlock()
	if absent {
		return nil, errNoImports
	}
	o.LabelSelector = l.selector
	return l.client.ServiceImports(l.ns).Watch(ctx, o)
}

func (l *importLists) setAbsent(absent bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if absent && !l.absent {
		log.Warningf("No ServiceImports: the API server has no %s/%s serviceimports (is the MCS API's CRD installed?): %v",
			mcsapi.GroupName, mcsapi.GroupVersion.Version, err)
	}
	if !absent && l.absent {
		log.Infof("ServiceImports (%s) are served by the API server now", mcsapi.GroupName)
	}
	l.absent = absent
}

// importChanges are the ServiceImport names of a patch, with their
// content.
func (m *dnsModel) importChanges(st stores, names map[string]bool) []k8sdns.Change {
	out := make([]k8sdns.Change, 0, len(names))
	for _, name := range sortedKeys(names) {
		ns, n, _ := strings.Cut(name, "/")
		ch := k8sdns.Change{Key: k8sdns.Key{Namespace: ns, Name: n, Import: true}}
		if s := st.serviceImport(name); s != nil && !s.skip {
			ch.Service = &s.svc
		}
		for _, sl := range st.importsOf(name) {
			ch.Slices = append(ch.Slices, &sl.sl)
		}
		out = append(out, ch)
	}
	return out
}

// importObjects are the stored ServiceImports (not skipped), sorted.
func importObjects(st stores) []*kImport {
	if st.imports == nil {
		return nil
	}
	var out []*kImport
	for _, o := range st.imports.List() {
		if s, ok := o.(*kImport); ok && !s.skip {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *kImport) int { return a.compare(&b.kMeta) })
	return out
}
