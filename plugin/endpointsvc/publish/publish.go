// Package publish keeps a cluster-DNS replica's own endpoint in the
// EndpointSlices of its Service, instead of leaving them to the
// EndpointSlice controller and the pods' Ready condition.
//
// The Service that clients reach the cluster DNS through (the kubelet's
// clusterDNS) has no selector. Each replica publishes one slice per address
// family with its own pod's address, ready while it answers from a table,
// and terminating from SIGTERM on, so that kube-proxy stops sending it
// queries while it still answers them (lameduck). The pod's Ready condition
// does not decide: when the API server returns after an outage longer than
// the node controller's grace period, the node controller marks every pod
// of the node not ready until the kubelet reports again, and with a
// selector the Service would lose all its endpoints although every replica
// answers (docs/cluster-dns.md). A replica that is really gone is taken out
// by its peers, once direct DNS probes and the API agree that it is down,
// and its slices go with its pod (owner references).
package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

var log = clog.NewWithPlugin("endpointsvc")

// Config says what to publish.
type Config struct {
	Namespace string          // of the Service and the replicas' pods
	Service   string          // the Service's name
	Pod       string          // this replica's pod name
	Pods      labels.Selector // selects the replicas' pods (the peers)
	Zone      string          // the name probes ask for (SOA): a zone the replicas serve
	// Interval is how often the replica reconciles and probes (default 2s).
	Interval time.Duration
	// DownAfter is how many probes in a row a peer must fail, while its
	// Lease has lapsed, before it is taken out (default 3).
	DownAfter int
	// LeaseDuration is how long a replica's Lease holds after a renewal
	// (default 15s; renewed every third of it).
	LeaseDuration time.Duration
}

// Publisher keeps the slices. Serving tells it whether the replica answers
// from a table; Terminate marks the replica as leaving.
type Publisher struct {
	cfg     Config
	client  kubernetes.Interface
	serving func() bool
	// probe asks addr (ip:port) one DNS question; tests replace it.
	probe func(ctx context.Context, addr, zone string) error

	stopping atomic.Bool
	draining atomic.Bool
	misfit   atomic.Bool // this replica's pod exists but the selector leaves it out: nothing is written
	kick     chan struct{}

	mu       sync.Mutex // guards failures, selfOK, lastErr, leases, noPod, renewed
	failures map[string]int
	selfOK   bool
	lastErr  string
	leases   map[string]leaseSeen // by holder: when its Lease last changed
	noPod    bool                 // reported: this replica's pod is not among the selected ones
	renewed  time.Time            // this replica's Lease was last renewed

	lister struct {
		svc    cache.Store
		pods   cache.Store
		slices cache.Store
		leases cache.Store
	}
	synced []cache.InformerSynced
}

// New returns a publisher for cfg that asks serving whether the replica
// answers.
func New(cfg Config, client kubernetes.Interface, serving func() bool) *Publisher {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = 3
	}
	if cfg.Pods == nil {
		cfg.Pods = labels.Everything()
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	writeErrors.WithLabelValues(cfg.Service) // listed at 0, so that a rule sees the first error
	return &Publisher{cfg: cfg, client: client, serving: serving, probe: probeDNS,
		kick: make(chan struct{}, 1), failures: map[string]int{}, leases: map[string]leaseSeen{}}
}

// Run reconciles until ctx is done: on every change of the Service, the
// pods or the slices, and every Interval (when it also probes).
func (p *Publisher) Run(ctx context.Context) {
	factory := p.informers()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return
	}
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	p.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			p.reconcile(ctx)
		case <-t.C:
			p.tick(ctx)
		}
	}
}

// tick renews this replica's Lease, probes (itself once until it
// answered, and the peers whose Lease lapsed) and reconciles.
func (p *Publisher) tick(ctx context.Context) {
	in := p.inputs()
	self := findPod(in.pods, p.cfg.Pod)
	p.checkSelf(ctx, in.service != nil && self == nil)
	var leaseErr error
	if !p.misfit.Load() { // a misfit holds no Lease: its peers would wait for it to steward
		leaseErr = p.renewLease(ctx, self, time.Now())
	}
	p.probePods(ctx)
	p.reconcile(ctx, leaseErr)
}

// findPod is the pod named name, or nil.
func findPod(pods []*corev1.Pod, name string) *corev1.Pod {
	for _, pod := range pods {
		if pod.Name == name {
			return pod
		}
	}
	return nil
}

