package endpointsvc

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/endpointsvc/publish"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// publishing is the `publish` option: this replica keeps its own endpoint
// in the EndpointSlices of a selector-less Service (package publish). It
// runs beside the source from OnStartup; at SIGTERM, and not at a reload,
// it marks the endpoint terminating before the lameduck wait of the health
// plugin begins (OnShutdown callbacks run before OnFinalShutdown ones).
type publishing struct {
	namespace, service string // namespace "" means the pod's own
	pods               labels.Selector
	kube               kubesource.Config // the source's client settings

	reloading atomic.Bool // OnRestart ran: the coming OnShutdown is a reload's
	mu        sync.Mutex
	pub       *publish.Publisher
	cancel    context.CancelFunc
	done      chan struct{}
}

// terminateWait bounds how long a stop waits for the terminating endpoint
// to be written (the API server may be unreachable).
const terminateWait = 3 * time.Second

// publishOption reads `publish [NAMESPACE/]SERVICE [SELECTOR]`.
func (o *options) publishOption(c *caddy.Controller) error {
	a := c.RemainingArgs()
	if len(a) < 1 || len(a) > 2 {
		return c.ArgErr()
	}
	p := &publishing{pods: labels.Everything()}
	ns, svc, ok := strings.Cut(a[0], "/")
	if !ok {
		ns, svc = "", a[0]
	}
	if errs := validation.IsDNS1035Label(svc); len(errs) > 0 || (ns != "" && len(validation.IsDNS1123Label(ns)) > 0) {
		return c.Errf("publish: bad Service %q: want [NAMESPACE/]NAME", a[0])
	}
	p.namespace, p.service = ns, svc
	if len(a) == 2 {
		sel, err := labels.Parse(a[1])
		if err != nil {
			return c.Errf("publish: bad pod selector %q: %v", a[1], err)
		}
		p.pods = sel
	}
	o.publish = p
	return nil
}

// podIdentity is this replica's pod name and namespace: $POD_NAME (else
// the host name, which is the pod's name unless the pod sets another) and
// the Service's namespace, else the pod's own (podNamespace).
func (p *publishing) podIdentity() (name, namespace string) {
	name = os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	namespace = p.namespace
	if namespace == "" {
		namespace = podNamespace()
	}
	return name, namespace
}

// podNamespace is the namespace this pod runs in, as far as it knows:
// $POD_NAMESPACE, else the service account's, else "".
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, _ := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	return strings.TrimSpace(string(b))
}

// crossNamespace is the error of a Service in another namespace than the
// pod's own (when that is known), or "": a replica publishes only in its
// own namespace - its slices are owned by its pod, and an owner reference
// names an object of the slice's own namespace (the garbage collector
// would delete them), and its Role and Lease live there.
func (p *publishing) crossNamespace() string {
	own := podNamespace()
	if p.namespace == "" || own == "" || own == p.namespace {
		return ""
	}
	return "Service " + p.namespace + "/" + p.service + " is in another namespace than this pod (" + own +
		"): a replica publishes only the Service of its own namespace; not publishing"
}

// start runs the publisher until stop; serving reports whether the
// replica answers from a table.
func (p *publishing) start(zone string, serving func() bool) {
	if e := p.crossNamespace(); e != "" {
		log.Errorf("Publish: %s", e)
		return
	}
	name, ns := p.podIdentity()
	if name == "" || ns == "" {
		log.Errorf("Publish: no pod name or namespace (set POD_NAME and POD_NAMESPACE); not publishing")
		return
	}
	client, err := kubesource.ClientFor(p.kube)
	if err != nil {
		log.Errorf("Publish: %v; not publishing", err)
		return
	}
	pub := publish.New(publish.Config{Namespace: ns, Service: p.service, Pod: name, Pods: p.pods, Zone: zone}, client, serving)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Run(ctx)
	}()
	p.mu.Lock()
	p.pub, p.cancel, p.done = pub, cancel, done
	p.mu.Unlock()
	p.reloading.Store(false)
	log.Infof("Publishing pod %s/%s in the EndpointSlices of Service %s/%s", ns, name, ns, p.service)
}

// stop ends the publisher. With terminate (a stop that is not a reload's,
// nor the undoing of a failed reload) it first marks this replica's
// endpoint terminating, waiting at most terminateWait.
func (p *publishing) stop(terminate bool) {
	p.mu.Lock()
	pub, cancel, done := p.pub, p.cancel, p.done
	p.pub, p.cancel, p.done = nil, nil, nil
	p.mu.Unlock()
	if pub == nil {
		return
	}
	if terminate {
		ctx, c := context.WithTimeout(context.Background(), terminateWait)
		if err := pub.Terminate(ctx); err != nil {
			log.Warningf("Publish: marking the endpoint terminating: %v", err)
		} else {
			log.Infof("Publish: endpoint marked terminating")
		}
		c()
		// the informers run on until the drain is written (they bring
		// the slice's version the drain updates); the process exits
		// after the lameduck whatever the drain's state
		go func() {
			drain(pub)
			cancel()
			<-done
		}()
		return
	}
	cancel()
	<-done
}

// drainAfter is how long after SIGTERM the endpoint stops serving too: by
// then kube-proxy sends no new flow here (it took the terminating endpoint
// out within a second), and the rest of the health plugin's lameduck (5 s
// in the shipped Corefile) leaves it the time to delete the UDP conntrack
// entries that still lead here before the process exits. Without lameduck
// the process is gone before this and nothing changes.
const drainAfter = 2 * time.Second

// drain marks the endpoint not serving drainAfter after SIGTERM. It runs
// while the process waits out its lameduck, and dies with it.
func drain(pub *publish.Publisher) {
	time.Sleep(drainAfter)
	ctx, c := context.WithTimeout(context.Background(), terminateWait)
	defer c()
	if err := pub.Drain(ctx); err != nil {
		log.Warningf("Publish: marking the endpoint not serving: %v", err)
		return
	}
	log.Infof("Publish: endpoint marked not serving")
}
