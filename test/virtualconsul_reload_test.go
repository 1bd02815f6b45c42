package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVirtualConsulReloadCarryMoved: during an outage (the table file
// gone, no snapshot) a reload that moves the block to another port and
// adds a zone keeps answering from the table the old block served: the
// carry follows the source, not the block's keys.
func TestVirtualConsulReloadCarryMoved(t *testing.T) {
	consul := startConsulStandIn(t)
	noSnapshot := strings.Replace(vcCorefile, "        snapshot vc-snapshot.json\n", "", 1)
	s := Start(t, noSnapshot, Options{
		Files: map[string]string{"table.json": vcTable(demoVC)},
		Ports: map[int]int{5399: consul.Port(1053)},
	})
	wantShort(t, s.DNS(), "web.virtual.consul", "A", "240.0.0.1")
	if err := os.Remove(filepath.Join(s.Dir, "table.json")); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(s.Log(), "Source file failing") {
			return "the source has not noticed the table file is gone"
		}
		return ""
	})
	// Another port, another zone list; the same source.
	port := freePort(t)
	old := ":" + strconv.Itoa(s.Port(1053))
	moved := strings.ReplaceAll(s.Corefile, old, ":"+strconv.Itoa(port))
	moved = strings.Replace(moved, "virtualconsul consul. consul-alt. {", "virtualconsul consul. consul-alt. mesh. {", 1)
	moved = strings.Replace(moved, "consul-alt.:"+strconv.Itoa(port)+" {", "consul-alt.:"+strconv.Itoa(port)+" mesh.:"+strconv.Itoa(port)+" {", 1)
	if moved == s.Corefile || !strings.Contains(moved, "mesh.:") {
		t.Fatalf("could not move the block:\n%s", moved)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "Corefile.e2e"), []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGUSR1)
	waitReloaded(t, s)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	wantShort(t, addr, "web.virtual.consul", "A", "240.0.0.1")
	wantShort(t, addr, "web.virtual.mesh", "A", "240.0.0.1")
	wantShort(t, addr, "v6.virtual.consul", "AAAA", "fd00::6")
	if !strings.Contains(s.Log(), "Carried 7 entries across the reload") {
		t.Errorf("no carry log line:\n%s", s.Log())
	}
	if s.Exited() {
		t.Fatal("meshdns exited after SIGUSR1")
	}
}