// checkSelf reports once that this replica's own pod is not among the
// pods the publisher watches, which publishes nothing of it. When the pod
// exists but the selector leaves it out (misfit), the replica writes
// nothing at all: its view of the replicas is not theirs, and it would
// take every peer it does not see for gone and delete its slice. A pod
// that does not exist at all (not a pod, or deleted) still stewards.
func (p *Publisher) checkSelf(ctx context.Context, missing bool) {
	misfit := false
	if missing {
		l, err := p.client.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + p.cfg.Pod})
		if err != nil {
			return // as it was; the next round asks again
		}
		for _, pod := range l.Items {
			misfit = misfit || pod.Name == p.cfg.Pod
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case misfit && !p.misfit.Load():
		log.Errorf("Publish: pod %s/%s does not match the pod selector %q: publishing and writing nothing (the selector must select every replica, this one too)",
			p.cfg.Namespace, p.cfg.Pod, p.cfg.Pods.String())
	case missing && !misfit && !p.noPod:
		log.Warningf("Publish: pod %s is not among the pods of namespace %s: nothing is published of it (the pod must run in the Service's namespace)",
			p.cfg.Pod, p.cfg.Namespace)
	}
	p.noPod = missing
	p.misfit.Store(misfit)
}

// Terminate marks this replica's endpoint terminating (not ready, still
// serving) and writes it at once, waiting at most until ctx is done: called
// at SIGTERM, before the lameduck wait that lets kube-proxy take the
// endpoint out while the replica still answers.
func (p *Publisher) Terminate(ctx context.Context) error {
	p.stopping.Store(true)
	return p.writeSelf(ctx)
}

// Drain marks this replica's endpoint not serving either (when a peer is
// ready) and writes it, waiting at most until ctx is done: called shortly
// before the process exits, once the traffic has moved to the peers, so
// that kube-proxy deletes the UDP conntrack entries still leading here
// while the replica answers on. It works from the caches as they were when
// the publisher stopped.
func (p *Publisher) Drain(ctx context.Context) error {
	p.stopping.Store(true)
	p.draining.Store(true)
	return p.writeSelf(ctx)
}

// writeSelf writes this replica's own slices until the caches show them as
// planned, or ctx is done (a conflict waits for the informer to bring the
// slice's new version, then plans again).
func (p *Publisher) writeSelf(ctx context.Context) error {
	var err error
	for {
		acts := p.selfActions()
		if len(acts) == 0 {
			return nil
		}
		var errs []error
		for _, a := range acts {
			if e := p.write(ctx, a); e != nil {
				errs = append(errs, e)
			}
		}
		err = errors.Join(errs...)
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// selfActions is the part of the plan that concerns this replica's own
// slices.
func (p *Publisher) selfActions() []action {
	if p.misfit.Load() {
		return nil
	}
	var out []action
	for _, a := range plan(p.inputs()) {
		if slicePod(a.slice) == p.cfg.Pod {
			out = append(out, a)
		}
	}
	return out
}

// informers watches the Service, the replicas' pods and our slices, in
// the one namespace.
func (p *Publisher) informers() multiFactory {
	svc := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + p.cfg.Service }))
	pods := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = p.cfg.Pods.String() }))
	mine, _ := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.Equals, []string{ManagedBy})
	of, _ := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Equals, []string{p.cfg.Service})
	slices := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labels.NewSelector().Add(*mine, *of).String() }))
	leases := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LeaseLabel + "=" + p.cfg.Service }))
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.poke() },
		UpdateFunc: func(any, any) { p.poke() },
		DeleteFunc: func(any) { p.poke() },
	}
	for _, x := range []struct {
		what  string
		inf   cache.SharedIndexInformer
		store *cache.Store
	}{
		{"services", svc.Core().V1().Services().Informer(), &p.lister.svc},
		{"pods", pods.Core().V1().Pods().Informer(), &p.lister.pods},
		{"endpointslices", slices.Discovery().V1().EndpointSlices().Informer(), &p.lister.slices},
		{"leases", leases.Coordination().V1().Leases().Informer(), &p.lister.leases},
	} {
		// the reflectors retry on their own (through the client's gate);
		// a failing write is what the log reports (report), once, and a
		// refused watch too: nothing is published until it is granted
		_ = x.inf.SetWatchErrorHandlerWithContext(p.watchError(x.what))
		_, _ = x.inf.AddEventHandler(handler)
		*x.store = x.inf.GetStore()
		p.synced = append(p.synced, x.inf.HasSynced)
	}
	return multiFactory{svc, pods, slices, leases}
}

// watchError reports once that the API refuses to list or watch what
// (RBAC): the publisher waits for its caches and writes nothing meanwhile.
func (p *Publisher) watchError(what string) cache.WatchErrorHandlerWithContext {
	var reported atomic.Bool
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) && !reported.Swap(true) {
			writeErrors.WithLabelValues(p.cfg.Service).Inc()
			log.Errorf("Publish: cannot list and watch %s in namespace %s, nothing is published until the Role allows it: %v", what, p.cfg.Namespace, err)
		}
	}
}

