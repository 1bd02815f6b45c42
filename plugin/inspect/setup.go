package inspect

import (
	"fmt"
	"net"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/pkg/conf"
)

const pluginName = "inspect"

var log = clog.NewWithPlugin(pluginName)

func init() { plugin.Register(pluginName, setup) }

// defaultAddr is where inspect listens without ADDRESS: loopback only.
const defaultAddr = "127.0.0.1:8182"

func setup(c *caddy.Controller) error {
	in, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	// A listener of its own, as health and ready: not a DNS plugin. The
	// handlers of its own block that are Listers are listed too, for a
	// plugin that does not register itself.
	cfg := dnsserver.GetConfig(c)
	var withdraw []func()
	discover := func() {
		for _, h := range cfg.Handlers() {
			if l, ok := h.(Lister); ok {
				withdraw = append(withdraw, Register(h.Name(), l))
			}
		}
	}
	forget := func() {
		for _, w := range withdraw {
			w()
		}
		withdraw = nil
	}
	c.OnStartup(func() error { discover(); return in.start() })
	c.OnRestart(func() error { forget(); return in.stop() })
	c.OnRestartFailed(func() error { discover(); return in.start() })
	c.OnFinalShutdown(func() error { forget(); return in.stop() })
	return nil
}

// parse reads
//
//	inspect [ADDRESS] {
//	    token_file PATH
//	}
//
// with no side effects. An address beyond loopback needs token_file.
func parse(c *caddy.Controller) (*Inspect, error) {
	in := &Inspect{addr: defaultAddr}
	for i := 0; c.Next(); i++ {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		switch args := c.RemainingArgs(); len(args) {
		case 0:
		case 1:
			if _, _, err := net.SplitHostPort(args[0]); err != nil {
				return nil, c.Errf("bad address %q: %v", args[0], err)
			}
			in.addr = args[0]
		default:
			return nil, c.ArgErr()
		}
		for c.NextBlock() {
			switch c.Val() {
			case "token_file":
				args := c.RemainingArgs()
				if len(args) != 1 {
					return nil, c.ArgErr()
				}
				in.tokenFile = conf.Path(c, args[0])
			default:
				return nil, c.Errf("unknown property %q", c.Val())
			}
		}
	}
	if in.tokenFile == "" && !conf.LoopbackOnly(in.addr) {
		return nil, fmt.Errorf("%s:%d - Error during parsing: inspect %s lists every table beyond loopback: set token_file, or bind it to 127.0.0.1",
			c.File(), c.Line(), in.addr)
	}
	return in, nil
}
