package source

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA and a server certificate it signed for serverName only
// (no IP address: a client that dials 127.0.0.1 must name the server).
type testPKI struct {
	caFile string
	server tls.Certificate
}

const testServerName = "consul.server.test"

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: testServerName},
		DNSNames: []string{testServerName}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), server: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
	if err := os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// serveADS serves srv over gRPC on loopback (TLS with cert when given)
// and returns its address.
func serveADS(t *testing.T, srv discovery.AggregatedDiscoveryServiceServer, cert *tls.Certificate) string {
	t.Helper()
	var opts []grpc.ServerOption
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}})))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return l.Addr().String()
}

// silentADS reads each stream's first request and then says nothing, as
// Consul's servers do for a proxy they cannot find; or, with late, answers
// it after a while, as a server slow to build the proxy's configuration.
type silentADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	first   chan *discovery.DeltaDiscoveryRequest
	streams atomic.Int32
	late    *discovery.DeltaDiscoveryResponse
	after   time.Duration
}

func (s *silentADS) DeltaAggregatedResources(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	s.streams.Add(1)
	req, err := st.Recv()
	if err != nil {
		return err
	}
	select {
	case s.first <- req:
	default:
	}
	if s.late != nil {
		select {
		case <-time.After(s.after):
			if err := st.Send(s.late); err != nil {
				return err
			}
		case <-st.Context().Done():
		}
	}
	<-st.Context().Done()
	return nil
}

// xdsFromCorefile parses one virtualconsul block and returns its xds
// source.
func xdsFromCorefile(t *testing.T, block string) *xdsSource {
	t.Helper()
	v, err := parse(caddy.NewTestController("dns", "virtualconsul {\n"+block+"\n}"))
	if err != nil {
		t.Fatalf("%s: %v", block, err)
	}
	return v.src.(*xdsSource)
}

// firstReport runs x until its first report.
func firstReport(t *testing.T, x *xdsSource, within time.Duration) Sync {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan Sync, 10)
	go x.Run(ctx, func(s Sync) { reports <- s })
	select {
	case s := <-reports:
		return s
	case <-time.After(within):
		t.Fatalf("no report in %v", within)
	}
	return Sync{}
}

