package mdnsfallback

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// Item 6 of issue 29: nothing lost.

// TestAPIAnswersOnceOnDisk: with snapshot, the 200 of a PUT or DELETE
// comes once the change is in the snapshot file (read right after the
// answer); a snapshot that cannot be written answers 503 (the change
// serves, and the write is retried).
func TestAPIAnswersOnceOnDisk(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "records.json")
	p := newTestPlugin(func(c *config) { c.snapshot, c.api = snap, "" })
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	defer p.shutdown()
	for i, ip := range []string{"10.32.0.1", "10.32.0.2", "10.32.0.3"} {
		if w := apiDo(p, "PUT", "/name/c"+ip+"/"+ip, form, "domain=web.weave.local", ""); w.Code != 200 {
			t.Fatalf("PUT %d: %d %s", i, w.Code, w.Body)
		}
		if b, _ := os.ReadFile(snap); !strings.Contains(string(b), ip) {
			t.Fatalf("PUT %d answered 200 before %s was on disk:\n%s", i, ip, b)
		}
	}
	if w := apiDo(p, "DELETE", "/name/c10.32.0.2", "", "", ""); w.Code != 200 {
		t.Fatalf("DELETE: %d %s", w.Code, w.Body)
	}
	if b, _ := os.ReadFile(snap); strings.Contains(string(b), "10.32.0.2") {
		t.Fatalf("DELETE answered 200 before it was on disk:\n%s", b)
	}

	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := newTestPlugin(func(c *config) { c.snapshot, c.api = filepath.Join(blocked, "records.json"), "" })
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	defer q.shutdown()
	if w := apiDo(q, "PUT", "/name/c/10.32.0.9", form, "domain=web.weave.local", ""); w.Code != 503 || q.db.Len() != 1 {
		t.Fatalf("PUT with a snapshot that cannot be written: %d %s, %d records", w.Code, w.Body, q.db.Len())
	}
}

// TestReloadZoneTypoKeepsRecords: a reload whose zones no longer hold the
// records (a typo) keeps them aside — in the snapshot too — and a reload
// that fixes the zones serves them again; so does a restart from the
// snapshot written meanwhile.
func TestReloadZoneTypoKeepsRecords(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "records.json")
	mk := func(zone string) *MDNSFallback {
		return newTestPlugin(func(c *config) { c.zones, c.snapshot, c.api, c.block = []string{zone}, snap, "", "typo" })
	}
	p := mk("weave.local.")
	if err := p.onStartup(); err != nil {
		t.Fatal(err)
	}
	put(t, p, "c1", "10.32.0.1", "web.weave.local", 0)
	p.onRestart()
	q := mk("weave.lcoal.")
	if err := q.onStartup(); err != nil {
		t.Fatal(err)
	}
	p.shutdown()
	if q.db.Len() != 0 || len(q.db.Aside()) != 1 {
		t.Fatalf("after the typo: %d served, %d aside", q.db.Len(), len(q.db.Aside()))
	}
	q.shutdown() // a restart: the snapshot keeps what is aside
	r := mk("weave.local.")
	if err := r.onStartup(); err != nil {
		t.Fatal(err)
	}
	defer r.shutdown()
	if r.db.Lookup("web.weave.local.") == nil {
		t.Fatalf("zones fixed, restarted from the snapshot: %v", r.db.Records(""))
	}
}

// TestFallthroughWhenBudgetRefuses: a query the budget holds back goes to
// the next plugin under fallthrough (SERVFAIL without).
func TestFallthroughWhenBudgetRefuses(t *testing.T) {
	for _, through := range []bool{false, true} {
		p := newTestPlugin(func(c *config) {
			c.queryRate, c.timeout = 1, 20*time.Millisecond
			if through {
				c.fall = fall.Root
			}
		})
		testResponder(p, nil)
		ask := func(name string) int {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			code, _ := p.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
			return code
		}
		ask("one.weave.local.") // spends the budget of 1
		want := dns.RcodeServerFailure
		if through {
			want = dns.RcodeRefused // the test's next plugin
		}
		if code := ask("two.weave.local."); code != want {
			t.Errorf("fallthrough %v: a query the budget refused answered rcode %d, want %d", through, code, want)
		}
	}
}