func (p *Publisher) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// inputs reads the caches.
func (p *Publisher) inputs() inputs {
	in := inputs{self: p.cfg.Pod, stopping: p.stopping.Load(), draining: p.draining.Load(), down: map[string]bool{}}
	var leases []*coordinationv1.Lease
	for _, o := range p.lister.leases.List() {
		if l, ok := o.(*coordinationv1.Lease); ok {
			leases = append(leases, l)
		}
	}
	p.mu.Lock()
	in.serving, in.probed = p.serving(), p.selfOK
	now := time.Now()
	in.live = p.observeLeases(leases, now)
	// its own Lease counts a third shorter: the spare covers a write
	// still in flight when it lapses for the peers
	in.selfLive = now.Sub(p.renewed) < p.cfg.LeaseDuration-p.cfg.LeaseDuration/3
	for name, n := range p.failures {
		if n >= p.cfg.DownAfter && !in.live[name] {
			in.down[name] = true
		}
	}
	p.mu.Unlock()
	peersDown.WithLabelValues(p.cfg.Service).Set(float64(len(in.down)))
	for _, o := range p.lister.svc.List() {
		if s, ok := o.(*corev1.Service); ok && s.Name == p.cfg.Service {
			in.service = s
		}
	}
	for _, o := range p.lister.pods.List() {
		if pod, ok := o.(*corev1.Pod); ok {
			in.pods = append(in.pods, pod)
		}
	}
	for _, o := range p.lister.slices.List() {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			in.slices = append(in.slices, sl)
		}
	}
	return in
}

// reconcile applies the plan; a failed write is retried at the next round.
// pending is an error of the round so far (the Lease's), reported with it.
// A write to a peer's slice waits until the API confirms that the peer's
// Lease has lapsed (its renewal may not have reached the informer yet).
func (p *Publisher) reconcile(ctx context.Context, pending ...error) {
	errs := append([]error(nil), pending...)
	in := p.inputs()
	missing := in.service != nil && findPod(in.pods, p.cfg.Pod) == nil
	p.mu.Lock()
	changed := missing != p.noPod
	p.mu.Unlock()
	if changed { // the pod left the selected ones (or came back): misfit?
		p.checkSelf(ctx, missing)
	}
	if p.misfit.Load() {
		return // reported by checkSelf
	}
	for _, a := range plan(in) {
		if pod := slicePod(a.slice); pod != p.cfg.Pod && !p.confirmLapsed(ctx, pod) {
			continue
		}
		if err := p.write(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	p.report(errors.Join(errs...))
}

// write performs one action. A conflict or a slice already gone is not an
// error: the informer brings the new version and the next round plans again.
func (p *Publisher) write(ctx context.Context, a action) error {
	c := p.client.DiscoveryV1().EndpointSlices(p.cfg.Namespace)
	var err error
	switch a.op {
	case opCreate:
		_, err = c.Create(ctx, a.slice, metav1.CreateOptions{})
	case opUpdate:
		_, err = c.Update(ctx, a.slice, metav1.UpdateOptions{})
	case opDelete:
		err = c.Delete(ctx, a.slice.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &a.slice.UID}})
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		p.poke()
		return nil
	}
	if err != nil {
		writeErrors.WithLabelValues(p.cfg.Service).Inc()
		return fmt.Errorf("%s EndpointSlice %s/%s: %w", a.op, p.cfg.Namespace, a.slice.Name, err)
	}
	if slicePod(a.slice) != p.cfg.Pod || a.op == opDelete {
		log.Infof("Publish: %s EndpointSlice %s/%s (%s)", a.op, p.cfg.Namespace, a.slice.Name, describe(a.slice))
	}
	return nil
}

// report logs a failing round once, and the recovery once.
func (p *Publisher) report(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil && err.Error() != p.lastErr:
		log.Warningf("Publish: %v", err)
		p.lastErr = err.Error()
	case err == nil && p.lastErr != "":
		log.Infof("Publish: writing EndpointSlices again")
		p.lastErr = ""
	}
}

// describe is a slice's conditions for the log.
func describe(sl *discoveryv1.EndpointSlice) string {
	if len(sl.Endpoints) == 0 {
		return "no endpoint"
	}
	c := sl.Endpoints[0].Conditions
	b := func(v *bool) bool { return v != nil && *v }
	return fmt.Sprintf("%s ready=%v serving=%v terminating=%v", sl.Endpoints[0].Addresses[0], b(c.Ready), b(c.Serving), b(c.Terminating))
}

// multiFactory starts and stops several informer factories as one.
type multiFactory []informers.SharedInformerFactory

func (m multiFactory) Start(stop <-chan struct{}) {
	for _, f := range m {
		f.Start(stop)
	}
}

func (m multiFactory) Shutdown() {
	for _, f := range m {
		f.Shutdown()
	}
}
