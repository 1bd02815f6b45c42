package kubesource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	corev1informers "k8s.io/client-go/informers/core/v1"
	discoveryv1informers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watcher is the source's informers and what their handlers collect.
type watcher struct {
	factory informers.SharedInformerFactory
	stores  stores
	regs    []cache.ResourceEventHandlerRegistration // nil: a registration failed, never synced
	changed *dirty
	kick    chan struct{} // an event came (1 buffered)
	errs    chan error    // a list or watch failed (1 buffered)
	denied  *deniedLog
	pods    *podIndex   // pods verified; nil without
	slim    slimClients // the slim decoder's watch clients; nil: the factory client's
}

// watch makes the informers of the schema's objects (not started), with
// the transforms to slim objects and the handlers that collect changes.
func (k *Source) watch(cs clients) *watcher {
	ns := k.namespace()
	opts := []informers.SharedInformerOption{}
	if ns != "" {
		opts = append(opts, informers.WithNamespace(ns))
	}
	w := &watcher{factory: informers.NewSharedInformerFactoryWithOptions(cs.kube, 0, opts...), changed: &dirty{},
		kick: make(chan struct{}, 1), errs: make(chan error, 1), denied: &deniedLog{}, slim: cs.slim}
	infs := k.informers(w, ns)
	if k.cfg.Multicluster && cs.mcs != nil && !k.model.watchNodes() {
		infs = append(infs, k.importInformer(w, cs.mcs, ns, k.inNamespaces()))
	}
	// The handlers' registrations are synced once the stores are and every
	// initial add has been delivered, so the first build sees them all and
	// no late add triggers a second one.
	handler := w.handler(&k.Stats)
	for _, x := range infs {
		// Setting these fails only on a started informer; ours are new.
		_ = x.inf.SetTransform(x.fn)
		_ = x.inf.SetWatchErrorHandlerWithContext(w.onError)
		h := cache.ResourceEventHandler(handler)
		if x.handler != nil {
			h = x.handler
		}
		if reg, err := x.inf.AddEventHandler(h); err == nil {
			w.regs = append(w.regs, reg)
		}
	}
	if len(w.regs) != len(infs) {
		w.regs = nil // a registration failed (only on a stopped informer): never synced
	}
	return w
}

// informers makes the informers of the schema's objects in namespace ns
// ("" all) and sets w's stores.
func (k *Source) informers(w *watcher, ns string) []slimInformer {
	in := k.inNamespaces()
	svcInf := w.factory.InformerFor(&corev1.Service{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		tweak := func(o *metav1.ListOptions) { o.LabelSelector = k.cfg.Labels }
		if w.slim.core != nil {
			return slimWatched(c, &corev1.Service{}, resync, cache.Indexers{}, tweak,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.CoreV1().Services(ns).List(ctx, o)
				},
				w.slim.core.Services(ns).Watch)
		}
		return corev1informers.NewFilteredServiceInformer(c, ns, resync, cache.Indexers{}, tweak)
	})
	w.stores = stores{svcs: svcInf.GetStore()}
	infs := []slimInformer{{inf: svcInf, fn: reuse(svcInf.GetStore(), transformService(in))}}
	if k.model.watchNodes() || !k.cfg.NoEndpoints {
		infs = append(infs, k.sliceInformer(w, ns, in))
	}
	if k.model.watchNodes() {
		nodeInf := w.factory.InformerFor(&corev1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			if w.slim.core != nil {
				return slimWatched(c, &corev1.Node{}, resync, cache.Indexers{}, func(*metav1.ListOptions) {},
					func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
						return c.CoreV1().Nodes().List(ctx, o)
					},
					w.slim.core.Nodes().Watch)
			}
			return corev1informers.NewNodeInformer(c, resync, cache.Indexers{})
		})
		w.stores.nodes = nodeInf.GetStore()
		return append(infs, slimInformer{inf: nodeInf, fn: reuse(nodeInf.GetStore(), transformNode)})
	}
	nsInf := w.factory.InformerFor(&corev1.Namespace{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		// namespace_labels: only the Namespaces it selects exist for DNS
		return corev1informers.NewFilteredNamespaceInformer(c, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.LabelSelector = k.cfg.API.NamespaceLabels
		})
	})
	w.stores.nss = nsInf.GetStore()
	infs = append(infs, slimInformer{inf: nsInf, fn: reuse(nsInf.GetStore(), transformNamespace)})
	if k.cfg.Pods {
		podInf := w.factory.InformerFor(&corev1.Pod{}, k.podInformer)
		w.pods = newPodIndex()
		w.stores.pods = w.pods
		infs = append(infs, slimInformer{inf: podInf, fn: transformPod(podInf.GetStore()), handler: w.podHandler(&k.Stats)})
	}
	return infs
}

