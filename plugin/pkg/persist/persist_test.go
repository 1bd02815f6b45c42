package persist

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReadReplace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	if b, err := ReadFile(p); err != nil || b != nil {
		t.Fatalf("missing snapshot: got %q, %v; want nil, nil", b, err)
	}
	for _, content := range []string{"first", "second, longer content"} {
		if err := WriteFile(p, []byte(content)); err != nil {
			t.Fatal(err)
		}
		b, err := ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("ReadFile = %q, %v; want %q", b, err, content)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestWriteFileMissingDir(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no", "such", "dir", "snap.json")
	if err := WriteFile(p, []byte("x")); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
}

func TestWriteStreamFailureKeepsOld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.json")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	err := WriteStream(path, func(w io.Writer) error {
		w.Write([]byte("half of the new"))
		return errors.New("source went away")
	})
	if err == nil {
		t.Fatal("a failed write reported success")
	}
	if b, _ := ReadFile(path); string(b) != "old" {
		t.Errorf("after a failed write the snapshot holds %q, want the old content", b)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".snap.json.tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}
