package source

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/coredns/caddy"
	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// defaultInterval is how often the file source checks its file.
const defaultInterval = 5 * time.Second

func init() { sourceTypes["file"] = newFileSource }

// newFileSource reads "source file PATH [INTERVAL]".
func newFileSource(c *caddy.Controller, args []string) (Source, error) {
	if len(args) < 1 || len(args) > 2 {
		return nil, errors.New("want PATH [INTERVAL]")
	}
	f := &fileSource{path: conf.Path(c, args[0]), interval: defaultInterval}
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("invalid interval %q", args[1])
		}
		f.interval = d
	}
	return f, nil
}

// fileSource reads a JSON table file (see Decode) and re-reads it when it
// changes: every interval it stats the file, and only a changed stat
// (size, mtime, inode) makes it hash the content; only a changed hash makes
// it decode and build a new table.
type fileSource struct {
	path     string
	interval time.Duration

	// Run's goroutine only:
	stamp fileStamp
	seen  bool     // stamp is valid
	good  [32]byte // hash of the content of the last table built
	bad   [32]byte // hash of the content last rejected
	built bool     // good is valid
	nay   bool     // bad is valid
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

func (f *fileSource) Name() string { return "file" }

func (f *fileSource) Key() string { return "file " + f.path }

func (f *fileSource) Run(ctx context.Context, report func(Sync)) {
	f.sync(report)
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.sync(report)
		}
	}
}

// sync checks the file once and reports, unless its stat is unchanged.
func (f *fileSource) sync(report func(Sync)) {
	st, err := os.Stat(f.path)
	if err != nil {
		f.seen = false
		report(Sync{Result: SyncError, Err: fmt.Errorf("table file %s: %w", f.path, err)})
		return
	}
	stamp := fileStamp{size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		stamp.ino = sys.Ino
	}
	if f.seen && stamp == f.stamp {
		return
	}
	s, fresh := f.read()
	if s.Result != SyncError {
		f.stamp, f.seen = stamp, true
	}
	if fresh {
		report(s)
	}
}

// read hashes the file and, when the hash changed, decodes it. fresh is
// false for content that was already rejected (not reported again).
func (f *fileSource) read() (s Sync, fresh bool) {
	fh, err := os.Open(f.path)
	if err != nil {
		return Sync{Result: SyncError, Err: fmt.Errorf("table file %s: %w", f.path, err)}, true
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return Sync{Result: SyncError, Err: fmt.Errorf("table file %s: %w", f.path, err)}, true
	}
	switch sum := sumOf(h); {
	case f.built && sum == f.good:
		return Sync{Result: SyncUnchanged}, true
	case f.nay && sum == f.bad:
		return Sync{}, false
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		return Sync{Result: SyncError, Err: fmt.Errorf("table file %s: %w", f.path, err)}, true
	}
	// Hash what is decoded, in case the file changed since the first pass.
	h.Reset()
	b := table.NewBuilder(0)
	if err := table.Decode(io.TeeReader(fh, h), b); err != nil {
		_, _ = io.Copy(h, fh) // hash the rest, to know this content again
		f.bad, f.nay = sumOf(h), true
		return Sync{Result: SyncRejected, Err: fmt.Errorf("table file %s: %w", f.path, err)}, true
	}
	f.good, f.built = sumOf(h), true
	return Sync{Result: SyncOK, Table: b.Table()}, true
}

func sumOf(h hash.Hash) (s [32]byte) {
	copy(s[:], h.Sum(nil))
	return s
}
