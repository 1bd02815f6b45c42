package virtualconsul

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/pending"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

const pluginName = "virtualconsul"

var log = clog.NewWithPlugin(pluginName)

func init() { plugin.Register(pluginName, setup) }

func setup(c *caddy.Controller) error {
	v, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	// see plugin/pkg/pending for a reload that fails after this instance
	// started, and plugin/pkg/carry for the table handed across a reload
	c.OnStartup(func() error {
		err := v.start()
		pending.Started(func() { _ = v.stop() })
		return err
	})
	c.OnRestart(func() error {
		pending.Begin()
		return v.handOver()
	})
	c.OnRestartFailed(func() error {
		pending.Failed()
		return v.keep()
	})
	c.OnShutdown(func() error {
		carried.Drop(v.carryKey) // what a new instance did not take
		return v.stop()
	})
	carried.Want(v.carryKey) // see carry.go
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		v.Next = next
		return v
	})
	return nil
}

// defaultTTL is the answers' TTL without a ttl line. The namespace,
// partition and datacenter default to Consul's (table.DefaultNamespace, …).
const defaultTTL = 5 * time.Second

// parse reads the virtualconsul directive into a plugin with no side
// effects: nothing is read and no goroutine starts until OnStartup.
func parse(c *caddy.Controller) (*VirtualConsul, error) {
	v := &VirtualConsul{
		ns: table.DefaultNamespace, ap: table.DefaultPartition, dc: table.DefaultDatacenter,
		ttl: uint32(defaultTTL / time.Second), emptyGrace: persist.DefaultEmptyGrace,
	}
	var zones []string
	for i := 0; c.Next(); i++ {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), []string{"consul."})
		if err := parseBlock(c, v); err != nil {
			return nil, err
		}
	}
	v.metricZone = zones[0]
	// The server block's keys (zones and ports) tell apart two blocks that
	// serve the same zones on different ports.
	v.carryKey = pluginName + " " + strings.Join(c.ServerBlockKeys, " ") + " " + strings.Join(zones, " ")
	v.servers = conf.Servers(c)
	if v.remote != nil {
		v.remote.OnFailing = gauges.Of(sourceFailing, v.servers, v.metricZone, "envoy").SetBool
	}
	for _, z := range zones {
		v.zones = append(v.zones, soa.For(z))
	}
	sort.SliceStable(v.zones, func(i, j int) bool { return len(v.zones[i].Zone) > len(v.zones[j].Zone) })
	return v, nil
}

// parseBlock reads the block's lines into v and checks that they fit
// together.
func parseBlock(c *caddy.Controller, v *VirtualConsul) error {
	seen := map[string]bool{}
	for c.NextBlock() {
		opt := c.Val()
		if seen[opt] {
			return c.Errf("%s given twice", opt)
		}
		seen[opt] = true
		if err := parseOption(c, v, opt, c.RemainingArgs()); err != nil {
			return err
		}
	}
	if seen["empty_grace"] && v.snapshot == "" {
		return c.Err("empty_grace needs snapshot")
	}
	if v.src == nil && v.snapshot == "" && v.remote == nil {
		return c.Err("virtualconsul needs a source or a snapshot")
	}
	if v.remote != nil && (v.snapshot != "" || v.authoritative) {
		return c.Err("source envoy keeps no table: snapshot and authoritative do not apply")
	}
	return nil
}

// parseOption reads one line of the block.
func parseOption(c *caddy.Controller, v *VirtualConsul, opt string, args []string) error {
	if opt == "source" {
		return parseSource(c, v, args)
	}
	if opt == "authoritative" {
		if len(args) != 0 {
			return c.ArgErr()
		}
		v.authoritative = true
		return nil
	}
	if len(args) != 1 {
		if _, known := oneArgOptions[opt]; known {
			return c.ArgErr()
		}
		return c.Errf("unknown property %q", opt)
	}
	set, known := oneArgOptions[opt]
	if !known {
		return c.Errf("unknown property %q", opt)
	}
	return set(c, v, args[0])
}

// parseSource reads `source TYPE ARGS…`.
func parseSource(c *caddy.Controller, v *VirtualConsul, args []string) error {
	if len(args) == 0 {
		return c.ArgErr()
	}
	var err error
	if args[0] == "envoy" {
		v.remote, err = source.NewEnvoy(c, args[1:]) // no table to sync: the handler asks the listener
	} else if src, known, serr := source.New(c, args[0], args[1:]); known {
		v.src, err = src, serr
	} else {
		return c.Errf("unknown source type %q", args[0])
	}
	if err != nil {
		return c.Errf("source %s: %v", args[0], err)
	}
	return nil
}

// oneArgOptions are the block's lines of one argument, each with what it
// sets.
var oneArgOptions = map[string]func(c *caddy.Controller, v *VirtualConsul, a string) error{
	"snapshot": func(c *caddy.Controller, v *VirtualConsul, a string) error {
		v.snapshot = conf.Path(c, a)
		if st, err := os.Stat(filepath.Dir(v.snapshot)); err != nil || !st.IsDir() {
			return c.Errf("snapshot directory %q does not exist", filepath.Dir(v.snapshot))
		}
		return nil
	},
	"empty_grace": func(c *caddy.Controller, v *VirtualConsul, a string) error {
		d, err := time.ParseDuration(a)
		if err != nil || d < 0 {
			return c.Errf("bad empty_grace %q: want a duration, 0 to write an empty table at once", a)
		}
		v.emptyGrace = d
		return nil
	},
	"namespace":  identity("namespace", func(v *VirtualConsul, a string) { v.ns = a }),
	"partition":  identity("partition", func(v *VirtualConsul, a string) { v.ap = a }),
	"datacenter": identity("datacenter", func(v *VirtualConsul, a string) { v.dc, v.dcSet = a, true }),
	"ttl": func(c *caddy.Controller, v *VirtualConsul, a string) error {
		ttl, err := conf.ParseTTL(a)
		if err != nil {
			return c.Errf("ttl: %v", err)
		}
		v.ttl = ttl
		return nil
	},
}

// identity checks a namespace, partition or datacenter name before set.
func identity(opt string, set func(v *VirtualConsul, a string)) func(c *caddy.Controller, v *VirtualConsul, a string) error {
	return func(c *caddy.Controller, v *VirtualConsul, a string) error {
		if !table.ValidIdentity(a) {
			return c.Errf("%s: invalid name %q (want 1-63 of a-z 0-9 - _)", opt, a)
		}
		set(v, a)
		return nil
	}
}
