package mdnsfallback

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	tests := []struct {
		input string
		err   string // substring of the error; "" = no error
		check func(t *testing.T, c config)
	}{
		{`mdnsfallback`, "", func(t *testing.T, c config) {
			if c.zones[0] != "weave.local." || c.api != defaultAPI || c.timeout != defaultTimeout || c.ttl != 30 ||
				c.cacheSize != 4096 || c.negativeTTL != 5*time.Second || c.maxRecords != 100000 || len(c.interfaces) != 0 {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{`mdnsfallback Example.COM. other.test {
			api 127.0.0.1:7000
			token_file ` + tok + `
			interface eth0 weave
			interface eth1
			timeout 100ms
			ttl 1m
			cache 10
			negative_ttl 0s
			reverse 10.32.0.0/12 fd00::/8
			max_records 5
			snapshot /tmp/x.json
			fallthrough
		}`, "", func(t *testing.T, c config) {
			if strings.Join(c.zones, " ") != "example.com. other.test." || c.api != "127.0.0.1:7000" || c.tokenFile != tok || c.token != "" ||
				strings.Join(c.interfaces, " ") != "eth0 weave eth1" || c.timeout != 100*time.Millisecond || c.ttl != 60 ||
				c.cacheSize != 10 || c.negativeTTL != 0 || c.maxRecords != 5 || c.snapshot != "/tmp/x.json" ||
				len(c.reverse) != 2 || c.reverse[0] != netip.MustParsePrefix("10.32.0.0/12") || !c.fall.Through("a.example.com.") {
				t.Errorf("parsed: %+v", c)
			}
		}},
		{"mdnsfallback {\napi off\n}", "", func(t *testing.T, c config) {
			if c.api != "" {
				t.Errorf("api off: %q", c.api)
			}
		}},
		{"mdnsfallback {\napi nohostport\n}", `api: "nohostport" is not HOST:PORT or off`, nil},
		{"mdnsfallback {\nttl 30\napi :6785\n}", "Testfile:3 - Error during parsing: api :6785 accepts writes from beyond loopback: set token_file", nil},
		{"mdnsfallback {\napi 0.0.0.0:6785\n}", "Testfile:2 - Error during parsing: api 0.0.0.0:6785 accepts writes from beyond loopback", nil},
		{"mdnsfallback {\napi [::]:6785\n}", "beyond loopback", nil},
		{"mdnsfallback {\napi 10.32.0.1:6785\n}", "beyond loopback", nil},
		{"mdnsfallback {\napi dns.example:6785\n}", "beyond loopback", nil},
		{"mdnsfallback {\napi :6785\ntoken_file /run/token\n}", "", nil},
		{"mdnsfallback {\napi :6785\ninsecure\n}", "", func(t *testing.T, c config) {
			if !c.insecure || c.api != ":6785" {
				t.Errorf("insecure api: %+v", c)
			}
		}},
		{"mdnsfallback {\napi localhost:6785\n}", "", nil},
		{"mdnsfallback {\napi [::1]:6785\n}", "", nil},
		{"mdnsfallback {\napi 127.0.0.2:6785\n}", "", nil},
		{"mdnsfallback {\ninsecure yes\n}", "Wrong argument count", nil},
		{"mdnsfallback {\napi\n}", "Wrong argument count", nil},
		{"mdnsfallback {\nttl 30\nnegative_ttl 10\n}", "", func(t *testing.T, c config) {
			if c.ttl != 30 || c.negativeTTL != 10*time.Second {
				t.Errorf("plain-second TTLs: ttl %d negative_ttl %v", c.ttl, c.negativeTTL)
			}
		}},
		{"mdnsfallback {\nttl 1.5s\n}", `ttl: invalid TTL "1.5s"`, nil},
		{"mdnsfallback {\nnegative_ttl 3601\n}", "negative_ttl: 3601 is outside", nil},
		{"mdnsfallback {\nttl 0\n}", "ttl: 0 is outside", nil},
		{"mdnsfallback {\ntoken_file " + empty + "\n}", "", nil}, // read at start-up
		{"mdnsfallback {\ninterface\n}", "Wrong argument count", nil},
		{"mdnsfallback {\ninterface weave0 weave0\ninterface weave0\n}", "", func(t *testing.T, c config) {
			if len(c.interfaces) != 1 {
				t.Errorf("an interface named twice: %v", c.interfaces)
			}
		}},
		{"mdnsfallback {\ninterface averyveryverylongname0\n}", `interface: "averyveryverylongname0" is not an interface name`, nil},
		{"mdnsfallback {\ninterface eth0:1\n}", `interface: "eth0:1" is not an interface name`, nil},
		{"mdnsfallback {\ntimeout soon\n}", `timeout: "soon" is not a duration`, nil},
		{"mdnsfallback {\ntimeout 0s\n}", "timeout: 0s is outside", nil},
		{"mdnsfallback {\nttl 0s\n}", "ttl: 0s is outside", nil},
		{"mdnsfallback {\nnegative_ttl 2h\n}", "negative_ttl: 2h is outside", nil},
		{"mdnsfallback {\ncache 0\n}", `cache: "0" is not a number`, nil},
		{"mdnsfallback {\nmax_records lots\n}", `max_records: "lots" is not a number`, nil},
		{"mdnsfallback {\nreverse 10.0.0.0\n}", `reverse: "10.0.0.0" is not a CIDR`, nil},
		{"mdnsfallback {\nreverse\n}", "Wrong argument count", nil},
		{"mdnsfallback {\nsnapshot a b\n}", "Wrong argument count", nil},
		{"mdnsfallback {\nbogus 1\n}", `unknown property "bogus"`, nil},
		{"mdnsfallback\nmdnsfallback", "only once per server block", nil},
	}
	for i, tc := range tests {
		c := caddy.NewTestController("dns", tc.input)
		cfg, err := parse(c)
		if tc.err == "" {
			if err != nil {
				t.Errorf("test %d: unexpected error %v", i, err)
				continue
			}
			if tc.check != nil {
				tc.check(t, cfg)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("test %d: want error containing %q, got %v", i, tc.err, err)
		}
		if err != nil && tc.err != "only once per server block" && !strings.Contains(err.Error(), "Testfile:") {
			t.Errorf("test %d: error %q does not name the file and line", i, err)
		}
	}
}

// TestParseRoot: relative snapshot and token_file paths are taken from the
// server block's root.
func TestParseRoot(t *testing.T) {
	c := caddy.NewTestController("dns", "mdnsfallback {\nsnapshot records.json\ntoken_file secret/token\n}")
	dnsserver.GetConfig(c).Root = "/srv/dns"
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.snapshot != "/srv/dns/records.json" || cfg.tokenFile != "/srv/dns/secret/token" {
		t.Fatalf("root not honoured: snapshot %q token_file %q", cfg.snapshot, cfg.tokenFile)
	}
}

// TestStartupToken: the token file is read at start-up; an unreadable or
// malformed one fails the start with an error that names it.
func TestStartupToken(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	for _, tc := range []struct{ file, err string }{
		{tok, ""},
		{"/nonexistent/token", "token_file: open /nonexistent/token"},
		{empty, "token_file " + empty + ": want one token on one line"},
	} {
		p := newTestPlugin(func(c *config) { c.api = ""; c.tokenFile = tc.file })
		err := p.onStartup()
		p.shutdown()
		if tc.err == "" {
			if err != nil || p.cfg.token != "s3cret" {
				t.Errorf("%s: token %q, err %v", tc.file, p.cfg.token, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "plugin/mdnsfallback") {
			t.Errorf("%s: want error containing %q, got %v", tc.file, tc.err, err)
		}
		if p.Ready() {
			t.Errorf("%s: ready after a failed start", tc.file)
		}
	}
}

func TestSetupRegisters(t *testing.T) {
	c := caddy.NewTestController("dns", "mdnsfallback {\napi off\n}")
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	c = caddy.NewTestController("dns", "mdnsfallback {\nbogus\n}")
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "plugin/mdnsfallback") {
		t.Fatalf("setup error %v does not name the plugin", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("mdnsfallback")
	f.Add("mdnsfallback a.b {\ninterface x\ntimeout 1s\nreverse 10.0.0.0/8\nfallthrough\n}")
	f.Add("mdnsfallback {\ncache -1\nmax_records 0\n}")
	f.Fuzz(func(t *testing.T, s string) {
		if strings.Contains(s, "token_file") || strings.Contains(s, "import") {
			return // no file reads while fuzzing
		}
		_, _ = parse(caddy.NewTestController("dns", s))
	})
}

func TestParseQueryRate(t *testing.T) {
	c := caddy.NewTestController("dns", "mdnsfallback {\nquery_rate 200\n}")
	cfg, err := parse(c)
	if err != nil || cfg.queryRate != 200 {
		t.Fatalf("query_rate 200: %v %d", err, cfg.queryRate)
	}
	cfg, err = parse(caddy.NewTestController("dns", "mdnsfallback"))
	if err != nil || cfg.queryRate != defaultQueryRate {
		t.Fatalf("default query_rate: %v %d", err, cfg.queryRate)
	}
	if _, err := parse(caddy.NewTestController("dns", "mdnsfallback {\nquery_rate 0\n}")); err == nil || !strings.Contains(err.Error(), "query_rate") {
		t.Fatalf("query_rate 0: %v", err)
	}
}
