package inspect

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
