package replica

import (
	"bytes"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// The stream is private: a leader off loopback checks a bearer token
// (token_file), and either side may speak TLS (tls). Both files are read
// again when they change, without the API server (a Secret volume that
// the kubelet updates, or a file an operator rewrites), so that a token
// or a certificate rotates while the API server is away.

// TokenGrace is how long a leader still accepts the token its token file
// held before it changed: followers on other nodes see a rotated Secret up
// to a kubelet sync period later than the leader does.
const TokenGrace = 5 * time.Minute

// Token is a bearer token in a file, read at each check (a few bytes: a
// rotated token is seen at once) and compared in constant time.
type Token struct {
	path string

	mu        sync.Mutex
	cur, prev []byte
	prevUntil time.Time
	now       func() time.Time // tests
}

// NewToken returns the token in path.
func NewToken(path string) *Token { return &Token{path: path, now: time.Now} }

// read is the file's token: its content without surrounding spaces.
func (t *Token) read() ([]byte, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.ContainsAny(b, " \t\r\n") {
		return nil, fmt.Errorf("token_file %s: want one token on one line", t.path)
	}
	return b, nil
}

// Check reports whether got (the request's Authorization header) carries
// the token, or the one before it within TokenGrace of its change; err
// says the file cannot be read (no request is let in then).
func (t *Token) Check(got string) (bool, error) {
	b, err := t.read()
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	if !bytes.Equal(b, t.cur) {
		if t.cur != nil {
			t.prev, t.prevUntil = t.cur, t.now().Add(TokenGrace)
		}
		t.cur = b
	}
	prev := t.prev
	if prev != nil && t.now().After(t.prevUntil) {
		t.prev, prev = nil, nil
	}
	t.mu.Unlock()
	tok, ok := strings.CutPrefix(got, "Bearer ")
	if !ok {
		return false, nil
	}
	match := subtle.ConstantTimeCompare([]byte(tok), b) // both compared: the time says nothing of which
	if prev != nil {
		match |= subtle.ConstantTimeCompare([]byte(tok), prev)
	}
	return match == 1, nil
}

// Header is the Authorization header a follower sends.
func (t *Token) Header() (string, error) {
	b, err := t.read()
	if err != nil {
		return "", err
	}
	return "Bearer " + string(b), nil
}

// TLSFiles are the PEM files of one side's TLS: a certificate and its key
// (the leader's, or a follower's client certificate; both "" for none) and
// a CA (the leader: client certificates are required and checked against
// it; a follower: the leader's certificate is; "" the system roots). The
// configuration is built again when a file changed (checked at each
// handshake on the leader, at each connection on a follower); a change
// that does not load keeps the last good one.
type TLSFiles struct {
	Cert, Key, CA string
	// ServerName is what a follower checks the leader's certificate
	// against ("" the URL's host).
	ServerName string

	mu    sync.Mutex
	stamp string
	cfg   *tls.Config
}

// stampOf is the files' sizes and modification times.
func (f *TLSFiles) stampOf() string {
	var sb strings.Builder
	for _, p := range []string{f.Cert, f.Key, f.CA} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&sb, "%d/%d;", st.Size(), st.ModTime().UnixNano())
		} else {
			sb.WriteString("-;")
		}
	}
	return sb.String()
}

// Server is the leader's configuration.
func (f *TLSFiles) Server() (*tls.Config, error) { return f.config(true) }

// Client is a follower's configuration.
func (f *TLSFiles) Client() (*tls.Config, error) { return f.config(false) }

func (f *TLSFiles) config(server bool) (*tls.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stamp := f.stampOf()
	if f.cfg != nil && stamp == f.stamp {
		return f.cfg, nil
	}
	cfg, err := f.load(server)
	if err != nil {
		if f.cfg != nil {
			log.Warningf("Replication TLS files changed but do not load (the last good ones stay): %v", err)
			f.stamp = stamp
			return f.cfg, nil
		}
		return nil, err
	}
	f.stamp, f.cfg = stamp, cfg
	return cfg, nil
}

func (f *TLSFiles) load(server bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: certificate %s, key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	} else if server {
		return nil, errors.New("tls: the leader needs a certificate and a key")
	}
	if f.CA != "" {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("tls: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls: CA %s: no PEM certificate in it", f.CA)
		}
		if server {
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		} else {
			cfg.RootCAs = pool
		}
	}
	return cfg, nil
}

// String names the files (a source's Key).
func (f *TLSFiles) String() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("tls=%q,%q,%q,%q", f.Cert, f.Key, f.CA, f.ServerName)
}
