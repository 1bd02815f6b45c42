package kubesource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestClientRateLimits: apiserver_qps and apiserver_burst reach the
// client's rate limiter (client-go's 5 and 10 without them), and
// apiserver_max_inflight bounds the requests that wait for their answer
// at once, while the readyz probe is not counted against it.
func TestClientRateLimits(t *testing.T) {
	var inflight, most atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
	}))
	defer srv.Close()
	kubeconfig := writeKubeconfig(t, srv.Listener.Addr().String())

	limiter := func(cfg Config) (float32, int) {
		t.Helper()
		cs, _, err := newClient(cfg, "test", false)
		if err != nil {
			t.Fatal(err)
		}
		c := cs.kube
		if cs.slim.slices.RESTClient().GetRateLimiter() != c.DiscoveryV1().RESTClient().GetRateLimiter() ||
			cs.slim.core.RESTClient().GetRateLimiter() != c.CoreV1().RESTClient().GetRateLimiter() {
			t.Error("a slim watch client has a rate limiter of its own")
		}
		rl := c.CoreV1().RESTClient().(*rest.RESTClient).GetRateLimiter()
		rc, _ := restConfig(cfg)
		return rl.QPS(), rc.Burst
	}
	if qps, burst := limiter(Config{Kubeconfig: kubeconfig}); qps != rest.DefaultQPS || burst != 0 {
		t.Errorf("defaults: qps %v burst %d, want client-go's", qps, burst)
	}
	if qps, burst := limiter(Config{Kubeconfig: kubeconfig, API: APIConfig{QPS: 50, Burst: 100}}); qps != 50 || burst != 100 {
		t.Errorf("apiserver_qps 50, apiserver_burst 100: qps %v burst %d", qps, burst)
	}

	cs, _, err := newClient(Config{Kubeconfig: kubeconfig, API: APIConfig{QPS: 1000, Burst: 1000, MaxInflight: 2}}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	c := cs.kube
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.CoreV1().Services("x").List(ctx, metav1.ListOptions{})
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for inflight.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a third to arrive, if the limit let it
	if n := inflight.Load(); n != 2 {
		t.Errorf("%d requests at the API server at once, want 2 (apiserver_max_inflight 2)", n)
	}
	close(release)
	wg.Wait()
	if m := most.Load(); m > 2 {
		t.Errorf("at most %d requests at once, want 2", m)
	}
}

// TestClientEndpoint: without a kubeconfig, endpoint with tls CERT KEY
// CACERT reaches the API server with that client certificate, verified
// against that CA, as the kubernetes plugin's endpoint and tls do.
func TestClientEndpoint(t *testing.T) {
	var peer atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			peer.Store(r.TLS.PeerCertificates[0].SerialNumber.String())
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writePEM(t, ca, "CERTIFICATE", srv.Certificate().Raw)
	// the server's own certificate and key serve as the client's
	cert, key := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, cert, "CERTIFICATE", srv.TLS.Certificates[0].Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(srv.TLS.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, key, "PRIVATE KEY", keyDER)

	cs, _, err := newClient(Config{API: APIConfig{Endpoint: srv.URL, TLSCert: cert, TLSKey: key, TLSCA: ca}}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	c := cs.kube
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.CoreV1().Services("x").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list through the endpoint: %v", err)
	}
	if sn, _ := peer.Load().(string); sn != srv.Certificate().SerialNumber.String() {
		t.Errorf("the API server saw client certificate %q, want the configured one", sn)
	}
	// without the CA the server's certificate is not trusted
	cs, _, err = newClient(Config{API: APIConfig{Endpoint: srv.URL}}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	c = cs.kube
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, err := c.CoreV1().Services("x").List(ctx2, metav1.ListOptions{}); err == nil {
		t.Error("an endpoint without its CA was trusted")
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
