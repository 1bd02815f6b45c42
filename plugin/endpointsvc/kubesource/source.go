package endpointsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corev1informers "k8s.io/client-go/informers/core/v1"
	discoveryv1informers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// kubeSource watches Services, EndpointSlices and Nodes (or Namespaces)
// through one shared informer factory, stores them as slim objects
// (kube_objects.go), and maps them whole onto a State (kubeState,
// specState) once the informers synced. After that (at most one patch per
// debounce interval) it maps
// only what changed: an update that changes no field the mapping reads
// costs a comparison, and a real change maps the Services it touches into
// a Patch (kube_patch.go). API errors and watch restarts keep the last
// state; a failure is reported once when it starts, and the recovery once.
type kubeSource struct {
	kubeconfig  string // "": in-cluster configuration
	context     string
	labels      string   // label selector of the Services ("": all)
	namespaces  []string // only these namespaces (nil: all)
	nodeAddress []string // node address types, in preference order (lowercased)
	spec        bool     // schema kubernetes: map with specState, watch no Nodes

	// newClient builds the client; tests replace it with a fake clientset.
	newClient func() (kubernetes.Interface, error)
	debounce  time.Duration

	builds  atomic.Int64 // whole states mapped from the stores (tests count them)
	patches atomic.Int64 // patches delivered
	rebuilt atomic.Int64 // services mapped by patches
	skipped atomic.Int64 // updates that changed nothing the mapping reads
}

// Settings of the kubernetes source.
const (
	defaultKubeDebounce      = 50 * time.Millisecond
	kubeProbeInterval        = 2 * time.Second  // while failing or not synced
	kubeHealthyProbeInterval = 10 * time.Second // while healthy
	kubeRetryConfig          = 5 * time.Second
	kubeShutdownWait         = 2 * time.Second // see shutdownInformers
)

// shutdownInformers stops the factory's informers and waits for their
// goroutines, but at most wait. They stop at once, except a reflector that
// is waiting out its retry backoff after a failed watch-list: client-go
// waits for that delay (up to a minute while the API server is down)
// without looking at its stop channel, and a reload or SIGTERM must not
// hang on it. Such a goroutine ends on its own when its delay is over; it
// holds no state the plugin uses.
func shutdownInformers(factory informers.SharedInformerFactory, wait time.Duration) {
	done := make(chan struct{})
	go func() {
		factory.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		log.Infof("Not waiting for the kubernetes informers still in their retry backoff; they end on their own")
	}
}

func (k *kubeSource) Name() string { return "kubernetes" }

func (k *kubeSource) Key() string {
	return fmt.Sprintf("kubernetes %q %q labels=%q namespaces=%q node_address=%q", k.kubeconfig, k.context, k.labels, k.namespaces, k.nodeAddress)
}

// client returns the configured client: from the kubeconfig file (and
// context) or the in-cluster configuration, speaking protobuf.
func (k *kubeSource) client() (kubernetes.Interface, error) {
	if k.newClient != nil {
		return k.newClient()
	}
	var cfg *rest.Config
	var err error
	if k.kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: k.kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: k.context}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "meshdns-endpointsvc"
	return kubernetes.NewForConfig(cfg)
}

