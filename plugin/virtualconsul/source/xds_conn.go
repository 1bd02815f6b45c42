package source

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// How the xds source reaches its server: the address, TLS, and how long a
// stream may stay silent before its first listener response. What the
// Corefile leaves out comes from Consul's environment variables, with the
// meaning `consul connect envoy` gives them:
//
//	CONSUL_GRPC_ADDR         the address when the source line has none
//	                         (https://… turns TLS on)
//	CONSUL_GRPC_CACERT       the CA file, else CONSUL_CACERT
//	CONSUL_GRPC_CAPATH       a directory of CA files, else CONSUL_CAPATH
//	CONSUL_CLIENT_CERT/_KEY  a client certificate
//	CONSUL_TLS_SERVER_NAME   the name the server's certificate must carry
//	CONSUL_HTTP_SSL_VERIFY   false: the certificate is not verified

// xdsFirstResponse is how long a stream waits for its first listener
// response by default. A Consul server answers a proxy it knows at once; one
// it cannot find (an agentless proxy without node_name, an ID nobody
// registered) keeps the stream open and silent for ever.
const xdsFirstResponse = 10 * time.Second

// Reasons an xds stream fails (the reason label of source_failing_reason).
const (
	reasonNoResponse = "no_response" // no listener response within first_response
	reasonTLS        = "tls"         // the TLS handshake failed (CA, server name)
	reasonDenied     = "denied"      // the server refused the token (PermissionDenied, Unauthenticated)
)

// received is one answer of a stream's Recv.
type received[T any] struct {
	v   T
	err error
}

// receive calls recv in a goroutine of its own, handing each answer over,
// until recv fails or ctx (the stream's) ends: the stream's loop can then
// wait for the first-response deadline too. It is the stream's only
// receiver.
func receive[T any](ctx context.Context, recv func() (T, error)) <-chan received[T] {
	ch := make(chan received[T])
	go func() {
		for {
			v, err := recv()
			select {
			case ch <- received[T]{v, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// nextAnswer returns the stream's next answer. When the stream has had no
// listener response for first_response, it reports the source failing
// (reason no_response) once and goes on waiting on the same stream: a
// control plane slow to build the proxy's first configuration is not cut
// off, and its first response ends the failure.
func nextAnswer[T any](ctx context.Context, x *xdsSource, ch <-chan received[T], report func(Sync)) (T, error) {
	for {
		select {
		case r := <-ch:
			return r.v, r.err
		case <-x.silent:
			x.silent = nil
			report(Sync{Result: SyncError, Reason: reasonNoResponse, Err: fmt.Errorf(
				"xds %s: no listener response in %v (first_response), still waiting: for Consul's servers, is node %q the ID of a registered proxy, and node_name its node?",
				x.address, cmp.Or(x.firstResponse, xdsFirstResponse), x.node)})
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// xdsTLS is what the Corefile says about TLS, before the environment.
type xdsTLS struct {
	on            bool // a tls line, or an https:// address
	ca, cert, key string
	serverName    string
}

// xdsAddress returns the gRPC target of ADDRESS (args, or CONSUL_GRPC_ADDR
// when there is none) and whether its scheme asks for TLS.
func xdsAddress(args []string) (addr string, https bool, err error) {
	switch {
	case len(args) > 1:
		return "", false, errors.New("want [ADDRESS]")
	case len(args) == 1:
		addr = args[0]
	default:
		if addr = os.Getenv("CONSUL_GRPC_ADDR"); addr == "" {
			return "", false, errors.New("want ADDRESS (or CONSUL_GRPC_ADDR)")
		}
	}
	lower := strings.ToLower(addr)
	switch {
	case strings.HasPrefix(lower, "https://"):
		return addr[len("https://"):], true, nil
	case strings.HasPrefix(lower, "http://"):
		return addr[len("http://"):], false, nil
	}
	return addr, false, nil
}

// config returns the client TLS of t with the environment filled in, nil
// for plaintext. Files are read here, once, as the Corefile is.
func (t xdsTLS) config() (*tls.Config, error) {
	if !t.on {
		if t.serverName != "" {
			return nil, errors.New("tls_server_name without TLS (a tls line or an https:// address)")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName}
	if cfg.ServerName == "" {
		cfg.ServerName = os.Getenv("CONSUL_TLS_SERVER_NAME")
	}
	if v := os.Getenv("CONSUL_HTTP_SSL_VERIFY"); v != "" {
		verify, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("CONSUL_HTTP_SSL_VERIFY=%q: want true or false", v)
		}
		cfg.InsecureSkipVerify = !verify
	}
	var cas []string
	if t.ca != "" {
		cas = []string{t.ca}
	} else {
		for _, env := range [][2]string{{"CONSUL_GRPC_CACERT", "CONSUL_CACERT"}, {"CONSUL_GRPC_CAPATH", "CONSUL_CAPATH"}} {
			if v := cmpEnv(env[0], env[1]); v != "" {
				cas = append(cas, v)
			}
		}
	}
	if len(cas) > 0 { // none: the system's roots
		cfg.RootCAs = x509.NewCertPool()
		for _, ca := range cas {
			if err := addCAs(cfg.RootCAs, ca); err != nil {
				return nil, err
			}
		}
	}
	cert, key := t.cert, t.key
	if cert == "" {
		cert, key = os.Getenv("CONSUL_CLIENT_CERT"), os.Getenv("CONSUL_CLIENT_KEY")
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// cmpEnv returns the first of the environment variables a and b set.
func cmpEnv(a, b string) string {
	if v := os.Getenv(a); v != "" {
		return v
	}
	return os.Getenv(b)
}

// addCAs adds the PEM certificates of path, a file or a directory of
// files, to pool.
func addCAs(pool *x509.CertPool, path string) error {
	files := []string{path}
	if fi, err := os.Stat(path); err != nil {
		return err
	} else if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		files = files[:0]
		for _, e := range entries {
			if e.Type().IsRegular() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	found := false
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		found = pool.AppendCertsFromPEM(pem) || found
	}
	if !found {
		return fmt.Errorf("%s: no PEM certificate", path)
	}
	return nil
}

// handshakes wraps TLS credentials to keep the last client handshake's
// error: gRPC reports a failed handshake as Unavailable, like a refused
// connection, and the source names it apart (reason tls).
type handshakes struct {
	credentials.TransportCredentials
	last *atomic.Pointer[error] // nil after a handshake that succeeded
}

func newHandshakes(cfg *tls.Config) *handshakes {
	return &handshakes{TransportCredentials: credentials.NewTLS(cfg), last: new(atomic.Pointer[error])}
}

func (h *handshakes) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := h.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil && ctx.Err() == nil {
		h.last.Store(&err)
	} else {
		h.last.Store(nil)
	}
	return c, info, err
}

func (h *handshakes) Clone() credentials.TransportCredentials {
	return &handshakes{TransportCredentials: h.TransportCredentials.Clone(), last: h.last}
}

// failed returns the last handshake's error, nil if it succeeded.
func (h *handshakes) failed() error {
	if h == nil {
		return nil
	}
	if e := h.last.Load(); e != nil {
		return *e
	}
	return nil
}

// classify gives a stream's error its reason: a failed TLS handshake, a
// refused token; else the plain error.
func classify(err error, hs *handshakes) error {
	switch c := status.Code(err); {
	case hs.failed() != nil && c == codes.Unavailable:
		return &failure{reasonTLS, fmt.Errorf("TLS handshake: %w", hs.failed())}
	case c == codes.PermissionDenied || c == codes.Unauthenticated:
		return &failure{reasonDenied, err}
	}
	return err
}
