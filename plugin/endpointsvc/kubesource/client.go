package kubesource

import (
	"context"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/flowcontrol"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/typed/apis/v1alpha1"
)

// ClientFor returns a client with the source's settings (kubeconfig and
// context, or the in-cluster configuration; protobuf) and a gate of its
// own (gate.go), for what runs beside the source on the same API server
// (endpointsvc's publish): its informers too resume the moment the API
// server is back.
func ClientFor(cfg Config) (kubernetes.Interface, error) {
	c, _, err := newClient(cfg, "publish", false)
	return c.kube, err
}

// newClient returns the configured clients, whose requests pass a gate,
// and the gate; user names the client in the gate's log. Besides the
// client of the Kubernetes API it returns the watch clients of the slim
// decoder (slimClients), and with mc a client of the MCS API's
// ServiceImports (JSON: a custom resource has no protobuf); all over the
// same connections and gate.
func newClient(cfg Config, user string, mc bool) (clients, *gate, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return clients{}, nil, err
	}
	// the probe goes to the same API server over the same connections (the
	// client builds one transport per TLS setting), without the gate
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return clients{}, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	base, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return clients{}, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	readyz := base.JoinPath("readyz").String()
	if n := cfg.API.MaxInflight; n > 0 { // the requests, not the probe
		rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return newInflightLimit(rt, n) })
	}
	var g *gate
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		g = newGate(user, rt, func(ctx context.Context) (bool, bool) { return probeReadyz(ctx, hc, readyz) })
		return g
	})
	gated, err := rest.HTTPClientFor(rc) // builds the gate, once
	if err != nil {
		return clients{}, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c, err := kubernetes.NewForConfigAndClient(rc, gated)
	if err != nil {
		return clients{}, nil, err
	}
	out := clients{kube: c}
	if out.slim, err = newSlimClients(rc, gated, c); err != nil {
		return clients{}, nil, err
	}
	if !mc {
		return out, g, nil
	}
	jc := rest.CopyConfig(rc)
	jc.ContentType, jc.AcceptContentTypes = "application/json", "application/json"
	if out.mcs, err = mcsv1alpha1.NewForConfigAndClient(jc, gated); err != nil {
		return clients{}, nil, err
	}
	return out, g, nil
}

// newSlimClients returns the watch clients with the slim decoder
// (slimdecode.go): EndpointSlices', and Services' and Nodes', each a
// client-go client of its group with the slim decoder of its kinds, on
// the same connections (hc) and the same rate limiter as kube's client of
// the group.
func newSlimClients(rc *rest.Config, hc *http.Client, kube kubernetes.Interface) (slimClients, error) {
	slim := func(gv schema.GroupVersion, apiPath string, limiter flowcontrol.RateLimiter, kinds ...slimKind) (*rest.RESTClient, error) {
		sc := rest.CopyConfig(rc)
		sc.GroupVersion, sc.APIPath = &gv, apiPath
		sc.NegotiatedSerializer = slimCodecs{rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion(), kinds}
		sc.RateLimiter = limiter
		rl, err := rest.RESTClientForConfigAndClient(sc, hc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		return rl, nil
	}
	d, err := slim(discoveryv1.SchemeGroupVersion, "/apis", kube.DiscoveryV1().RESTClient().GetRateLimiter(), slimSliceKind)
	if err != nil {
		return slimClients{}, err
	}
	core, err := slim(corev1.SchemeGroupVersion, "/api", kube.CoreV1().RESTClient().GetRateLimiter(), slimServiceKind, slimNodeKind)
	if err != nil {
		return slimClients{}, err
	}
	return slimClients{slices: discoveryv1client.New(d), core: corev1client.New(core)}, nil
}

// APIConfig is how the client reaches the API server besides a
// kubeconfig, and how hard it may ask: the kubernetes plugin's endpoint,
// tls, apiserver_qps, apiserver_burst and apiserver_max_inflight, with its
// meaning.
type APIConfig struct {
	// Endpoint is the API server's URL, used when there is no kubeconfig
	// (then TLSCert, TLSKey and TLSCA are its client certificate, key and
	// CA file; "" none).
	Endpoint               string
	TLSCert, TLSKey, TLSCA string
	QPS                    float32 // requests per second; 0: client-go's (5)
	Burst                  int     // 0: client-go's (10)
	MaxInflight            int     // requests waiting for their answer at once; 0: no limit
	NamespaceLabels        string  // label selector of the Namespaces that exist for DNS ("": all)
}

// key is what of the settings selects the API server and what it reads
// (the rate limits do not).
func (a APIConfig) key() string {
	return fmt.Sprintf("endpoint=%q tls=%q/%q/%q namespace_labels=%q", a.Endpoint, a.TLSCert, a.TLSKey, a.TLSCA, a.NamespaceLabels)
}

// restConfig is the client configuration, chosen as the kubernetes plugin
// chooses it: the kubeconfig file (and context); else the endpoint, with
// the client certificate and CA given; else the in-cluster configuration.
// It speaks protobuf, with the configured rate limits (newClient adds
// the limit of requests in flight).
func restConfig(k Config) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case k.Kubeconfig != "":
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: k.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: k.Context}).ClientConfig()
	case k.API.Endpoint != "":
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{},
			&clientcmd.ConfigOverrides{
				ClusterInfo: clientcmdapi.Cluster{Server: k.API.Endpoint, CertificateAuthority: k.API.TLSCA},
				AuthInfo:    clientcmdapi.AuthInfo{ClientCertificate: k.API.TLSCert, ClientKey: k.API.TLSKey},
			}).ClientConfig()
	default:
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "meshdns-endpointsvc"
	if k.API.QPS > 0 {
		cfg.QPS = k.API.QPS
	}
	if k.API.Burst > 0 {
		cfg.Burst = k.API.Burst
	}
	return cfg, nil
}

// inflightLimit lets at most cap(slots) requests wait for their answer at
// once (apiserver_max_inflight): a request holds a slot from sending until
// its response's header came (a watch's stream then goes on without one),
// as the kubernetes plugin's limit does; one that waits for a slot ends
// with its context.
type inflightLimit struct {
	next  http.RoundTripper
	slots chan struct{}
}

func newInflightLimit(next http.RoundTripper, n int) *inflightLimit {
	return &inflightLimit{next: next, slots: make(chan struct{}, n)}
}

func (l *inflightLimit) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case l.slots <- struct{}{}:
		defer func() { <-l.slots }()
		return l.next.RoundTrip(r)
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
}

// probeReadyz asks the API server's /readyz: answered is any HTTP answer,
// ready a 200, or an answer that says the client may not ask (401, 403,
// 404): then any answer is all it can learn. An API server that restarts
// answers before it is ready, and requests then may be refused (the RBAC
// authorizer not synced yet) and back off: the gate waits for ready.
func probeReadyz(ctx context.Context, hc *http.Client, url string) (answered, ready bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true, true
	}
	return true, false
}
