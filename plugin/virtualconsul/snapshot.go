package virtualconsul

import (
	"bytes"
	"fmt"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// writeSnapshot persists t at path atomically (temp file, fsync, rename), in
// the table file's own JSON shape.
func writeSnapshot(path string, t *Table) error {
	var buf bytes.Buffer
	buf.Grow(t.Len() * 96)
	if err := t.WriteJSON(&buf); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	return persist.WriteFile(path, buf.Bytes())
}

// readSnapshot loads the table persisted at path. A missing snapshot is
// (nil, nil); a corrupt one is an error, which the caller logs and ignores.
func readSnapshot(path string) (*Table, error) {
	data, err := persist.ReadFile(path)
	if err != nil || data == nil {
		return nil, err
	}
	b := NewBuilder(0)
	if err := Decode(bytes.NewReader(data), b); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return b.Table(), nil
}