func (k *kubeSource) Run(ctx context.Context, s Sink) {
	client, err := k.client()
	for err != nil {
		s.Failed(err)
		if !pause.Sleep(ctx, kubeRetryConfig) {
			return
		}
		client, err = k.client()
	}
	debounce := k.debounce
	if debounce == 0 {
		debounce = defaultKubeDebounce
	}
	var nsSet map[string]bool
	opts := []informers.SharedInformerOption{}
	namespace := metav1.NamespaceAll
	if len(k.namespaces) > 0 {
		nsSet = set(k.namespaces...)
		if len(k.namespaces) == 1 {
			namespace = k.namespaces[0]
			opts = append(opts, informers.WithNamespace(namespace))
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
	svcInf := factory.InformerFor(&corev1.Service{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return corev1informers.NewFilteredServiceInformer(c, namespace, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.LabelSelector = k.labels
		})
	})
	// No namespace index (the stock informers' costs a set entry per
	// object); slices are indexed by their Service, which a patch reads.
	sliceInf := factory.InformerFor(&discoveryv1.EndpointSlice{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return discoveryv1informers.NewFilteredEndpointSliceInformer(c, namespace, resync, cache.Indexers{byService: sliceService}, nil)
	})
	type watched struct {
		inf cache.SharedIndexInformer
		fn  cache.TransformFunc
	}
	infs := []watched{{svcInf, transformService(nsSet)}, {sliceInf, transformSlice(nsSet)}}
	var nodeInf cache.SharedIndexInformer // schema kubernetes reads no Nodes
	var nsInf cache.SharedIndexInformer   // only schema kubernetes reads Namespaces
	if k.spec {
		nsInf = factory.InformerFor(&corev1.Namespace{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return corev1informers.NewNamespaceInformer(c, resync, cache.Indexers{})
		})
		infs = append(infs, watched{nsInf, transformNamespace})
	} else {
		nodeInf = factory.InformerFor(&corev1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return corev1informers.NewNodeInformer(c, resync, cache.Indexers{})
		})
		infs = append(infs, watched{nodeInf, transformNode})
	}

	changed := &kubeDirty{}
	dirty := make(chan struct{}, 1)
	errs := make(chan error, 1)
	mark := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { changed.mark(obj); mark() },
		UpdateFunc: func(old, cur any) {
			// A relist after a watch restart replays every object, and most
			// updates (heartbeats, labels, annotations) change nothing the
			// mapping reads: skip both with a comparison of slim objects.
			if o, ok := old.(metav1.Object); ok {
				if c, ok := cur.(metav1.Object); ok && o.GetResourceVersion() == c.GetResourceVersion() {
					return
				}
			}
			if sameSlim(old, cur) {
				k.skipped.Add(1)
				return
			}
			changed.mark(old) // a slice may have moved to another Service
			changed.mark(cur)
			mark()
		},
		DeleteFunc: func(obj any) { changed.mark(obj); mark() },
	}
	denied := &deniedLog{}
	onError := func(_ context.Context, r *cache.Reflector, err error) {
		if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // a watch restart, not a failure: the reflector relists
		}
		if apierrors.IsForbidden(err) {
			denied.report(r.TypeDescription(), err)
			return
		}
		select {
		case errs <- fmt.Errorf("%s: %w", r.TypeDescription(), err):
		default:
		}
	}
	// The handlers' registrations are synced once the stores are and every
	// initial add has been delivered, so the first build sees them all and
	// no late add triggers a second one.
	var regs []cache.ResourceEventHandlerRegistration
	for _, x := range infs {
		// Setting these fails only on a started informer; ours are new.
		_ = x.inf.SetTransform(x.fn)
		_ = x.inf.SetWatchErrorHandlerWithContext(onError)
		if reg, err := x.inf.AddEventHandler(handler); err == nil {
			regs = append(regs, reg)
		}
	}

	stores := kubeStores{svcs: svcInf.GetStore(), slices: sliceInf.GetIndexer()}
	if nodeInf != nil {
		stores.nodes = nodeInf.GetStore()
	}
	if nsInf != nil {
		stores.nss = nsInf.GetStore()
	}

	fctx, cancel := context.WithCancel(ctx)
	factory.Start(fctx.Done())
	defer func() {
		cancel()
		shutdownInformers(factory, kubeShutdownWait)
	}()

	synced, failing := false, false
	waiter := &syncWaiter{pending: regs}
	if len(regs) != len(infs) {
		waiter.pending = nil // a registration failed (only on a stopped informer): never synced
	}
	syncWait := waiter.first()
	var lastProbe, lastPatch time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	fail := func(err error) {
		if !failing {
			failing = true
			s.Failed(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			fail(err)
		case <-dirty:
			if !synced {
				continue
			}
			// A change after a quiet spell is patched at once; under churn
			// at most one patch per debounce interval carries all the
			// changes that came meanwhile.
			if wait := debounce - time.Since(lastPatch); wait > 0 {
				if !pause.Sleep(ctx, wait) {
					return
				}
			}
			select { // changes that came while waiting are in this patch
			case <-dirty:
			default:
			}
			// a patch is no verdict on the API's health: the probe's
			// success ends a failure, so that one object's events do not
			// log a recovery that the next error takes back
			svcs, nodes, nss := changed.take()
			k.patch(s, stores, svcs, nodes, nss)
			lastPatch = time.Now()
		case <-syncWait:
			if syncWait = waiter.next(); syncWait != nil {
				continue
			}
			synced, failing = true, false
			select { // the initial adds are all in this build
			case <-dirty:
			default:
			}
			changed.take()
			k.build(s, stores)
		case <-tick.C:
			// The informers retry a failing list or watch on their own,
			// mostly without telling (watch-list backs off silently), so a
			// cheap probe notices an unreachable API server and its
			// recovery: often while failing or not synced, rarely otherwise.
			every := kubeProbeInterval
			if synced && !failing {
				every = kubeHealthyProbeInterval
			}
			if time.Since(lastProbe) < every {
				continue
			}
			lastProbe = time.Now()
			if err := probe(ctx, client, namespace); err != nil {
				switch {
				case ctx.Err() != nil:
				case apierrors.IsForbidden(err):
					denied.report("probe", err)
				default:
					fail(fmt.Errorf("kubernetes API: %w", err))
				}
			} else if failing {
				failing = false
				select {
				case <-errs:
				default:
				}
				if synced {
					s.Unchanged()
				}
			}
		}
	}
}