// TestXDSFirstResponseDeadline: a server that accepts the stream and
// does not answer fails the source after first_response, with reason
// no_response, and the stream stays open: when the server answers at last,
// on the same stream, the source recovers. The stream carried the proxy's
// identity (node ID and the node_name, namespace and partition metadata
// Consul's servers look the proxy up by).
func TestXDSFirstResponseDeadline(t *testing.T) {
	v1 := listenerAny(t, "virtual_dns", map[string][]string{webKey: {"240.0.0.1"}})
	srv := &silentADS{first: make(chan *discovery.DeltaDiscoveryRequest, 1), after: 2500 * time.Millisecond,
		late: &discovery.DeltaDiscoveryResponse{Nonce: "1", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "1", v1)}}}
	addr := serveADS(t, srv, nil)
	x := xdsFromCorefile(t, `source xds `+addr+` {
		node web-sidecar-proxy
		node_name node-7
		namespace team-a
		partition edge
		first_response 1s
		protocol delta
	}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan Sync, 10)
	start := time.Now()
	go x.Run(ctx, func(s Sync) { reports <- s })
	s := <-reports
	if s.Result != SyncError || s.Reason != reasonNoResponse {
		t.Fatalf("report %s reason %q (%v), want error no_response", s.Result, s.Reason, s.Err)
	}
	if d := time.Since(start); d < time.Second || d > 2*time.Second {
		t.Fatalf("failed after %v, want after first_response (1s)", d)
	}
	if !strings.Contains(s.Err.Error(), "first_response") {
		t.Fatalf("error %q does not name the deadline", s.Err)
	}
	select {
	case s = <-reports:
	case <-time.After(5 * time.Second):
		t.Fatal("no report after the server's late answer")
	}
	if s.Result != SyncOK || srv.streams.Load() != 1 {
		t.Fatalf("after the late answer: %s (%v), %d streams; want a table on the one stream", s.Result, s.Err, srv.streams.Load())
	}
	req := <-srv.first
	md := req.GetNode().GetMetadata().GetFields()
	if req.GetNode().GetId() != "web-sidecar-proxy" || md["node_name"].GetStringValue() != "node-7" ||
		md["namespace"].GetStringValue() != "team-a" || md["partition"].GetStringValue() != "edge" {
		t.Fatalf("node sent = %v", req.GetNode())
	}
}

// TestXDSFirstResponseMet: a server that answers within the deadline and
// then stays quiet (nothing changed) is not failing after it.
func TestXDSFirstResponseMet(t *testing.T) {
	v1 := listenerAny(t, "virtual_dns", map[string][]string{webKey: {"240.0.0.1"}})
	srv := &scriptedDelta{answers: make(chan *discovery.DeltaDiscoveryRequest, 10), token: make(chan string, 10),
		script: []*discovery.DeltaDiscoveryResponse{{Nonce: "1", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "1", v1)}}}}
	addr := serveADS(t, srv, nil)
	x := xdsFromCorefile(t, "source xds "+addr+" {\nnode web-sidecar-proxy\nfirst_response 1s\n}")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan Sync, 10)
	go x.Run(ctx, func(s Sync) { reports <- s })
	if s := <-reports; s.Result != SyncOK {
		t.Fatalf("first report %s (%v)", s.Result, s.Err)
	}
	select {
	case s := <-reports:
		t.Fatalf("a quiet stream reported %s (%v) after its first response", s.Result, s.Err)
	case <-time.After(2 * time.Second):
	}
}

// TestXDSTLS: TLS with a CA only (no client certificate) and the server's
// name (tls_server_name, or CONSUL_TLS_SERVER_NAME) follows a server whose
// certificate names no IP address; a wrong name fails with reason tls; the
// address, CA and name can all come from Consul's environment variables;
// CONSUL_HTTP_SSL_VERIFY=false skips the check.
func TestXDSTLS(t *testing.T) {
	pki := newTestPKI(t)
	v1 := listenerAny(t, "virtual_dns", map[string][]string{webKey: {"240.0.0.1"}})
	srv := &scriptedDelta{answers: make(chan *discovery.DeltaDiscoveryRequest, 100), token: make(chan string, 100),
		script: []*discovery.DeltaDiscoveryResponse{{Nonce: "1", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "1", v1)}}}}
	addr := serveADS(t, srv, &pki.server)
	for _, tc := range []struct {
		name, block string
		env         map[string]string
		reason      string // "" for a table
		errHas      string
	}{
		{name: "ca only, server name", block: "source xds " + addr + " {\nnode web-sidecar-proxy\ntls " + pki.caFile + "\ntls_server_name " + testServerName + "\n}"},
		{name: "wrong server name", block: "source xds " + addr + " {\nnode web-sidecar-proxy\ntls " + pki.caFile + "\ntls_server_name other.test\n}",
			reason: reasonTLS, errHas: "other.test"},
		{name: "no server name (127.0.0.1)", block: "source xds " + addr + " {\nnode web-sidecar-proxy\ntls " + pki.caFile + "\n}",
			reason: reasonTLS, errHas: "127.0.0.1"},
		{name: "environment", block: "source xds {\nnode web-sidecar-proxy\n}",
			env: map[string]string{"CONSUL_GRPC_ADDR": "https://" + addr, "CONSUL_CACERT": pki.caFile, "CONSUL_TLS_SERVER_NAME": testServerName}},
		{name: "grpc CA before the HTTP one", block: "source xds https://" + addr + " {\nnode web-sidecar-proxy\ntls_server_name " + testServerName + "\n}",
			env: map[string]string{"CONSUL_GRPC_CACERT": pki.caFile, "CONSUL_CACERT": "/nonexistent"}},
		{name: "CA path", block: "source xds " + addr + " {\nnode web-sidecar-proxy\ntls " + filepath.Dir(pki.caFile) + "\ntls_server_name " + testServerName + "\n}"},
		{name: "system roots", block: "source xds https://" + addr + " {\nnode web-sidecar-proxy\ntls_server_name " + testServerName + "\n}",
			reason: reasonTLS, errHas: "unknown authority"},
		{name: "verify off", block: "source xds https://" + addr + " {\nnode web-sidecar-proxy\n}",
			env: map[string]string{"CONSUL_HTTP_SSL_VERIFY": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s := firstReport(t, xdsFromCorefile(t, tc.block), 10*time.Second)
			if tc.reason == "" {
				if s.Result != SyncOK {
					t.Fatalf("report %s (%v), want a table", s.Result, s.Err)
				}
				return
			}
			if s.Result != SyncError || s.Reason != tc.reason || !strings.Contains(s.Err.Error(), tc.errHas) {
				t.Fatalf("report %s reason %q (%v), want error %s naming %q", s.Result, s.Reason, s.Err, tc.reason, tc.errHas)
			}
		})
	}
}

// TestXDSConnOptions: what the Corefile and the environment say of the
// address and TLS, and the errors.
func TestXDSConnOptions(t *testing.T) {
	pki := newTestPKI(t)
	x := xdsFromCorefile(t, "source xds 127.0.0.1:8502")
	if x.tls != nil || x.firstResponse != xdsFirstResponse || x.meta != nil {
		t.Errorf("defaults: tls %v, first_response %v, meta %v", x.tls, x.firstResponse, x.meta)
	}
	x = xdsFromCorefile(t, "source xds http://127.0.0.1:8502")
	if x.address != "127.0.0.1:8502" || x.tls != nil {
		t.Errorf("http://: address %q tls %v", x.address, x.tls)
	}
	x = xdsFromCorefile(t, "source xds HTTPS://consul:8503 {\ntls "+pki.caFile+"\nfirst_response 30s\n}")
	if x.address != "consul:8503" || x.tls == nil || x.tls.RootCAs == nil || len(x.tls.Certificates) != 0 || x.firstResponse != 30*time.Second {
		t.Errorf("https:// with a CA: address %q tls %+v first_response %v", x.address, x.tls, x.firstResponse)
	}
	t.Setenv("CONSUL_TLS_SERVER_NAME", "from-env")
	x = xdsFromCorefile(t, "source xds https://consul:8503 {\ntls_server_name from-corefile\n}")
	if x.tls.ServerName != "from-corefile" {
		t.Errorf("server name %q, want the Corefile's over the environment's", x.tls.ServerName)
	}
	x = xdsFromCorefile(t, "source xds https://consul:8503")
	if x.tls.ServerName != "from-env" || x.tls.RootCAs != nil {
		t.Errorf("server name %q roots %v, want the environment's name and the system's roots", x.tls.ServerName, x.tls.RootCAs)
	}
	for _, tc := range []struct{ block, err string }{
		{"source xds", "want ADDRESS (or CONSUL_GRPC_ADDR)"},
		{"source xds a b", "want [ADDRESS]"},
		{"source xds 127.0.0.1:8502 {\ntls_server_name x\n}", "tls_server_name without TLS"},
		{"source xds 127.0.0.1:8502 {\nfirst_response 100ms\n}", "bad first_response"},
		{"source xds 127.0.0.1:8502 {\ntls a b\n}", "Wrong argument count"},
		{"source xds 127.0.0.1:8502 {\ntls /nonexistent/ca\n}", "no such file"},
	} {
		_, err := parse(caddy.NewTestController("dns", "virtualconsul {\n"+tc.block+"\n}"))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want %q", tc.block, err, tc.err)
		}
	}
	t.Setenv("CONSUL_HTTP_SSL_VERIFY", "maybe")
	if _, err := parse(caddy.NewTestController("dns", "virtualconsul {\nsource xds https://consul:8503\n}")); err == nil || !strings.Contains(err.Error(), "CONSUL_HTTP_SSL_VERIFY") {
		t.Errorf("CONSUL_HTTP_SSL_VERIFY=maybe: error %v", err)
	}
}

// TestConsulSourceTLS: the consul source's HTTPS with a CA only and the
// server's name, from the Corefile (tls CA, tls_server_name) or from
// CONSUL_TLS_SERVER_NAME, which a tls line no longer drops; a wrong name
// fails.
func TestConsulSourceTLS(t *testing.T) {
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name, block string
		env         map[string]string
		ok          bool
	}{
		{"ca only, server name", "tls " + pki.caFile + "\ntls_server_name " + testServerName, nil, true},
		{"server name from the environment", "tls " + pki.caFile, map[string]string{"CONSUL_TLS_SERVER_NAME": testServerName}, true},
		{"CA from the environment", "tls_server_name " + testServerName, map[string]string{"CONSUL_CACERT": pki.caFile}, true},
		{"CA path", "tls " + filepath.Dir(pki.caFile) + "\ntls_server_name " + testServerName, nil, true},
		{"wrong server name", "tls " + pki.caFile + "\ntls_server_name other.test", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			m := newModelConsul(map[string][]modelInstance{"a-sidecar-proxy": sidecar("a", "240.0.0.2")})
			srv := httptest.NewUnstartedServer(m)
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}}
			srv.StartTLS()
			defer srv.Close()
			v, err := parse(caddy.NewTestController("dns", "virtualconsul {\nsource consul "+srv.URL+" {\n"+tc.block+"\n}\n}"))
			if err != nil {
				t.Fatal(err)
			}
			s := v.src.(*consulSource)
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan Sync, 64)
			done := make(chan struct{})
			go func() { defer close(done); s.Run(ctx, func(sy Sync) { got <- sy }) }()
			defer func() { cancel(); <-done }()
			sy := awaitSync(t, got, "a report", func(Sync) bool { return true })
			if tc.ok && sy.Result != SyncOK || !tc.ok && (sy.Result != SyncError || !strings.Contains(sy.Err.Error(), "other.test")) {
				t.Fatalf("report %s (%v), want ok %v", sy.Result, sy.Err, tc.ok)
			}
		})
	}
}
