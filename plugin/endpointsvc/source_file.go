package endpointsvc

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// contentHash identifies a document's content, so that sources can skip a
// rebuild when it did not change.
type contentHash [sha256.Size]byte

func hashOf(b []byte) contentHash { return sha256.Sum256(b) }

// fileSource reads the state JSON from a file and re-reads it when its
// modification time or size changes; identical content is not rebuilt.
type fileSource struct {
	path     string
	interval time.Duration
	decode   func([]byte) (feed.State, error) // the schema's state document

	// last seen file identity and content (only used by Run's goroutine)
	mtime time.Time
	size  int64
	hash  contentHash
	have  bool
	bad   error // why the file as last seen was rejected
}

func (f *fileSource) Name() string { return "file" }

func (f *fileSource) Key() string { return fmt.Sprintf("file %q", f.path) }

func (f *fileSource) Run(ctx context.Context, s feed.Sink) {
	for {
		f.check(s)
		if !pause.Sleep(ctx, f.interval) {
			return
		}
	}
}

// check reads the file when it changed and reports the result to s.
func (f *fileSource) check(s feed.Sink) {
	fi, err := os.Stat(f.path)
	if err != nil {
		s.Failed(err)
		return
	}
	if f.have && fi.ModTime().Equal(f.mtime) && fi.Size() == f.size {
		if f.bad != nil {
			s.Failed(f.bad)
		} else {
			s.Unchanged()
		}
		return
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		s.Failed(err)
		return
	}
	h := hashOf(b)
	f.mtime, f.size = fi.ModTime(), fi.Size()
	if f.have && h == f.hash {
		f.bad = nil
		s.Unchanged()
		return
	}
	st, err := f.decode(b)
	if err != nil {
		// Keep the identity so a bad file is not parsed again every tick,
		// but not the hash: restoring the old good content must apply.
		f.have, f.hash, f.bad = true, contentHash{}, fmt.Errorf("%s: %w", f.path, err)
		s.Failed(f.bad)
		return
	}
	f.hash, f.have, f.bad = h, true, nil
	s.Update(st)
}
