package inspect

import (
	"io"
	"net/url"
	"sync"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/pkg/pending"
)

// A Lister is one plugin instance (one server block's) whose live table
// inspect lists. A plugin registers its instances at start and withdraws
// them at shutdown (Register), or its handler implements Lister and is
// found in the blocks that hold an inspect directive; inspect imports none
// of them. A Lister must be comparable (a pointer).
type Lister interface {
	// List writes the instance's listing to w as one JSON object, streamed
	// (never the whole listing in memory), from one immutable table and
	// stating that table's generation. q holds the request's query (for
	// filters a plugin offers, such as ?name=); a plugin answers an
	// unknown filter with *BadRequest.
	List(w io.Writer, q url.Values) error
}

// BadRequest is a Lister's refusal of a request's query, before it wrote
// anything.
type BadRequest struct{ Msg string }

func (e *BadRequest) Error() string { return e.Msg }

// registry holds the registered instances by plugin name, in the order
// they registered.
var registry = struct {
	sync.Mutex
	m map[string][]*registered
}{m: map[string][]*registered{}}

type registered struct{ l Lister }

// Register lists l under /<plugin> until the returned function withdraws
// it (call it once, at the instance's shutdown).
func Register(plugin string, l Lister) (withdraw func()) {
	r := &registered{l}
	registry.Lock()
	registry.m[plugin] = append(registry.m[plugin], r)
	registry.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			registry.Lock()
			defer registry.Unlock()
			rs := registry.m[plugin]
			for i, x := range rs {
				if x == r {
					registry.m[plugin] = append(rs[:i:i], rs[i+1:]...)
					break
				}
			}
		})
	}
}

// listers returns the instances registered under plugin now, each once
// (an instance may register itself and be found among its block's
// handlers too).
func listers(plugin string) []Lister {
	registry.Lock()
	defer registry.Unlock()
	out := make([]Lister, 0, len(registry.m[plugin]))
	for _, r := range registry.m[plugin] {
		dup := false
		for _, l := range out {
			dup = dup || l == r.l
		}
		if !dup {
			out = append(out, r.l)
		}
	}
	return out
}

// Listed registers l under plugin from its instance's start-up to its
// shutdown, or to the failure of the reload that started it (through
// plugin/pkg/pending), so that an inspect directive in any server block
// lists it. A plugin calls it from its setup with its block's controller.
func Listed(c *caddy.Controller, plugin string, l Lister) {
	var withdraw func() // set at start-up, run once (Register's)
	c.OnStartup(func() error {
		withdraw = Register(plugin, l)
		pending.Started(withdraw)
		return nil
	})
	c.OnShutdown(func() error {
		if withdraw != nil {
			withdraw()
		}
		return nil
	})
}
