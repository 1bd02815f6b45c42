package kubesource

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientFor returns a client with the source's settings (kubeconfig and
// context, or the in-cluster configuration; protobuf) and a gate of its
// own (gate.go), for what runs beside the source on the same API server
// (endpointsvc's publish): its informers too resume the moment the API
// server is back.
func ClientFor(cfg Config) (kubernetes.Interface, error) {
	c, _, err := newClient(cfg, "publish")
	return c, err
}

// newClient returns the configured client, whose requests pass a gate,
// and the gate; user names the client in the gate's log.
func newClient(cfg Config, user string) (kubernetes.Interface, *gate, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	// the probe goes to the same API server over the same connections (the
	// client builds one transport per TLS setting), without the gate
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	base, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	readyz := base.JoinPath("readyz").String()
	var g *gate
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		g = newGate(user, rt, func(ctx context.Context) (bool, bool) { return probeReadyz(ctx, hc, readyz) })
		return g
	})
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return c, g, nil
}

// restConfig is the client configuration: from the kubeconfig file (and
// context) or the in-cluster configuration, speaking protobuf.
func restConfig(k Config) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if k.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: k.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: k.Context}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "meshdns-endpointsvc"
	return cfg, nil
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
