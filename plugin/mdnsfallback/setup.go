package mdnsfallback

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/mdns"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
	"github.com/meshdns/meshdns/plugin/pkg/carry"
	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pending"

	"github.com/docker/docker/client"
)

const pluginName = "mdnsfallback"

var log = clog.NewWithPlugin(pluginName)

func init() { plugin.Register(pluginName, setup) }

// Defaults of the Corefile stanza.
const (
	defaultZone        = "weave.local."
	defaultAPI         = "127.0.0.1:6785"
	defaultTimeout     = 250 * time.Millisecond
	defaultTTL         = 30 * time.Second
	defaultCache       = 4096
	defaultNegativeTTL = 5 * time.Second
	defaultMaxRecords  = 100000
	defaultQueryRate   = mdns.DefaultQueryRate
)

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	p := newMDNSFallback(cfg)
	// see plugin/pkg/pending for a reload that fails after this instance
	// started, and plugin/pkg/carry for the records handed across a reload
	c.OnStartup(func() error {
		if err := p.onStartup(); err != nil {
			return err
		}
		pending.Started(func() { _ = p.shutdown() })
		return nil
	})
	c.OnRestart(func() error {
		pending.Begin()
		return p.onRestart()
	})
	c.OnRestartFailed(func() error {
		pending.Failed() // frees the sockets this instance takes back
		return p.onRestartFailed()
	})
	c.OnShutdown(func() error {
		carried.Drop(p.carryKey()) // what a new instance did not take
		return p.shutdown()
	})
	c.OnFinalShutdown(p.shutdown)
	inspect.Listed(c, pluginName, p) // inspect's /mdnsfallback (inspect.go)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		p.Next = next
		return p
	})
	return nil
}

// parse reads the stanza; it has no side effects (the token file is read at
// start-up).
func parse(c *caddy.Controller) (config, error) {
	cfg := config{
		servers:     conf.Servers(c),
		api:         defaultAPI,
		timeout:     defaultTimeout,
		ttl:         uint32(defaultTTL / time.Second),
		cacheSize:   defaultCache,
		negativeTTL: defaultNegativeTTL,
		maxRecords:  defaultMaxRecords,
		queryRate:   defaultQueryRate,
	}
	cfg.block = fmt.Sprintf("block %d key %d", c.ServerBlockIndex, c.ServerBlockKeyIndex)
	if sc := dnsserver.GetConfig(c); sc != nil {
		cfg.dnsPort = sc.Port
		if len(sc.ListenHosts) > 0 {
			cfg.dnsHost = sc.ListenHosts[0]
		}
	}
	seen := false
	for c.Next() {
		if seen {
			return cfg, c.Err("mdnsfallback may appear only once per server block")
		}
		seen = true
		args := c.RemainingArgs()
		if len(args) == 0 {
			cfg.zones = []string{defaultZone}
		} else {
			cfg.zones = plugin.OriginsFromArgsOrServerBlock(args, nil)
			for i, z := range cfg.zones {
				cfg.zones[i] = strings.ToLower(z)
			}
		}
		for c.NextBlock() {
			if err := parseOption(c, &cfg); err != nil {
				return cfg, err
			}
		}
	}
	if cfg.api != "" && cfg.tokenFile == "" && !cfg.insecure && !conf.LoopbackOnly(cfg.api) {
		// The error names the api line, as c.Errf would there.
		return cfg, fmt.Errorf("%s:%d - Error during parsing: api %s accepts writes from beyond loopback: set token_file, or bind it to 127.0.0.1 (or say insecure)",
			c.File(), cfg.apiLine, cfg.api)
	}
	return cfg, nil
}

