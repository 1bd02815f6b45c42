// Package persist writes and reads the on-disk snapshots that let a plugin
// answer at once after a restart during a control-plane outage.
//
// Invariant: a reader never sees a partly written snapshot. WriteFile writes a
// temporary file in the same directory, fsyncs it, renames it over the target
// and fsyncs the directory, so the target is always either the old or the new
// complete content.
package persist

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile atomically replaces path with data (mode 0644).
func WriteFile(path string, data []byte) error {
	return WriteStream(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteStream atomically replaces path (mode 0644) with what write writes,
// through a buffer, so that a large snapshot never has to be held in memory
// whole. When write fails the target keeps its old content.
func WriteStream(path string, write func(io.Writer) error) error {
	return writeStream(path, write, os.Rename)
}

// writeStream is WriteStream with the final step, the rename of the
// complete temporary file over path, done by rename (a Writer's checks that
// its state is still the newest, in one step with the rename).
func writeStream(path string, write func(io.Writer) error, rename func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := write(bw); err != nil {
		f.Close()
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := rename(tmp, path); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: the rename itself is already atomic
		d.Close()
	}
	return nil
}

// ReadFile returns the snapshot at path; a missing file is (nil, nil), so a
// first start without a snapshot is not an error.
func ReadFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return b, nil
}