// syncWaiter waits for the handler registrations to sync without polling:
// it hands out the Done channel of the first one not synced yet, so the
// first build starts the moment the last initial add is delivered.
type syncWaiter struct {
	pending []cache.ResourceEventHandlerRegistration
}

// next drops the registrations that synced and returns the Done channel of
// the first one that has not, or nil once all have.
func (w *syncWaiter) next() <-chan struct{} {
	for len(w.pending) > 0 {
		done := w.pending[0].HasSyncedChecker().Done()
		select {
		case <-done:
			w.pending = w.pending[1:]
		default:
			return done
		}
	}
	return nil
}

// first is next, except that with every registration synced already it
// returns a closed channel (the first build is still due), and with none
// to wait for (nil pending from the start) nil.
func (w *syncWaiter) first() <-chan struct{} {
	if len(w.pending) == 0 {
		return nil
	}
	if ch := w.next(); ch != nil {
		return ch
	}
	now := make(chan struct{})
	close(now)
	return now
}

// probe asks the API server for one Service of the watched namespace
// (served from its watch cache): the cheapest request that the documented
// RBAC grants with either schema (Nodes are not granted with schema
// kubernetes), to notice a recovery while no object changes.
func probe(ctx context.Context, client kubernetes.Interface, namespace string) error {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := client.CoreV1().Services(namespace).List(c, metav1.ListOptions{Limit: 1, ResourceVersion: "0"})
	return err
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

// build maps the informers' stores whole onto a state and hands it to s.
func (k *kubeSource) build(s Sink, st kubeStores) {
	k.builds.Add(1)
	s.Update(k.state(st))
}

// state reads the slim objects out of the stores: every selected Service,
// every slice that belongs to a Service (the mappings keep those of the
// selected ones) and every node (schema orch) or namespace (schema
// kubernetes). The mappings (kubeState, specState) emit only valid,
// normalised states - every name checked, every reference resolved, ids
// unique by construction (their tests run each result through Validate) -
// so the sink need not Validate it.
func (k *kubeSource) state(st kubeStores) *State {
	var ks []*kService
	for _, o := range st.svcs.List() {
		if s, ok := o.(*kService); ok && !s.skip && (k.spec || !s.externalName) {
			ks = append(ks, s)
		}
	}
	var kl []*kSlice
	for _, o := range st.slices.List() {
		if sl, ok := o.(*kSlice); ok && sl.service != "" {
			kl = append(kl, sl)
		}
	}
	if k.spec {
		mapped := specState(ks, kl)
		mapped.Namespaces = k.namespaceList(st.nss)
		return mapped
	}
	var kn []*kNode
	for _, o := range st.nodes.List() {
		if n, ok := o.(*kNode); ok {
			kn = append(kn, n)
		}
	}
	return kubeState(ks, kl, kn, k.nodeAddress)
}
