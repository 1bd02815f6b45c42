// Package kubesource is endpointsvc's kubernetes source: it watches
// Services, EndpointSlices and Namespaces (schema kubernetes) or Nodes
// (schema orch) through one shared informer factory, stores them as slim
// objects (objects.go), maps them whole onto the schema's model once the
// informers synced, and after that maps only what changed into patches
// (at most one per debounce interval). An update that changes no field a
// mapping reads costs a comparison. API errors and watch restarts keep
// the last state; a failure is reported once when it starts, and the
// recovery once.
package kubesource

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/pkg/pause"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/typed/apis/v1alpha1"
)

var log = clog.NewWithPlugin("endpointsvc")

// Config is what the Corefile says about the source.
type Config struct {
	Kubeconfig  string // "": Endpoint, else the in-cluster configuration
	Context     string // of the kubeconfig; "": its current one
	API         APIConfig
	Labels      string   // label selector of the Services ("": all)
	Namespaces  []string // only these namespaces, lowercased (nil: all)
	NodeAddress []string // node address types, in preference order, lowercased (schema orch)
	Pods        bool     // watch Pods for the pod index (pods verified; schema kubernetes)
	NoEndpoints bool     // do not watch EndpointSlices (noendpoints; schema kubernetes)
	// Multicluster: watch ServiceImports (multicluster.x-k8s.io/v1alpha1)
	// and keep the slices' multicluster labels (schema kubernetes).
	Multicluster bool
}

// Source is the kubernetes source of one schema.
type Source struct {
	cfg   Config
	model model

	// NewClient builds the client; tests replace it with a fake clientset
	// (and NewMCSClient the ServiceImports' client, with multicluster).
	NewClient    func() (kubernetes.Interface, error)
	NewMCSClient func() (mcsv1alpha1.MulticlusterV1alpha1Interface, error)
	// Debounce is the shortest time between two patches (0: 10 ms).
	Debounce time.Duration

	Stats Stats
}

// Stats count the source's work (tests read them).
type Stats struct {
	Builds  atomic.Int64 // whole states mapped from the stores
	Patches atomic.Int64 // patches delivered
	Rebuilt atomic.Int64 // names (Services) mapped by patches
	Skipped atomic.Int64 // updates that changed nothing the mapping reads
}

// model is a schema's mapping of the slim objects.
type model interface {
	name() string
	watchNodes() bool // Nodes (schema orch), else Namespaces
	whole(st stores) feed.State
	// patch maps what changed; whole maps the stores whole, for a table
	// that cannot be patched.
	patch(st stores, c changes, whole func() feed.State) feed.Patch
}

// NewOrch returns a source of the orchestrator model (schema orch).
func NewOrch(cfg Config) *Source {
	return &Source{cfg: cfg, model: &orchModel{nodeAddress: cfg.NodeAddress}}
}

// NewDNS returns a source of the Kubernetes DNS model (schema kubernetes).
func NewDNS(cfg Config) *Source {
	m := &dnsModel{}
	if len(cfg.Namespaces) > 0 {
		m.namespaces = set(cfg.Namespaces)
	}
	return &Source{cfg: cfg, model: m}
}

func set(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return m
}

// Config returns the source's configuration.
func (k *Source) Config() Config { return k.cfg }

// Name implements feed.Source.
func (k *Source) Name() string { return "kubernetes" }

// Key implements feed.Source.
func (k *Source) Key() string {
	return fmt.Sprintf("kubernetes %q %q %s model=%s labels=%q namespaces=%q node_address=%q pods=%v noendpoints=%v multicluster=%v",
		k.cfg.Kubeconfig, k.cfg.Context, k.cfg.API.key(), k.model.name(), k.cfg.Labels, k.cfg.Namespaces, k.cfg.NodeAddress, k.cfg.Pods, k.cfg.NoEndpoints, k.cfg.Multicluster)
}

// Settings of the kubernetes source.
const (
	defaultDebounce      = 10 * time.Millisecond
	probeInterval        = 2 * time.Second  // while failing or not synced
	healthyProbeInterval = 10 * time.Second // while healthy
	retryConfig          = 5 * time.Second
	shutdownWait         = 2 * time.Second // see shutdownInformers
)

// clients are the source's API clients: the ServiceImports' with
// multicluster only; the slim decoder's with a real API server only.
type clients struct {
	kube kubernetes.Interface
	mcs  mcsv1alpha1.MulticlusterV1alpha1Interface
	slim slimClients
}

// slimClients are the watch clients with the slim decoder
// (slimdecode.go): of EndpointSlices (slices), of Services and Nodes
// (core). nil: the informers watch through the kube client (a test's
// fake client).
type slimClients struct {
	slices discoveryv1client.DiscoveryV1Interface
	core   corev1client.CoreV1Interface
}

// client returns the configured clients (newClient) and their gate, or
// the test's (NewClient, NewMCSClient) and no gate.
func (k *Source) client() (clients, *gate, error) {
	if k.NewClient != nil {
		c, err := k.NewClient()
		var m mcsv1alpha1.MulticlusterV1alpha1Interface
		if err == nil && k.cfg.Multicluster && k.NewMCSClient != nil {
			m, err = k.NewMCSClient()
		}
		return clients{kube: c, mcs: m}, nil, err
	}
	return newClient(k.cfg, "source", k.cfg.Multicluster)
}

// Run implements feed.Source: it watches until ctx is done.
func (k *Source) Run(ctx context.Context, s feed.Sink) {
	client, g, err := k.client()
	for err != nil {
		s.Failed(err)
		if !pause.Sleep(ctx, retryConfig) {
			return
		}
		client, g, err = k.client()
	}
	w := k.watch(client)
	if g != nil {
		g.notify(func(err error) { w.report(fmt.Errorf("kubernetes API: %w", err)) })
	}
	fctx, cancel := context.WithCancel(ctx)
	w.factory.Start(fctx.Done())
	defer func() {
		cancel()
		shutdownInformers(w.factory, shutdownWait)
	}()
	k.loop(ctx, s, client.kube, g, w)
}

// shutdownInformers stops the factory's informers and waits for their
// goroutines, but at most wait. They stop at once (a request held in the
// gate ends with its context), except a reflector that is waiting out its
// retry backoff after a failed watch-list: client-go waits for that delay
// without looking at its stop channel (a few seconds with the gate, which
// holds requests instead of failing them; up to a minute without), and a
// reload or SIGTERM must not hang on it. Such a goroutine ends on its own when its delay is over; it
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

// namespace is the namespace the informers watch: the configured one when
// there is exactly one (filtered by the API server), else all.
func (k *Source) namespace() string {
	if len(k.cfg.Namespaces) == 1 {
		return k.cfg.Namespaces[0]
	}
	return ""
}

// inNamespaces is the set of configured namespaces (nil: all), for the
// transforms to mark objects outside them.
func (k *Source) inNamespaces() map[string]bool {
	if len(k.cfg.Namespaces) == 0 {
		return nil
	}
	return set(k.cfg.Namespaces)
}