// sliceInformer makes the EndpointSlice informer. No namespace index (the
// stock informers' costs a set entry per object); slices are indexed by
// their Service, which a patch reads (a Node's change looks through them:
// onNodes). Schema kubernetes selects slices
// with the labels too, as the kubernetes plugin does.
func (k *Source) sliceInformer(w *watcher, ns string, in map[string]bool) slimInformer {
	sliceLabels := ""
	if !k.model.watchNodes() {
		sliceLabels = k.cfg.Labels
	}
	mc := k.cfg.Multicluster && !k.model.watchNodes()
	indexers := cache.Indexers{byService: sliceService}
	if mc {
		indexers[byImport] = sliceImport
	}
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = sliceLabels }
	sliceInf := w.factory.InformerFor(&discoveryv1.EndpointSlice{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		if w.slim.slices != nil {
			// the slim decoder's events carry kSlices (slimSliceKind)
			return slimWatched(c, &kSlice{}, resync, indexers, tweak,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.DiscoveryV1().EndpointSlices(ns).List(ctx, o)
				}, w.slim.slices.EndpointSlices(ns).Watch)
		}
		return discoveryv1informers.NewFilteredEndpointSliceInformer(c, ns, resync, indexers, tweak)
	})
	w.stores.slices = sliceInf.GetIndexer()
	return slimInformer{inf: sliceInf, fn: reuse(sliceInf.GetStore(), transformSlice(in, mc))}
}

// slimWatched is client-go's informer of an object type (example) of
// c's lists, except that it watches through watchFn, a client with the
// slim decoder (slimdecode.go), which decodes each event's object with
// only the fields the transform and the informer read. With watch-list
// (client-go's default) the first sync comes through the watch too.
func slimWatched(c kubernetes.Interface, example runtime.Object, resync time.Duration, indexers cache.Indexers, tweak func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchFn(ctx, o)
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, c), example,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: indexers})
}

// reuse wraps a transform: when the store already holds a slim object
// with the same fields under the new one's key, it returns that object
// instead. A relist (after a watch restart, or the API server's return)
// replays every object; without this the store would hold the new copies
// while the table still shares the old ones - twice the objects until
// each name changed. An update that changes nothing the mapping reads
// keeps the stored object too (its resourceVersion is then the older one:
// the informers track versions apart from the objects).
func reuse(store cache.Store, fn cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		x, err := fn(obj)
		if err != nil {
			return x, err
		}
		key, err := cache.MetaNamespaceKeyFunc(x)
		if err != nil {
			return x, nil
		}
		if old, ok, _ := store.GetByKey(key); ok && old != x && sameSlim(old, x) {
			return old, nil
		}
		return x, nil
	}
}

// slimInformer is an informer, the transform to its slim objects and its
// own handler (nil: the watcher's).
type slimInformer struct {
	inf     cache.SharedIndexInformer
	fn      cache.TransformFunc
	handler cache.ResourceEventHandler
}

// handler collects what the events change and kicks the loop.
func (w *watcher) handler(stats *Stats) cache.ResourceEventHandlerFuncs {
	kick := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.changed.mark(obj); w.changed.triggered(obj); kick() },
		UpdateFunc: func(old, cur any) {
			// A relist after a watch restart replays every object, and most
			// updates (heartbeats, labels, annotations) change nothing the
			// mapping reads: skip both. The transform kept the stored
			// object for those (reuse); another version with the same
			// resourceVersion is the same object.
			if old == cur || sameSlim(old, cur) {
				stats.Skipped.Add(1)
				return
			}
			if o, ok := old.(metav1.Object); ok {
				if c, ok := cur.(metav1.Object); ok && o.GetResourceVersion() == c.GetResourceVersion() {
					return
				}
			}
			w.changed.mark(old) // a slice may have moved to another Service
			w.changed.mark(cur)
			w.changed.triggered(cur)
			kick()
		},
		DeleteFunc: func(obj any) { w.changed.mark(obj); kick() },
	}
}

// onError reports a failed list or watch to the loop; a watch restart is
// none, and a permission error is logged, not reported (deniedLog).
func (w *watcher) onError(_ context.Context, r *cache.Reflector, err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a watch restart, not a failure: the reflector relists
	}
	if errors.Is(err, errNoImports) {
		return // no ServiceImport resource: none to watch, and no outage (importLists)
	}
	if apierrors.IsForbidden(err) {
		w.denied.report(r.TypeDescription(), err)
		return
	}
	w.report(fmt.Errorf("%s: %w", r.TypeDescription(), err))
}

// report hands a failure to the loop (which reports the first of a spell).
func (w *watcher) report(err error) {
	select {
	case w.errs <- err:
	default:
	}
}

// deniedLog logs each distinct permission error once. A refusal is a
// configuration matter (the RBAC rules), not an outage: it neither ends
// the start-up wait nor enters the failing/recovered reports, which would
// otherwise repeat at every retry of the refused informer.
type deniedLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (d *deniedLog) report(what string, err error) {
	msg := what + ": " + err.Error()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen[msg] {
		return
	}
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	d.seen[msg] = true
	log.Errorf("Kubernetes API refuses %s (check the RBAC rules): %v", what, err)
}
