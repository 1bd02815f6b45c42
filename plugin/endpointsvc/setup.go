package endpointsvc

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coredns/coredns/plugin/pkg/upstream"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pending"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
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
	resolvConf          = "/etc/resolv.conf" // the search list autopath appends (pods verified)
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
		if e.publishing != nil {
			e.publishing.reloading.Store(true)
		}
		return nil
	})
	c.OnRestartFailed(func() error {
		pending.Failed() // the new instances this reload started
		carryStore.Drop(e.carryKey)
		e.replicaThaw()
		if e.publishing != nil {
			e.publishing.reloading.Store(false)
		}
		return nil
	})
	c.OnStartup(func() error {
		if d, ok := e.schema.(*dnsSchema); ok {
			d.srv.SetLocalIPs(boundIPs(c))
		}
		if err := e.replicaListen(); err != nil {
			return plugin.Error(pluginName, err)
		}
		e.start(e.source)
		ages.list(e)
		if p := e.publishing; p != nil {
			p.start(e.Zones[0], e.ready.Load)
			pending.Started(func() { p.stop(false) })
		}
		pending.Started(e.stop)
		return nil
	})
	c.OnShutdown(func() error {
		// at SIGTERM this runs before health's lameduck wait: the endpoint
		// is marked terminating while the replica still answers
		if p := e.publishing; p != nil {
			p.stop(!p.reloading.Load())
		}
		e.replicaClose() // its streams end; followers resume with the next instance
		ages.drop(e)
		e.stop()
		carryStore.Drop(e.carryKey)
		return nil
	})
	e.servers = conf.Servers(c)
	inspect.Listed(c, pluginName, e) // inspect's /endpointsvc (inspect.go)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		e.Next = next
		return e
	})
	if d, ok := e.schema.(*dnsSchema); ok {
		addExternalBackend(c, e, d) // k8s_external's backend (external.go)
	}
	return nil
}

// parse reads one endpointsvc block. It has no side effects: the source
// does nothing until start. Each option is read by setup_options.go.
func parse(c *caddy.Controller) (*Endpointsvc, error) {
	e := &Endpointsvc{syncer: &syncer{emptyGrace: persist.DefaultEmptyGrace}}
	o := &options{namespace: orch.DefaultNamespace, ttl: defaultTTL}
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
	o.implied(c, e)
	if err := o.schema(c, e); err != nil {
		return nil, err
	}
	if o.graceSeen && e.snapshotPath == "" {
		return nil, c.Err("empty_grace needs snapshot")
	}
	if err := o.source(c, e); err != nil {
		return nil, err
	}
	e.finish(nil)
	e.carryKey = carryKey(c, e, o)
	return e, nil
}

// schema makes the schema the options choose, with its default zones and
// TTL, and rejects options it does not read: schema kubernetes has no
// short names, answers endpoint addresses by the specification's rules and
// never node ones.
func (o *options) schema(c *caddy.Controller, e *Endpointsvc) error {
	if !o.kubernetes {
		if o.podsSeen {
			return c.Err("pods needs 'schema kubernetes'")
		}
		if len(o.dnsOnly) > 0 {
			return c.Errf("%s needs 'schema kubernetes'", o.dnsOnly[0])
		}
		if !o.zonesGiven {
			e.Zones = []string{defaultZone}
		}
		e.schema = &orchSchema{srv: orch.Server{Zones: e.Zones, Namespace: o.namespace, TTL: o.ttl},
			includeUnhealthy: o.includeUnhealthy, endpointMode: o.endpointMode}
		return nil
	}
	if len(o.orchSchemaOnly) > 0 {
		return c.Errf("%s does not apply to 'schema kubernetes'", o.orchSchemaOnly[0])
	}
	if !o.zonesGiven {
		e.Zones = []string{defaultClusterZone}
	}
	if !o.ttlSeen {
		o.ttl = defaultSpecTTL
	}
	primary := slices.IndexFunc(e.Zones, func(z string) bool { return !isReverseZone(z) })
	if primary < 0 {
		return c.Errf("schema kubernetes needs a zone that is not a reverse zone (such as cluster.local), got %v", e.Zones)
	}
	mc, err := o.multiclusterZones(c, e.Zones)
	if err != nil {
		return err
	}
	e.schema = &dnsSchema{srv: k8sdns.Server{Zones: e.Zones, Multicluster: mc, Primary: primary, TTL: o.ttl, PodsInsecure: o.podsInsecure,
		PodsVerified: o.podsVerified, EndpointPodNames: o.dnsOpts.podNames, IgnoreEmptyService: o.dnsOpts.ignoreEmpty},
		noEndpoints: o.dnsOpts.noEndpoints}
	if o.podsVerified {
		e.schema.(*dnsSchema).srv.Search = searchFromResolvConf(resolvConf)
	}
	e.startupTimeout = o.dnsOpts.startup
	return nil
}