func parseOption(c *caddy.Controller, cfg *config) error {
	opt := c.Val()
	args := c.RemainingArgs()
	switch opt {
	case "api", "insecure", "token_file":
		return parseAPIOption(c, cfg, opt, args)
	case "interface":
		if len(args) == 0 {
			return c.ArgErr()
		}
		for _, a := range args {
			// An interface that does not exist is waited for: a name
			// that can never be one fails here instead.
			if !ifaceName(a) {
				return c.Errf("interface: %q is not an interface name", a)
			}
			if !slices.Contains(cfg.interfaces, a) {
				cfg.interfaces = append(cfg.interfaces, a)
			}
		}
	case "timeout", "ttl", "negative_ttl":
		return parseTimeOption(c, cfg, opt, args)
	case "query_rate", "cache", "max_records":
		return parseCountOption(c, cfg, opt, args)
	case "reverse":
		if len(args) == 0 {
			return c.ArgErr()
		}
		for _, a := range args {
			pr, err := netip.ParsePrefix(a)
			if err != nil {
				return c.Errf("reverse: %q is not a CIDR", a)
			}
			cfg.reverse = append(cfg.reverse, pr.Masked())
		}
	case "snapshot":
		if len(args) != 1 {
			return c.ArgErr()
		}
		cfg.snapshot = conf.Path(c, args[0])
	case "fallthrough":
		cfg.fall.SetZonesFromArgs(args)
	case "updater":
		if cfg.upd != nil {
			return c.Err("updater may appear only once per mdnsfallback")
		}
		u, err := parseUpdater(c, args)
		if err != nil {
			return err
		}
		cfg.upd = u
	default:
		return c.Errf("unknown property %q", opt)
	}
	return nil
}

// parseAPIOption reads the record API's lines: api, insecure, token_file.
func parseAPIOption(c *caddy.Controller, cfg *config, opt string, args []string) error {
	if opt == "insecure" {
		if len(args) != 0 {
			return c.ArgErr()
		}
		cfg.insecure = true
		return nil
	}
	if len(args) != 1 {
		return c.ArgErr()
	}
	a := args[0]
	switch {
	case opt == "token_file":
		cfg.tokenFile = conf.Path(c, a)
	case a == "off":
		cfg.api = ""
	default:
		if _, _, err := net.SplitHostPort(a); err != nil {
			return c.Errf("api: %q is not HOST:PORT or off", a)
		}
		cfg.api, cfg.apiLine = a, c.Line()
	}
	return nil
}

// parseTimeOption reads timeout (a duration) and ttl / negative_ttl
// (seconds, written as a duration or a plain number, as in the other
// plugins).
func parseTimeOption(c *caddy.Controller, cfg *config, opt string, args []string) error {
	if len(args) != 1 {
		return c.ArgErr()
	}
	s := args[0]
	if opt == "timeout" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return c.Errf("timeout: %q is not a duration", s)
		}
		if d <= 0 || d > 10*time.Second {
			return c.Errf("timeout: %s is outside (0, 10s]", s)
		}
		cfg.timeout = d
		return nil
	}
	secs, err := conf.ParseTTL(s)
	if err != nil {
		return c.Errf("%s: %v", opt, err)
	}
	if opt == "ttl" {
		if secs < 1 || secs > records.MaxTTL {
			return c.Errf("ttl: %s is outside [1s, 168h]", s)
		}
		cfg.ttl = secs
		return nil
	}
	if secs > 3600 {
		return c.Errf("negative_ttl: %s is outside [0, 1h]", s)
	}
	cfg.negativeTTL = time.Duration(secs) * time.Second
	return nil
}

// parseCountOption reads query_rate (1..10000), cache and max_records
// (1..10000000).
func parseCountOption(c *caddy.Controller, cfg *config, opt string, args []string) error {
	if len(args) != 1 {
		return c.ArgErr()
	}
	s := args[0]
	n, err := strconv.Atoi(s)
	if opt == "query_rate" {
		if err != nil || n < 1 || n > 10000 {
			return c.Errf("query_rate: %q is not a number in 1..10000", s)
		}
		cfg.queryRate = n
		return nil
	}
	if err != nil || n < 1 || n > 10_000_000 {
		return c.Errf("%s: %q is not a number in 1..10000000", opt, s)
	}
	if opt == "cache" {
		cfg.cacheSize = n
	} else {
		cfg.maxRecords = n
	}
	return nil
}

