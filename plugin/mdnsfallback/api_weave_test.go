package mdnsfallback

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater/updatertest"
)

// TestAPIWeaveCLI: the calls of Weave's `weave` script, answered as
// Weave's nameserver did: the plain-text GET routes, PUT with fqdn and
// check-alive=true, DELETE by identifier and address, and DELETE with
// ?fqdn= removing that name only (the identifier's other names stay).
func TestAPIWeaveCLI(t *testing.T) {
	p := newTestPlugin(func(c *config) { c.dnsHost, c.dnsPort = "10.32.0.254", "53" })
	for i, tc := range []struct {
		method, path, ctype, body string
		code                      int
		want                      string // the whole body for text, a substring for JSON
	}{
		{"GET", "/domain", "", "", 200, "weave.local."},
		{"GET", "/dns-address", "", "", 200, "10.32.0.254"},
		{"GET", "/dns-address-port", "", "", 200, "10.32.0.254:53"},
		// put_dns_fqdn: curl -X PUT --data-urlencode fqdn=… -d check-alive=true
		{"PUT", "/name/0123456789abcdef/10.32.0.1", form, "fqdn=web.weave.local&check-alive=true", 200, `"created":true`},
		{"PUT", "/name/0123456789abcdef/10.32.0.1", form, "fqdn=alias.weave.local&check-alive=true", 200, `"created":true`},
		{"PUT", "/name/weave:extern/10.32.0.9", form, "fqdn=ext.weave.local", 200, `"created":true`},
		{"GET", "/status/dns", "", "", 200, "alias        10.32.0.1       0123456789ab api\nweb          10.32.0.1       0123456789ab api\next          10.32.0.9       weave:extern api\n"},
		// delete_dns_fqdn: only that name goes
		{"DELETE", "/name/0123456789abcdef/10.32.0.1?fqdn=web.weave.local", "", "", 200, `"deleted":[{"id":"0123456789abcdef","ip":"10.32.0.1","domain":"web.weave.local."`},
		{"GET", "/name/0123456789abcdef", "", "", 200, `"domain":"alias.weave.local."`},
		{"DELETE", "/name/0123456789abcdef/10.32.0.1?fqdn=elsewhere.example", "", "", 400, `outside the zones`},
		// delete_dns: every name of the identifier and address
		{"DELETE", "/name/0123456789abcdef/10.32.0.1", "", "", 200, `"domain":"alias.weave.local."`},
		{"DELETE", "/name/weave:extern?fqdn=ext.weave.local", "", "", 200, `"domain":"ext.weave.local."`},
		{"GET", "/status/dns", "", "", 200, ""},
		{"PUT", "/domain", "", "", 405, `allowed: GET`},
	} {
		w := apiDo(p, tc.method, tc.path, tc.ctype, tc.body, "")
		text := strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain")
		if w.Code != tc.code || (text && w.Body.String() != tc.want) || (!text && !strings.Contains(w.Body.String(), tc.want)) {
			t.Errorf("%d: %s %s: got %d %q, want %d with %q", i, tc.method, tc.path, w.Code, w.Body, tc.code, tc.want)
		}
	}
}

// TestAPIWeaveCheckAlive: with an updater, a PUT with check-alive=true for
// a container the engine does not run is removed again at once; one for a
// running container stays.
func TestAPIWeaveCheckAlive(t *testing.T) {
	p := newTestPlugin(nil)
	eng := updatertest.New()
	eng.Set(updater.Container{ID: "alive", Running: true})
	p.upd.Store(updater.New(updater.Config{}, p.db, p.cfg.zones, eng, nil))
	w := apiDo(p, "PUT", "/name/dead/10.32.0.1", form, "fqdn=web.weave.local&check-alive=true", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"not_running":true`) || p.db.Len() != 0 {
		t.Fatalf("dead container: %d %s, %d records", w.Code, w.Body, p.db.Len())
	}
	w = apiDo(p, "PUT", "/name/alive/10.32.0.2", form, "fqdn=web.weave.local&check-alive=true", "")
	if w.Code != 200 || strings.Contains(w.Body.String(), "not_running") || p.db.Len() != 1 {
		t.Fatalf("running container: %d %s, %d records", w.Code, w.Body, p.db.Len())
	}
	w = apiDo(p, "PUT", "/name/dead/10.32.0.3", form, "fqdn=web.weave.local&check-alive=false", "")
	if w.Code != 200 || p.db.Len() != 2 {
		t.Fatalf("check-alive=false: %d %s, %d records", w.Code, w.Body, p.db.Len())
	}
}

// TestAPIHostHeader: without token_file the API answers requests whose
// Host is localhost or a loopback address only (a DNS-rebinding page
// sends its own name); with insecure, IP addresses too; with token_file,
// any Host.
func TestAPIHostHeader(t *testing.T) {
	for _, tc := range []struct {
		host            string
		insecure, token bool
		code            int
	}{
		{"127.0.0.1:6785", false, false, 200},
		{"localhost:6785", false, false, 200},
		{"LOCALHOST.", false, false, 200},
		{"app.localhost:6785", false, false, 200},
		{"[::1]:6785", false, false, 200},
		{"127.0.0.2", false, false, 200},
		{"rebind.attacker.example:6785", false, false, 403},
		{"localhost.attacker.example", false, false, 403},
		{"10.0.0.5:6785", false, false, 403},
		{"", false, false, 403},
		{"10.0.0.5:6785", true, false, 200},
		{"rebind.attacker.example:6785", true, false, 403},
		{"rebind.attacker.example:6785", false, true, 200},
	} {
		p := newTestPlugin(func(c *config) {
			c.insecure = tc.insecure
			if tc.token {
				c.token = "s3cret"
			}
		})
		req := httptest.NewRequest("GET", "/status", nil)
		req.Host = tc.host
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		if w.Code != tc.code {
			t.Errorf("Host %q (insecure %v, token %v): %d, want %d", tc.host, tc.insecure, tc.token, w.Code, tc.code)
		}
	}
}