// finish derives what the parsed options imply: the zones' SOA names, the
// resolver of hostname advertise addresses and its refresh period (the
// TTL), the upstream lookups of CNAME targets.
func (e *Endpointsvc) finish(lookup orch.LookupFunc) {
	e.counters.Clear() // their zone numbers change with e.Zones
	u := boundedUpstream{upstream.New()}
	switch s := e.schema.(type) {
	case *orchSchema:
		s.srv.Zones, s.srv.Upstream = e.Zones, u
		s.srv.Init()
		s.kick = make(chan struct{}, 1)
		s.refresh = max(time.Duration(s.srv.TTL)*time.Second, time.Second)
		s.resolver = orch.NewHostResolver(lookup)
	case *dnsSchema:
		s.srv.Zones, s.srv.Upstream = e.Zones, u
	}
}

// carryKey names what a table depends on: the server (port and bind
// addresses), the zones, the schema with the options its table is built
// with, and the source with every option that selects what it reads
// (feed.Source.Key), so that a reload that changes any of them during an
// outage does not serve the old table.
func carryKey(c *caddy.Controller, e *Endpointsvc, o *options) string {
	server := ""
	if cfg := dnsserver.GetConfig(c); cfg != nil {
		server = fmt.Sprintf("%v:%s", cfg.ListenHosts, cfg.Port)
	}
	return fmt.Sprintf("%s %s %v schema=%s unhealthy=%v endpoint=%v pods=%v/%v noendpoints=%v source=%s", pluginName, server, e.Zones,
		e.schema.name(), o.includeUnhealthy, o.endpointMode, o.podsInsecure, o.podsVerified, o.dnsOpts.noEndpoints, e.source.Key())
}

// isReverseZone reports whether zone (a lowercased FQDN) is in in-addr.arpa.
// or ip6.arpa.
func isReverseZone(zone string) bool {
	return inZone(zone, "in-addr.arpa.") || inZone(zone, "ip6.arpa.")
}

// boundIPs are the server's own addresses, as the kubernetes plugin finds
// them for its name server's records: the addresses it is bound to, or,
// bound to none, the machine's interface addresses; loopback ones left
// out. A bind address written as a plain IP is not read as one (the
// kubernetes plugin parses them as CIDRs), so that the records are the
// same as the stock plugin's under the same Corefile.
func boundIPs(c *caddy.Controller) []netip.Addr {
	hosts := dnsserver.GetConfig(c).ListenHosts
	if len(hosts) == 0 || hosts[0] == "" {
		hosts = nil
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return nil
		}
		for _, a := range addrs {
			hosts = append(hosts, a.String())
		}
	}
	var ips []netip.Addr
	for _, h := range hosts {
		p, err := netip.ParsePrefix(h)
		if err != nil || p.Addr().Zone() != "" || p.Addr().Unmap().IsLoopback() {
			continue
		}
		ips = append(ips, p.Addr().Unmap())
	}
	return ips
}
