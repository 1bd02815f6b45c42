package endpointsvc

import (
	"fmt"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coredns/coredns/plugin/pkg/upstream"

	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pending"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
)

const pluginName = "endpointsvc"

var log = clog.NewWithPlugin(pluginName)

func init() { plugin.Register(pluginName, setup) }

// Defaults.
const (
	defaultZone         = "svc.orch."
	defaultClusterZone  = "cluster.local." // schema kubernetes
	defaultTTL          = 30
	defaultSpecTTL      = 5 // schema kubernetes, as the kubernetes plugin
	defaultFileInterval = 5 * time.Second
	minInterval         = 100 * time.Millisecond
	maxTTL              = 86400
)

func setup(c *caddy.Controller) error {
	e, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	// a reload hands the table over (tables are immutable), so that the new
	// instance answers even when its source is down and there is no
	// snapshot; what the new instance does not take is dropped when this one
	// shuts down (the reload succeeded) or takes back over (it failed)
	c.OnRestart(func() error {
		pending.Begin()
		e.handOver()
		return nil
	})
	c.OnRestartFailed(func() error {
		pending.Failed() // the new instances this reload started
		carryStore.Drop(e.carryKey)
		return nil
	})
	c.OnStartup(func() error {
		e.start(e.source)
		pending.Started(e.stop)
		return nil
	})
	c.OnShutdown(func() error {
		e.stop()
		carryStore.Drop(e.carryKey)
		return nil
	})
	e.servers = conf.Servers(c)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		e.Next = next
		return e
	})
	return nil
}

// parse reads one endpointsvc block. It has no side effects: the source
// does nothing until start. Each option is read by setup_options.go.
func parse(c *caddy.Controller) (*Endpointsvc, error) {
	e := &Endpointsvc{namespace: DefaultNamespace, ttl: defaultTTL, syncer: &syncer{emptyGrace: persist.DefaultEmptyGrace}}
	o := &options{}
	blocks := 0
	for c.Next() {
		if blocks++; blocks > 1 {
			return nil, c.Err("endpointsvc can only be used once per server block")
		}
		for _, z := range c.RemainingArgs() {
			n := plugin.Host(z).NormalizeExact()
			if len(n) == 0 {
				return nil, c.Errf("bad zone %q", z)
			}
			e.Zones = append(e.Zones, n...)
		}
		o.zonesGiven = len(e.Zones) > 0
		for c.NextBlock() {
			if err := o.option(c, e); err != nil {
				return nil, err
			}
		}
	}
	if err := e.checkSchema(c, o.zonesGiven, o.podsSeen, o.orchSchemaOnly); err != nil {
		return nil, err
	}
	if o.graceSeen && e.snapshotPath == "" {
		return nil, c.Err("empty_grace needs snapshot")
	}
	if e.spec && !o.ttlSeen {
		e.ttl = defaultSpecTTL
	}
	if err := o.source(c, e); err != nil {
		return nil, err
	}
	e.finish(nil)
	e.carryKey = carryKey(c, e)
	return e, nil
}

// finish derives what the parsed options imply: SOA names per zone, the
// metrics zone label, the hostname refresh period, the resolver.
func (e *Endpointsvc) finish(lookup lookupFunc) {
	e.soas = e.soas[:0]
	for _, z := range e.Zones {
		e.soas = append(e.soas, soa.For(z))
	}
	e.kick = make(chan struct{}, 1)
	e.counters.Clear() // their zone numbers change with e.Zones
	e.refresh = time.Duration(e.ttl) * time.Second
	if e.refresh < time.Second {
		e.refresh = time.Second
	}
	e.resolver = newHostResolver(lookup)
	e.upstream = upstream.New()
}

// carryKey names what a table depends on: the server (port and bind
// addresses), the zones, the options the table is built with, and the
// source with every option that selects what it reads (Source.Key), so
// that a reload that changes any of them during an outage does not serve
// the old table.
func carryKey(c *caddy.Controller, e *Endpointsvc) string {
	server := ""
	if cfg := dnsserver.GetConfig(c); cfg != nil {
		server = fmt.Sprintf("%v:%s", cfg.ListenHosts, cfg.Port)
	}
	return fmt.Sprintf("%s %s %v unhealthy=%v endpoint=%v spec=%v pods=%v source=%s", pluginName, server, e.Zones, e.includeUnhealthy, e.endpointMode, e.spec, e.podsInsecure, e.source.Key())
}

// checkSchema sets the default zones of the schema and rejects options the
// schema does not read: schema kubernetes has no short names, answers
// endpoint addresses by the specification's rules and never node ones.
func (e *Endpointsvc) checkSchema(c *caddy.Controller, zonesGiven, podsSeen bool, orchOnly []string) error {
	if !e.spec {
		if podsSeen {
			return c.Err("pods needs 'schema kubernetes'")
		}
		if !zonesGiven {
			e.Zones = []string{defaultZone}
		}
		return nil
	}
	if len(orchOnly) > 0 {
		return c.Errf("%s does not apply to 'schema kubernetes'", orchOnly[0])
	}
	if !zonesGiven {
		e.Zones = []string{defaultClusterZone}
	}
	e.primary = -1
	for i, z := range e.Zones {
		if !isReverseZone(z) {
			e.primary = i
			break
		}
	}
	if e.primary < 0 {
		return c.Errf("schema kubernetes needs a zone that is not a reverse zone (such as cluster.local), got %v", e.Zones)
	}
	return nil
}

// isReverseZone reports whether zone (a lowercased FQDN) is in in-addr.arpa.
// or ip6.arpa.
func isReverseZone(zone string) bool {
	return inZone(zone, "in-addr.arpa.") || inZone(zone, "ip6.arpa.")
}

// inZone reports whether name is zone or below it; both are lowercased
// FQDNs (dns.IsSubDomain without its allocations, for the query path).
func inZone(name, zone string) bool {
	if zone == "." {
		return true
	}
	return name == zone || (len(name) > len(zone) && name[len(name)-len(zone)-1] == '.' && name[len(name)-len(zone):] == zone)
}
