package mdnsfallback

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func apiDo(p *MDNSFallback, method, path, ctype, body, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = "127.0.0.1:6785" // as a local client sends it (example.com is refused)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, req)
	return w
}

const form = "application/x-www-form-urlencoded"

func TestAPIRoutes(t *testing.T) {
	p := newTestPlugin(nil)
	for i, tc := range []struct {
		method, path, ctype, body string
		code                      int
		want                      string // substring of the body
	}{
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&routing_prefix=12&ttl=20", 200, `"domain":"web.weave.local.","routing_prefix":12,"ttl":20},"created":true`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&routing_prefix=12&ttl=20", 200, `"created":false`},
		{"PUT", "/name/c1/10.32.0.2?fqdn=web.weave.local.", "", "", 200, `"ip":"10.32.0.2"`},
		{"PUT", "/name/c2/fd00::2", "application/json", `{"fqdn": "db.weave.local", "ttl": 30}`, 200, `"routing_prefix":128,"ttl":30`},
		{"PUT", "/name/c3/10.32.0.3", "", ` {"domain": "db.weave.local", "fqdn": "DB.weave.local."}`, 200, `"id":"c3"`},
		{"GET", "/name/", "", "", 200, `"id":"c1"`},
		{"GET", "/name", "", "", 200, `"id":"c3"`},
		{"GET", "/name/c2", "", "", 200, `[{"id":"c2","ip":"fd00::2","domain":"db.weave.local."`},
		{"GET", "/name/none", "", "", 200, `[]`},
		{"GET", "/status", "", "", 200, `"records":4`},
		{"DELETE", "/name/c1/10.32.0.2", "", "", 200, `"deleted":[{"id":"c1","ip":"10.32.0.2"`},
		{"DELETE", "/name/c1/10.32.0.2", "", "", 200, `"deleted":[]`},
		{"DELETE", "/name/c3", "", "", 200, `"id":"c3"`},
		{"GET", "/status", "", "", 200, `"records":2`},
		// wrong methods
		{"POST", "/name/c1/10.32.0.1", form, "domain=x.weave.local", 405, `allowed: PUT, DELETE`},
		{"GET", "/name/c1/10.32.0.1", "", "", 405, `"error"`},
		{"PUT", "/name/c1", "", "", 405, `allowed: GET, DELETE`},
		{"DELETE", "/name/", "", "", 405, `allowed: GET`},
		{"PUT", "/status", "", "", 405, `allowed: GET`},
		{"GET", "/nothing", "", "", 404, `no such route`},
		{"GET", "/name/a/b/c", "", "", 404, `no such route`},
	} {
		w := apiDo(p, tc.method, tc.path, tc.ctype, tc.body, "")
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%d: %s %s: got %d %s, want %d with %s", i, tc.method, tc.path, w.Code, w.Body, tc.code, tc.want)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%d: content type %q", i, ct)
		}
		if tc.code == 405 && w.Header().Get("Allow") == "" {
			t.Errorf("%d: 405 without Allow", i)
		}
	}
}