// parseUpdater reads `updater docker [ENDPOINT] { network NAME … }`; args
// are the words after "updater".
func parseUpdater(c *caddy.Controller, args []string) (*updater.Config, error) {
	if len(args) == 0 || len(args) > 2 {
		return nil, c.ArgErr()
	}
	if args[0] != "docker" {
		return nil, c.Errf("updater: unknown kind %q (want docker)", args[0])
	}
	u := &updater.Config{CheckInterval: updater.DefaultCheckInterval, CheckTimeout: updater.DefaultCheckTimeout, ReconcileInterval: updater.DefaultReconcileInterval,
		CheckFailures: updater.DefaultCheckFailures, CheckRate: updater.DefaultCheckRate}
	if len(args) == 2 {
		if _, err := client.ParseHostURL(args[1]); err != nil {
			return nil, c.Errf("updater docker: endpoint %q: %v", args[1], err)
		}
		u.Endpoint = args[1]
	}
	// The sub-block is optional; the outer block's nesting makes
	// c.NextBlock unusable here, so the braces are read by hand.
	if !c.NextArg() {
		return u, nil
	}
	if c.Val() != "{" {
		return nil, c.ArgErr()
	}
	for {
		if !c.Next() {
			return nil, c.EOFErr()
		}
		if c.Val() == "}" {
			break
		}
		opt := c.Val()
		vals := c.RemainingArgs()
		if len(vals) != 1 {
			return nil, c.ArgErr()
		}
		switch opt {
		case "network":
			u.Network = vals[0]
		case "check_failures", "check_rate":
			n, err := strconv.Atoi(vals[0])
			lim := map[string]int{"check_failures": 10, "check_rate": 10000}[opt]
			if err != nil || n < 1 || n > lim {
				return nil, c.Errf("%s: %q is not a number in 1..%d", opt, vals[0], lim)
			}
			if opt == "check_failures" {
				u.CheckFailures = n
			} else {
				u.CheckRate = n
			}
		case "check_interval", "check_timeout", "reconcile_interval":
			d, err := time.ParseDuration(vals[0])
			if err != nil || d < 100*time.Millisecond || d > time.Hour {
				return nil, c.Errf("%s: %q is not a duration in [100ms, 1h]", opt, vals[0])
			}
			switch opt {
			case "check_interval":
				u.CheckInterval = d
			case "check_timeout":
				u.CheckTimeout = d
			default:
				u.ReconcileInterval = d
			}
		default:
			return nil, c.Errf("updater docker: unknown property %q", opt)
		}
	}
	if u.CheckTimeout > u.CheckInterval {
		return nil, c.Errf("updater docker: check_timeout %s is longer than check_interval %s", u.CheckTimeout, u.CheckInterval)
	}
	return u, nil
}

// carried holds each instance's records across a reload, so a reload
// without a snapshot loses nothing, whatever line of the stanza changed
// (zones, api, token_file, snapshot, updater…). The key is the server
// block's place in the Corefile (its index, and the key's index inside
// it): each is taken only by the instance of the same block, so two
// mdnsfallback server blocks keep their own records. Records outside a
// block's new zones are dropped (and logged) when it takes them.
var carried carry.Store[[]records.Record]

func (p *MDNSFallback) carryKey() string { return pluginName + "|" + p.cfg.block }

// lifecycle guards start and stop.
var lifecycle sync.Mutex

func (p *MDNSFallback) onStartup() error {
	if err := p.readToken(); err != nil {
		return plugin.Error(pluginName, err)
	}
	recs, ok := carried.Take(p.carryKey())
	switch {
	case ok:
		aside, skipped := p.db.Replace(recs)
		if skipped > 0 {
			log.Warningf("Reload: %d of %d records dropped (invalid)", skipped, len(recs))
		}
		if aside > 0 {
			log.Warningf("Reload: %d of %d records kept aside (outside the zones %s, or past max_records): they come back when the zones hold them", aside, len(recs), strings.Join(p.cfg.zones, " "))
		}
	case p.cfg.snapshot != "":
		n, err := records.NewWriter(p.cfg.snapshot, p.db).Load()
		if err != nil {
			log.Errorf("Snapshot not loaded, starting empty: %v", err)
		} else if n > 0 {
			log.Infof("Snapshot %s loaded: %d records", p.cfg.snapshot, n)
		}
	}
	if err := p.start(); err != nil {
		return err
	}
	p.releaseOrphans()
	return nil
}

// releaseOrphans deletes the records of an updater the stanza no longer
// has (removed from the Corefile, carried across the reload or kept in the
// snapshot): nobody would ever delete them. Goodbyes go out as for any
// delete; the instance has started, so the responder sends them.
func (p *MDNSFallback) releaseOrphans() {
	if p.cfg.upd != nil {
		return
	}
	n := 0
	for id := range p.db.OwnedIDs(updater.Owner) {
		n += len(p.db.DeleteOwned(id, updater.Owner, nil))
	}
	if n > 0 {
		log.Infof("No updater any more: its %d records released", n)
	}
}

