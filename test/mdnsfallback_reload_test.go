package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// reloadBase is the stanza the reloads change one line of; LINE marks
// where a variant adds its line, API the api line a variant may replace.
const reloadBase = `weave.local.:1053 {
    bind 127.0.0.1
    mdnsfallback weave.local. {
        API
        reverse 10.32.0.0/12
LINE    }
}
`

// TestMdnsfallbackReloadEveryLine: records put through the API survive a
// reload (SIGUSR1) per changed Corefile line — the api address, a
// token_file, ttl, timeout, cache, negative_ttl, query_rate, max_records,
// reverse, a snapshot, fallthrough, a second zone — with no snapshot to
// fall back on until one is configured: every reload keeps every record.
func TestMdnsfallbackReloadEveryLine(t *testing.T) {
	RequireTool(t, "curl", "curl")
	apiLine := "api 127.0.0.1:6785"
	cf := func(api, line string) string {
		s := strings.Replace(reloadBase, "API", api, 1)
		if line != "" {
			line = "        " + line + "\n"
		}
		return strings.Replace(s, "LINE", line, 1)
	}
	s := Start(t, cf(apiLine, ""), Options{Files: map[string]string{"token": "s3cret\n"}})
	api := "http://" + s.Addr(6785)
	names := map[string]string{"web.weave.local.": "10.32.0.1", "db.weave.local.": "10.32.0.2", "v6.weave.local.": "fd00::3"}
	for n, ip := range names {
		if code, body := httpDo(t, "PUT", api+"/name/c-"+strings.Split(n, ".")[0]+"/"+ip+"?fqdn="+n, "", "", ""); code != 200 {
			t.Fatalf("PUT %s: %d %s", n, code, body)
		}
	}
	variants := []struct{ name, api, line string }{
		{"api address", "api 127.0.0.1:6786", ""},
		{"token_file", "api 127.0.0.1:6786", "token_file token"},
		{"ttl", apiLine, "ttl 7s"},
		{"timeout", apiLine, "timeout 100ms"},
		{"cache", apiLine, "cache 16"},
		{"negative_ttl", apiLine, "negative_ttl 1s"},
		{"query_rate", apiLine, "query_rate 5"},
		{"max_records", apiLine, "max_records 10"},
		{"reverse", apiLine, "reverse 10.0.0.0/8"},
		{"snapshot", apiLine, "snapshot records.json"},
		{"fallthrough", apiLine, "fallthrough"},
		{"api off", "api off", ""},
		{"back to the first", apiLine, ""},
	}
	for i, v := range variants {
		corefile := cf(v.api, v.line)
		if v.name == "back to the first" {
			corefile = strings.Replace(corefile, "mdnsfallback weave.local. {", "mdnsfallback weave.local. example.internal. {", 1)
		}
		if err := os.WriteFile(filepath.Join(s.Dir, "Corefile.e2e"), []byte(s.rewrite(corefile)), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if n := strings.Count(s.Log(), "Reloading complete"); n < i+1 {
				return fmt.Sprintf("reload %d (%s) not complete", i+1, v.name)
			}
			return ""
		})
		for n, ip := range names {
			qt := dns.TypeA
			if strings.Contains(ip, ":") {
				qt = dns.TypeAAAA
			}
			if got := Rdata(Query(t, s.DNS(), n, qt, "udp")); strings.Join(got, ",") != ip {
				t.Fatalf("after the reload that changed %s: %s = %v, want %s", v.name, n, got, ip)
			}
		}
	}
	if strings.Contains(s.Log(), "[ERROR]") {
		t.Fatalf("errors in the log:\n%s", s.Log())
	}
}
