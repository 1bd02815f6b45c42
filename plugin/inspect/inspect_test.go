package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
)

func TestParse(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	for _, tc := range []struct {
		input, addr, err string
	}{
		{"inspect", defaultAddr, ""},
		{"inspect 127.0.0.1:9999", "127.0.0.1:9999", ""},
		{"inspect localhost:9999", "localhost:9999", ""},
		{"inspect [::1]:9999", "[::1]:9999", ""},
		{"inspect :8182", "", "beyond loopback: set token_file"},
		{"inspect 10.0.0.1:8182", "", "beyond loopback"},
		{"inspect :8182 {\n token_file " + tok + "\n}", ":8182", ""},
		{"inspect 127.0.0.1", "", "bad address"},
		{"inspect a b", "", "Wrong argument count"},
		{"inspect {\n nope\n}", "", "unknown property"},
	} {
		in, err := parse(caddy.NewTestController("dns", tc.input))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.input, err, tc.err)
			}
			continue
		}
		if err != nil || in.addr != tc.addr {
			t.Errorf("%q: %+v %v, want addr %s", tc.input, in, err, tc.addr)
		}
	}
}

// fakeLister writes a fixed object, or refuses any filter.
type fakeLister struct{ body string }

func (f fakeLister) List(w io.Writer, q url.Values) error {
	if len(q) > 0 {
		return &BadRequest{Msg: "no filter"}
	}
	_, err := io.WriteString(w, f.body)
	return err
}

func get(t *testing.T, h http.Handler, target string, hdr map[string]string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String()
}

// TestListing: /<plugin> streams every registered instance as one JSON
// document; a withdrawn instance is gone; unknown paths, writes, bad
// filters and, without a token, foreign Host names are refused.
func TestListing(t *testing.T) {
	in := &Inspect{}
	w1 := Register("endpointsvc", fakeLister{`{"a":1}`})
	w2 := Register("endpointsvc", fakeLister{`{"b":2}`})
	defer w2()
	code, body := get(t, in, "http://127.0.0.1:8182/endpointsvc", nil)
	var doc struct {
		Plugin    string
		Instances []map[string]int
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || code != 200 {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if doc.Plugin != "endpointsvc" || len(doc.Instances) != 2 || doc.Instances[1]["b"] != 2 {
		t.Fatalf("listing %+v", doc)
	}
	w1()
	w1() // twice is harmless
	if _, body := get(t, in, "http://localhost/endpointsvc", nil); strings.Contains(body, `"a"`) {
		t.Fatalf("a withdrawn instance is still listed: %s", body)
	}
	if _, body := get(t, in, "http://localhost/mdnsfallback", nil); !strings.Contains(body, `"instances":[`) {
		t.Fatalf("a plugin with no instance: %s", body)
	}
	for _, tc := range []struct {
		target string
		hdr    map[string]string
		code   int
	}{
		{"http://localhost/nope", nil, 404},
		{"http://localhost/endpointsvc?x=1", nil, 400},
		{"http://evil.example/endpointsvc", nil, 403},
		{"http://evil.example:8182/endpointsvc", nil, 403},
	} {
		if code, body := get(t, in, tc.target, tc.hdr); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.target, code, body, tc.code)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "http://localhost/endpointsvc", nil)
	rec := httptest.NewRecorder()
	in.ServeHTTP(rec, r)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
}

// TestToken: with token_file every request needs the bearer token, from
// any Host.
func TestToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	in := &Inspect{addr: "127.0.0.1:0", tokenFile: tok}
	if err := in.start(); err != nil {
		t.Fatal(err)
	}
	defer in.stop()
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", 401}, {"Bearer nope", 401}, {"Bearer s3cret", 200},
	} {
		if code, body := get(t, in, "http://10.1.2.3/virtualconsul", map[string]string{"Authorization": tc.auth}); code != tc.code {
			t.Errorf("%q: %d %s, want %d", tc.auth, code, body, tc.code)
		}
	}
}

// TestStartStop: the listener opens at start and closes at stop, so a
// reload's new instance can open the same address.
func TestStartStop(t *testing.T) {
	in := &Inspect{addr: "127.0.0.1:0"}
	if err := in.start(); err != nil {
		t.Fatal(err)
	}
	if err := in.stop(); err != nil {
		t.Fatal(err)
	}
	if err := in.stop(); err != nil {
		t.Fatal(err)
	}
}

// stallLister writes size bytes in 64 KiB writes and says how List ended.
type stallLister struct {
	size int
	done chan error
}

func (s stallLister) List(w io.Writer, _ url.Values) error {
	chunk := make([]byte, 64<<10)
	for n := 0; n < s.size; n += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			s.done <- err
			return err
		}
	}
	s.done <- nil
	return nil
}

// TestStalledClient: a client that stops reading a listing does not hold
// it: the next write misses its deadline and the listing ends (with it the
// table it held).
func TestStalledClient(t *testing.T) {
	in := &Inspect{addr: "127.0.0.1:0", deadline: 300 * time.Millisecond}
	if err := in.start(); err != nil {
		t.Fatal(err)
	}
	defer in.stop()
	l := stallLister{size: 512 << 20, done: make(chan error, 1)}
	defer Register("mdnsfallback", l)()
	c, err := net.Dial("tcp", in.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /mdnsfallback HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") // and never read
	select {
	case err := <-l.done:
		if err == nil {
			t.Fatal("512 MiB listed to a client that reads nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a listing to a client that stopped reading still runs after 10 s")
	}
}

// blockLister lists once release is closed.
type blockLister struct{ started, release chan struct{} }

func (b blockLister) List(w io.Writer, _ url.Values) error {
	b.started <- struct{}{}
	<-b.release
	_, err := io.WriteString(w, `{}`)
	return err
}

// TestListingCap: one listing more than the cap is answered 503 with
// Retry-After; once one ended, a new one streams.
func TestListingCap(t *testing.T) {
	in := &Inspect{slots: make(chan struct{}, 2)}
	b := blockLister{started: make(chan struct{}, 2), release: make(chan struct{})}
	defer Register("mdnsfallback", b)()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { get(t, in, "http://localhost/mdnsfallback", nil) })
		<-b.started
	}
	r := httptest.NewRequest(http.MethodGet, "http://localhost/mdnsfallback", nil)
	rec := httptest.NewRecorder()
	in.ServeHTTP(rec, r)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a listing over the cap: %d %q, want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(b.release)
	wg.Wait()
	go func() { <-b.started }()
	if code, body := get(t, in, "http://localhost/mdnsfallback", nil); code != 200 {
		t.Fatalf("after the listings ended: %d %s", code, body)
	}
}
