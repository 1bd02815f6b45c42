package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// collect runs one sync of f and returns what it reported.
func collect(f *fileSource) []Sync {
	var got []Sync
	f.sync(func(s Sync) { got = append(got, s) })
	return got
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	f := &fileSource{path: path, interval: time.Hour}

	// Missing file: an error, every time.
	for i := 0; i < 2; i++ {
		got := collect(f)
		if len(got) != 1 || got[0].Result != SyncError || !strings.Contains(got[0].Err.Error(), "table file "+path) {
			t.Fatalf("missing file: %+v", got)
		}
	}

	writeTable(t, path, map[string]string{webKey: "240.0.0.1"})
	got := collect(f)
	if len(got) != 1 || got[0].Result != SyncOK || got[0].Table.Len() != 1 {
		t.Fatalf("first read: %+v", got)
	}
	// Same stat: not even read.
	if got := collect(f); len(got) != 0 {
		t.Fatalf("unchanged stat: %+v", got)
	}
	// New stat, same content: unchanged, nothing rebuilt.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if got := collect(f); len(got) != 1 || got[0].Result != SyncUnchanged || got[0].Table != nil {
		t.Fatalf("touched file: %+v", got)
	}
	// A bad entry rejects the whole file, naming file and entry.
	bad := `[{"name": "` + webKey + `", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}},
	 {"name": "` + apiKey + `", "endpoint": {"address_list": {"address": ["not-an-ip"]}}}]`
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	got = collect(f)
	if len(got) != 1 || got[0].Result != SyncRejected {
		t.Fatalf("bad file: %+v", got)
	}
	want := "table file " + path + `: entry 2 ("` + apiKey + `"): bad address "not-an-ip"`
	if got[0].Err.Error() != want {
		t.Fatalf("error = %q, want %q", got[0].Err, want)
	}
	// The same bad content again is not reported again.
	evenLater := later.Add(time.Minute)
	if err := os.Chtimes(path, evenLater, evenLater); err != nil {
		t.Fatal(err)
	}
	if got := collect(f); len(got) != 0 {
		t.Fatalf("same bad content: %+v", got)
	}
	// A fixed file builds again.
	writeTable(t, path, map[string]string{webKey: "240.0.0.7", apiKey: "240.0.0.8"})
	if got := collect(f); len(got) != 1 || got[0].Result != SyncOK || got[0].Table.Len() != 2 {
		t.Fatalf("fixed file: %+v", got)
	}
}
