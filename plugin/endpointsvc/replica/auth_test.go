package replica

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testpki"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// TestTokenRotation: a rotated token file is read at the next check; the
// token before it is still taken for TokenGrace (followers see a rotated
// Secret later than the leader), then no more.
func TestTokenRotation(t *testing.T) {
	path := writeToken(t, "one")
	tok := NewToken(path)
	now := time.Unix(1000, 0)
	tok.now = func() time.Time { return now }
	check := func(h string, want bool) {
		t.Helper()
		ok, err := tok.Check(h)
		if err != nil || ok != want {
			t.Errorf("Check(%q) = %v, %v; want %v", h, ok, err, want)
		}
	}
	check("Bearer one", true)
	check("Bearer two", false)
	check("one", false)
	if err := os.WriteFile(path, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("Bearer two", true)
	check("Bearer one", true) // within the grace
	now = now.Add(TokenGrace + time.Second)
	check("Bearer one", false)
	check("Bearer two", true)
	if err := os.WriteFile(path, []byte("a b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Check("Bearer two"); err == nil {
		t.Error("a token file with two words: no error")
	}
	if h, err := NewToken(writeToken(t, " spaced \n")).Header(); err != nil || h != "Bearer spaced" {
		t.Errorf("Header = %q, %v", h, err)
	}
}

// serveTLSLeader serves l over TLS with files until the test ends.
func serveTLSLeader(t *testing.T, l *Leader, files *TLSFiles) string {
	t.Helper()
	s := NewServer("127.0.0.1:0", l)
	s.TLS = files
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return "https://" + s.Addr()
}

// TestTLS: a leader with a certificate streams to a follower that checks
// it against the right CA; a follower with another CA fails with an error
// that says so; with a CA on the leader, a follower needs a client
// certificate it signed; a rewritten certificate is served from the next
// handshake on.
func TestTLS(t *testing.T) {
	pki, other := testpki.Write(t, t.TempDir()), testpki.Write(t, t.TempDir())
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	files := &TLSFiles{Cert: pki.Cert, Key: pki.Key}
	base := serveTLSLeader(t, l, files)

	follow := func(tls *TLSFiles) *fakeSink {
		t.Helper()
		sink := &fakeSink{}
		startFollower(t, base, "", sink, func(s *Source) {
			if err := s.UseTLS(tls); err != nil {
				t.Fatal(err)
			}
		})
		return sink
	}
	failure := func(sink *fakeSink) string {
		t.Helper()
		kubefix.Eventually(t, func() string {
			if len(sink.errors()) == 0 {
				return "no error yet"
			}
			return ""
		})
		if sink.tbl.Load() != nil {
			t.Error("a table through a refused connection")
		}
		return sink.errors()[0].Error()
	}

	waitGen(t, follow(&TLSFiles{CA: pki.CA}), 1)
	waitGen(t, follow(&TLSFiles{CA: pki.CA, ServerName: "localhost"}), 1)
	if err := failure(follow(&TLSFiles{CA: other.CA})); !strings.Contains(err, "not signed by the CA in "+other.CA) {
		t.Errorf("another CA: %s", err)
	}
	if err := failure(follow(&TLSFiles{CA: pki.CA, ServerName: "dns.example"})); !strings.Contains(err, "not for the name checked") {
		t.Errorf("another name: %s", err)
	}
	resp, err := http.Get(base + Path) // plain HTTP to a TLS listener
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP streamed from a TLS listener")
		}
	}

	// client certificates: the leader's CA given
	mtls := NewLeader("cluster.local.", "")
	mtls.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	mfiles := &TLSFiles{Cert: pki.Cert, Key: pki.Key, CA: pki.CA}
	base = serveTLSLeader(t, mtls, mfiles)
	failure(follow(&TLSFiles{CA: pki.CA}))
	waitGen(t, follow(&TLSFiles{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA}), 1)
	failure(follow(&TLSFiles{Cert: other.ClientCert, Key: other.ClientKey, CA: pki.CA}))

	// rotation: the leader's files replaced by other's (a later mtime)
	later := time.Now().Add(2 * time.Second)
	for _, p := range [][2]string{{other.Cert, pki.Cert}, {other.Key, pki.Key}, {other.CA, pki.CA}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(p[1], later, later)
	}
	waitGen(t, follow(&TLSFiles{Cert: other.ClientCert, Key: other.ClientKey, CA: other.CA}), 1)
	// a broken file keeps the last good configuration
	if err := os.WriteFile(pki.Cert, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(pki.Cert, later.Add(time.Second), later.Add(time.Second))
	waitGen(t, follow(&TLSFiles{Cert: other.ClientCert, Key: other.ClientKey, CA: other.CA}), 1)

	// a leader's TLS needs its files
	s := NewServer("127.0.0.1:0", l)
	s.TLS = &TLSFiles{Cert: filepath.Join(t.TempDir(), "none.pem"), Key: pki.Key}
	if err := s.Start(); err == nil {
		s.Stop()
		t.Error("a TLS leader without its certificate started")
	}
	src, err := NewSource("http://127.0.0.1:1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.UseTLS(&TLSFiles{CA: pki.CA}); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Errorf("tls with an http:// URL: %v", err)
	}
}