// readToken reads the API token from token_file; it runs in OnStartup, so a
// reload picks up a new token and an unreadable file stops the start.
func (p *MDNSFallback) readToken() error {
	f := p.cfg.tokenFile
	if f == "" {
		return nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return fmt.Errorf("token_file %s: want one token on one line", f)
	}
	p.cfg.token = tok
	return nil
}

// start opens the listeners and goroutines; the database is already filled.
func (p *MDNSFallback) start() error {
	lifecycle.Lock()
	defer lifecycle.Unlock()
	p.recordsGauge.Set(float64(p.db.Len()))
	if p.cfg.snapshot != "" {
		s := records.NewWriter(p.cfg.snapshot, p.db)
		s.Start()
		p.snap.Store(s)
	}
	if len(p.cfg.interfaces) > 0 {
		// An interface that does not exist yet (a bridge created after
		// meshdns) is waited for and joined when it appears; one that
		// exists without multicast is a mistake of the Corefile.
		for _, n := range p.cfg.interfaces {
			if ifi, err := net.InterfaceByName(n); err == nil && ifi.Flags&net.FlagMulticast == 0 {
				p.stopLocked()
				return plugin.Error(pluginName, fmt.Errorf("interface %q has no multicast", n))
			}
		}
		if err := p.lan.Open(p.cfg.interfaces); err != nil {
			p.stopLocked()
			return plugin.Error(pluginName, err)
		}
	}
	if p.cfg.api != "" {
		if err := p.startAPI(); err != nil {
			p.stopLocked()
			return plugin.Error(pluginName, err)
		}
	}
	if uc := p.cfg.upd; uc != nil {
		eng := p.newEngine
		if eng == nil {
			eng = func(endpoint string) (updater.Engine, error) { return updater.NewDocker(endpoint) }
		}
		e, err := eng(uc.Endpoint)
		if err != nil {
			p.stopLocked()
			return plugin.Error(pluginName, fmt.Errorf("updater docker: %w", err))
		}
		u := updater.New(*uc, p.db, p.cfg.zones, e, p.cfg.servers)
		u.Start()
		p.upd.Store(u)
	}
	p.ready.Store(true)
	return nil
}

// onRestart stops this instance before a reload and hands its records to
// the next one.
func (p *MDNSFallback) onRestart() error {
	p.restarting.Store(true) // the records live on in the next instance: no goodbyes
	lifecycle.Lock()
	defer lifecycle.Unlock()
	// The writers stop first (the API waits for the requests it is
	// handling), so every write acknowledged is in the records handed over.
	p.stopWritersLocked()
	recs, aside, _ := p.db.All()
	carried.Put(p.carryKey(), append(recs, aside...))
	p.stopLocked()
	return nil
}

// onRestartFailed brings this instance back when the reload failed.
func (p *MDNSFallback) onRestartFailed() error {
	p.restarting.Store(false)
	carried.Drop(p.carryKey())
	return p.start()
}

// shutdown stops the instance. On a stop that is not a reload it first
// multicasts goodbyes for every local record (RFC 6762 §10.1), so that
// peers drop them now rather than when their TTLs end; a reload keeps the
// records in the next instance and says nothing.
func (p *MDNSFallback) shutdown() error {
	lifecycle.Lock()
	defer lifecycle.Unlock()
	if !p.restarting.Load() {
		p.lan.GoodbyeAll(p.db.Records(""))
	}
	p.stopLocked()
	return nil
}

// stopWritersLocked stops what writes records: the container updater and
// the record API.
func (p *MDNSFallback) stopWritersLocked() {
	if u := p.upd.Swap(nil); u != nil {
		u.Stop()
	}
	p.stopAPI()
}

func (p *MDNSFallback) stopLocked() {
	p.ready.Store(false)
	p.stopWritersLocked()
	p.lan.Close()
	if s := p.snap.Swap(nil); s != nil {
		s.Close()
	}
}

// ifaceName reports whether s can name a Linux network interface: 1 to 15
// bytes, not "." or "..", without '/', ':' or white space.
func ifaceName(s string) bool {
	return len(s) > 0 && len(s) < 16 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n\r\v\f")
}
