package test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/procstatus"
)

const startpagesCorefile = `.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    whoami
}
`

// TestStartupPagesReleased: after start-up and after every reload meshdns
// gives back the executable pages only start-up used (internal/startpages),
// its resident file-backed memory falls well below that of the same
// binary told to keep them, and it goes on answering.
func TestStartupPagesReleased(t *testing.T) {
	kept := Start(t, startpagesCorefile, Options{Env: []string{"MESHDNS_KEEP_STARTUP_PAGES=1"}})
	released := Start(t, startpagesCorefile)
	const line = "released start-up pages of the executable"
	if strings.Contains(kept.Log(), line) {
		t.Errorf("MESHDNS_KEEP_STARTUP_PAGES=1 released the pages:\n%s", kept.Log())
	}
	if !strings.Contains(released.Log(), line) {
		t.Fatalf("no release logged:\n%s", released.Log())
	}
	for _, s := range []*Server{kept, released} {
		if m := Query(t, s.DNS(), "example.org.", dns.TypeA, "udp"); m.Rcode != dns.RcodeSuccess || len(m.Extra) == 0 {
			t.Fatalf("whoami: %v", m)
		}
	}
	k, r := rssFileKiB(t, kept.PID()), rssFileKiB(t, released.PID())
	t.Logf("resident file-backed memory: kept %d KiB, released %d KiB", k, r)
	if r*2 > k {
		t.Errorf("released process holds %d KiB of file-backed pages, the one keeping them %d KiB: want less than half", r, k)
	}

	released.Signal(syscall.SIGUSR1)
	Eventually(t, 10*time.Second, func() string {
		if n := strings.Count(released.Log(), "Reloading complete"); n < 1 {
			return "no reload yet"
		}
		if n := strings.Count(released.Log(), line); n < 2 {
			return "the reload released nothing"
		}
		return ""
	})
	if m := Query(t, released.DNS(), "example.org.", dns.TypeA, "tcp"); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("after the reload: %v", m)
	}
}

// TestStartupPagesReloadPlugin: a restart through the stock reload plugin
// (which, unlike SIGUSR1, keeps caddy's event hooks) releases again and
// does not trip over the hook that is still registered.
func TestStartupPagesReloadPlugin(t *testing.T) {
	cf := strings.Replace(startpagesCorefile, "    whoami\n", "    whoami\n    reload 2s 1s\n", 1)
	s := Start(t, cf)
	const line = "released start-up pages of the executable"
	// a changed Corefile (same ports) is what the reload plugin acts on
	changed := strings.Replace(s.Corefile, "    whoami\n", "    whoami\n    errors\n", 1)
	if err := os.WriteFile(s.Dir+"/Corefile.e2e", []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 15*time.Second, func() string {
		if strings.Count(s.Log(), "Reloading complete") < 1 {
			return "no reload yet"
		}
		if strings.Count(s.Log(), line) < 2 {
			return "the reload released nothing"
		}
		return ""
	})
	if s.Exited() {
		t.Fatalf("meshdns exited:\n%s", s.Log())
	}
	if m := Query(t, s.DNS(), "example.org.", dns.TypeA, "udp"); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("after the reload: %v", m)
	}
}

func rssFileKiB(t *testing.T, pid int) int64 {
	t.Helper()
	kib, err := procstatus.KiB(pid, "RssFile")
	if err != nil {
		t.Fatal(err)
	}
	return kib
}
