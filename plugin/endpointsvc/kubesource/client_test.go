package kubesource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClientForIsGated: the client that ClientFor builds (publish's, and
// the source's) holds a request while its API server is gone, asks its
// /readyz with the client's credentials, and sends the request the moment
// the API server is back, instead of failing it.
func TestClientForIsGated(t *testing.T) {
	var readyz atomic.Int64
	var auth atomic.Value
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			readyz.Add(1)
			auth.Store(r.Header.Get("Authorization"))
			_, _ = w.Write([]byte("ok"))
		case "/api/v1/namespaces/x/services":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
		default:
			http.NotFound(w, r)
		}
	})
	serve := func(ln net.Listener) *httptest.Server {
		srv := httptest.NewUnstartedServer(handler)
		srv.Listener = ln
		srv.EnableHTTP2 = true
		srv.StartTLS()
		return srv
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := serve(ln)
	kubeconfig := writeKubeconfig(t, addr)
	client, err := ClientFor(Config{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	list := func() <-chan error {
		ch := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.CoreV1().Services("x").List(ctx, metav1.ListOptions{})
			ch <- err
		}()
		return ch
	}
	if err := <-list(); err != nil {
		t.Fatalf("with the API server up: %v", err)
	}
	if n := readyz.Load(); n != 0 {
		t.Errorf("%d probes while the API server answered", n)
	}

	srv.Close()
	ch := list()
	select {
	case err := <-ch:
		t.Fatalf("request to a gone API server not held: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	back := time.Now()
	defer serve(ln).Close()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("after the return: %v", err)
		}
		t.Logf("the held request went %v after the API server came back", time.Since(back).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("request still held 3s after the API server came back (probe every 1s)")
	}
	if n := readyz.Load(); n < 1 {
		t.Errorf("%d readyz probes", n)
	}
	if a, _ := auth.Load().(string); a != "Bearer gate-test" {
		t.Errorf("readyz probed with Authorization %q, want the client's token", a)
	}
}

// writeKubeconfig writes a kubeconfig for the API server at addr (TLS not
// verified, a bearer token).
func writeKubeconfig(t *testing.T, addr string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://`+addr+`", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: gate-test}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestSourceAPIDownAtStart: with the API server down from the start, the
// source reports the failure at once although the gate holds the refused
// requests (a start-up with no snapshot waits for the first result, a
// failure included), and a stop ends it promptly, leaving no goroutine:
// the held requests end with the informers' contexts, the probes with
// them.
func TestSourceAPIDownAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	before := runtime.NumGoroutine()
	src := NewDNS(Config{Kubeconfig: writeKubeconfig(t, addr)})
	sink := newCollectSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { src.Run(ctx, sink); close(done) }()
	kubefix.Eventually(t, func() string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.fails) == 0 {
			return "no failure reported"
		}
		return ""
	})
	if d := time.Since(start); d > time.Second {
		t.Errorf("failure reported %v after the start, want at once (the probe would take 2 s)", d)
	}
	sink.mu.Lock()
	if err := sink.fails[0]; !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("reported %v, want connection refused", err)
	}
	sink.mu.Unlock()
	time.Sleep(1500 * time.Millisecond) // held, probing
	cancel()
	stopped := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(stopped); d > time.Second {
		t.Errorf("Run returned %v after the stop", d)
	}
	kubefix.Eventually(t, func() string {
		if n := runtime.NumGoroutine(); n > before+2 {
			return fmt.Sprintf("goroutines: %d, before %d", n, before)
		}
		return ""
	})
}
