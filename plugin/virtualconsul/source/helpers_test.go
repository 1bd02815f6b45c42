package source

import (
	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/virtualconsul/internal/tablefix"
)

// The keys of the tests' tables, a table file writer and a lookup.
const (
	webKey = tablefix.WebKey
	apiKey = tablefix.APIKey
)

var (
	writeTable = tablefix.WriteTable
	addrs      = tablefix.Addrs
)

// parsed is what parse read of a virtualconsul block: its source.
type parsed struct {
	src    Source
	remote *Envoy
}

// parse reads the source line of a virtualconsul block as the plugin's
// setup does (the same errors, with the Corefile's file and line), and
// skips its other lines.
func parse(c *caddy.Controller) (*parsed, error) {
	p := &parsed{}
	for c.Next() {
		for c.NextBlock() {
			opt, args := c.Val(), c.RemainingArgs()
			if opt != "source" {
				continue
			}
			if len(args) == 0 {
				return nil, c.ArgErr()
			}
			var err error
			if args[0] == "envoy" {
				p.remote, err = NewEnvoy(c, args[1:])
			} else if src, known, serr := New(c, args[0], args[1:]); known {
				p.src, err = src, serr
			} else {
				return nil, c.Errf("unknown source type %q", args[0])
			}
			if err != nil {
				return nil, c.Errf("source %s: %v", args[0], err)
			}
		}
	}
	return p, nil
}
