package virtualconsul

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/plugin/pkg/soa"
)

func TestSnapshotCorrupt(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap.json")
	if tbl, err := readSnapshot(snap); tbl != nil || err != nil {
		t.Fatalf("missing snapshot: %v, %v", tbl, err)
	}
	if err := os.WriteFile(snap, []byte(`[{"name": "x"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readSnapshot(snap); err == nil || !strings.Contains(err.Error(), "snapshot "+snap) {
		t.Fatalf("corrupt snapshot error = %v", err)
	}
	// The plugin logs it, ignores it and is not ready.
	v := &VirtualConsul{snapshot: snap, zones: []soa.Names{soa.For("consul.")}, metricZone: "consul."}
	if err := v.start(); err != nil {
		t.Fatal(err)
	}
	if v.Ready() {
		t.Fatal("ready from a corrupt snapshot")
	}
}