func TestAPIBadInputChangesNothing(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.maxRecords = 2 })
	apiDo(p, "PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local", "")
	apiDo(p, "PUT", "/name/c1/10.32.0.2", form, "domain=web.weave.local", "")
	before, _ := json.Marshal(p.db.Records(""))
	for i, tc := range []struct {
		method, path, ctype, body string
		code                      int
		want                      string
	}{
		{"PUT", "/name/c1/10.32.0.999", form, "domain=web.weave.local", 400, `bad IP address: \"10.32.0.999\"`},
		{"PUT", "/name/c1/not-an-ip", form, "domain=web.weave.local", 400, `bad IP address`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.example.com", 400, `outside the zones`},
		{"PUT", "/name/c1/10.32.0.1", form, "", 400, `missing domain`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&fqdn=other.weave.local", 400, `disagree`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=a.weave.local&domain=b.weave.local", 400, `given 2 times`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&color=red", 400, `unknown form field \"color\"`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&ttl=-1", 400, `bad ttl`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&ttl=soon", 400, `bad ttl`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=web.weave.local&routing_prefix=40", 400, `bad routing_prefix`},
		{"PUT", "/name/c1/10.32.0.1", form, "domain=%zz", 400, `malformed form body`},
		{"PUT", "/name/" + strings.Repeat("x", 300) + "/10.32.0.1", form, "domain=web.weave.local", 400, `longer than 256`},
		{"PUT", "/name/%20/10.32.0.1", form, "domain=web.weave.local", 400, `bad identifier`},
		{"PUT", "/name/a%2Fb/10.32.0.1", form, "domain=web.weave.local", 400, `slash`},
		{"DELETE", "/name/%20", "", "", 400, `bad identifier`},
		{"PUT", "/name//10.32.0.1", form, "domain=web.weave.local", 400, `bad identifier: empty`},
		{"DELETE", "/name//10.32.0.1", "", "", 400, `bad identifier: empty`},
		{"DELETE", "/name/c1/nope", "", "", 400, `bad IP address`},
		{"PUT", "/name/c1/10.32.0.1", "application/json", `{"domain": "web.weave.local"`, 400, `malformed JSON body`},
		{"PUT", "/name/c1/10.32.0.1", "application/json", `{"domain": 7}`, 400, `malformed JSON body`},
		{"PUT", "/name/c1/10.32.0.1", "application/json", `{"domain": "web.weave.local", "colour": 1}`, 400, `unknown field`},
		{"PUT", "/name/c1/10.32.0.1", "application/json", `{"domain": "web.weave.local"} {}`, 400, `data after the object`},
		{"PUT", "/name/c1/10.32.0.1", "application/json", `{"domain": "web.weave.local", "ttl": 1e99}`, 400, `malformed JSON body`},
		{"PUT", "/name/c1/10.32.0.1?ttl=3", "application/json", `{"domain": "web.weave.local"}`, 400, `not both`},
		{"PUT", "/name/c1/10.32.0.1", "application/json", `{"domain": "web.weave.local", "pad": "` + strings.Repeat("x", 70000) + `"}`, 413, `body larger than 65536 bytes`},
		{"PUT", "/name/c9/10.32.0.9", form, "domain=full.weave.local", 409, `record database full`},
	} {
		w := apiDo(p, tc.method, tc.path, tc.ctype, tc.body, "")
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%d: %s %s %q: got %d %s, want %d with %s", i, tc.method, tc.path, tc.body, w.Code, w.Body, tc.code, tc.want)
		}
		var e apiError
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Errorf("%d: error body is not JSON {\"error\": …}: %s", i, w.Body)
		}
	}
	after, _ := json.Marshal(p.db.Records(""))
	if string(before) != string(after) {
		t.Fatalf("bad input changed the database:\n%s\n%s", before, after)
	}
}

func TestAPIToken(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.token = "s3cret" })
	for i, tc := range []struct {
		method, path, auth string
		code               int
	}{
		{"PUT", "/name/c1/10.32.0.1?domain=a.weave.local", "", 401},
		{"PUT", "/name/c1/10.32.0.1?domain=a.weave.local", "Bearer wrong", 401},
		{"PUT", "/name/c1/10.32.0.1?domain=a.weave.local", "Basic czNjcmV0", 401},
		{"PUT", "/name/c1/10.32.0.1?domain=a.weave.local", "Bearer s3cret", 200},
		{"DELETE", "/name/c1/10.32.0.1", "", 401},
		{"DELETE", "/name/c1", "Bearer nope", 401},
		{"GET", "/name/", "", 200},
		{"GET", "/name/c1", "", 200},
		{"GET", "/status", "", 200},
		{"DELETE", "/name/c1", "Bearer s3cret", 200},
	} {
		w := apiDo(p, tc.method, tc.path, "", "", tc.auth)
		if w.Code != tc.code {
			t.Errorf("%d: %s %s (%q): got %d %s, want %d", i, tc.method, tc.path, tc.auth, w.Code, w.Body, tc.code)
		}
		if tc.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%d: 401 without WWW-Authenticate", i)
		}
	}
	if p.db.Len() != 0 {
		t.Fatalf("records left: %v", p.db.Records(""))
	}
}

// FuzzAPIBody feeds arbitrary PUT bodies (JSON and form) through the API:
// it must never panic, and a non-200 answer must leave the database as it was.
func FuzzAPIBody(f *testing.F) {
	f.Add("application/json", `{"domain": "web.weave.local", "routing_prefix": 24, "ttl": 30}`)
	f.Add("application/json", `{"fqdn": "web.weave.local."}`)
	f.Add(form, "domain=web.weave.local&ttl=5")
	f.Add("", `{"domain": null}`)
	f.Add(form, "fqdn=%41.weave.local&routing_prefix=0")
	p := newTestPlugin(nil)
	f.Fuzz(func(t *testing.T, ctype, body string) {
		before := p.db.Len()
		w := apiDo(p, "PUT", "/name/fuzz/10.32.0.1", ctype, body, "")
		if w.Code != 200 && p.db.Len() != before {
			t.Fatalf("%d answer changed the database", w.Code)
		}
		if w.Code >= 500 {
			t.Fatalf("5xx for %q: %s", body, w.Body)
		}
		p.db.DeleteID("fuzz")
	})
}
