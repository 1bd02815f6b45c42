package endpointsvc

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	pkgtls "github.com/coredns/coredns/plugin/pkg/tls"
	"github.com/coredns/coredns/plugin/pkg/upstream"

	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/soa"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/labels"
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
	// instance answers even when its source is down and there is no snapshot
	c.OnRestart(func() error {
		e.handOver()
		return nil
	})
	c.OnRestartFailed(func() error {
		carryStore.Drop(e.carryKey)
		return nil
	})
	c.OnStartup(func() error {
		e.start(e.source)
		return nil
	})
	c.OnShutdown(func() error {
		e.stop()
		return nil
	})
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		e.Next = next
		return e
	})
	return nil
}

// parse reads one endpointsvc block. It has no side effects: the source
// does nothing until start.
func parse(c *caddy.Controller) (*Endpointsvc, error) {
	path := func(p string) string { return conf.Path(c, p) }
	e := &Endpointsvc{namespace: DefaultNamespace, ttl: defaultTTL, syncer: &syncer{}}
	blocks := 0
	var file *fileSource
	var orch *orchSource
	var kube *kubeSource
	var kubeOpts []string       // kubernetes-only options seen, for the error message
	var orchSchemaOpts []string // options schema kubernetes does not read, for the error message
	var nodeAddress, namespaces []string
	selector := ""
	var orchOpts []string // orch-only options seen, for the error message
	var tlsArgs []string
	tlsServerName := ""
	timeout, maxBackoff, maxBody := time.Duration(0), time.Duration(0), int64(0)
	podsSeen, zonesGiven, ttlSeen := false, false, false
	tokenFile := ""
	for c.Next() {
		if blocks++; blocks > 1 {
			return nil, c.Err("endpointsvc can only be used once per server block")
		}
		args := c.RemainingArgs()
		for _, z := range args {
			n := plugin.Host(z).NormalizeExact()
			if len(n) == 0 {
				return nil, c.Errf("bad zone %q", z)
			}
			e.Zones = append(e.Zones, n...)
		}
		zonesGiven = len(e.Zones) > 0
		for c.NextBlock() {
			switch v := c.Val(); v {
			case "source":
				if file != nil || orch != nil || kube != nil {
					return nil, c.Err("only one source per endpointsvc block")
				}
				a := c.RemainingArgs()
				if len(a) >= 1 && a[0] == "kubernetes" {
					if len(a) > 3 {
						return nil, c.ArgErr()
					}
					kube = &kubeSource{}
					if len(a) >= 2 {
						kube.kubeconfig = path(a[1])
					}
					if len(a) == 3 {
						kube.context = a[2]
					}
					continue
				}
				if len(a) < 2 || len(a) > 3 {
					return nil, c.ArgErr()
				}
				var interval time.Duration
				if len(a) == 3 {
					d, err := time.ParseDuration(a[2])
					if err != nil || d < minInterval {
						return nil, c.Errf("bad interval %q: want a duration of at least %v", a[2], minInterval)
					}
					interval = d
				}
				switch a[0] {
				case "file":
					if interval == 0 {
						interval = defaultFileInterval
					}
					file = &fileSource{path: path(a[1]), interval: interval}
				case "orch":
					u, err := url.Parse(a[1])
					if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						return nil, c.Errf("bad orch URL %q: want http:// or https://", a[1])
					}
					if interval == 0 {
						interval = defaultOrchInterval
					}
					orch = &orchSource{url: a[1], interval: interval}
				default:
					return nil, c.Errf("unknown source %q: want file, orch or kubernetes", a[0])
				}
			case "namespace":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				ns := strings.ToLower(a[0])
				if !validLabel(ns) || ns == nodeNamespace {
					return nil, c.Errf("bad namespace %q", a[0])
				}
				e.namespace = ns
				orchSchemaOpts = append(orchSchemaOpts, v)
			case "addresses":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				switch a[0] {
				case "node":
					e.endpointMode = false
				case "endpoint":
					e.endpointMode = true
				default:
					return nil, c.Errf("bad addresses %q: want node or endpoint", a[0])
				}
				orchSchemaOpts = append(orchSchemaOpts, v)
			case "node_address":
				a := c.RemainingArgs()
				if len(a) == 0 {
					return nil, c.ArgErr()
				}
				nodeAddress = nodeAddress[:0]
				for _, t := range a {
					if !nodeAddressTypes[strings.ToLower(t)] {
						return nil, c.Errf("bad node_address %q: want InternalIP, ExternalIP, Hostname, InternalDNS or ExternalDNS", t)
					}
					nodeAddress = append(nodeAddress, strings.ToLower(t))
				}
				kubeOpts, orchSchemaOpts = append(kubeOpts, v), append(orchSchemaOpts, v)
			case "labels":
				a := c.RemainingArgs()
				if len(a) == 0 {
					return nil, c.ArgErr()
				}
				selector = strings.Join(a, " ")
				if _, err := labels.Parse(selector); err != nil {
					return nil, c.Errf("bad labels %q: %v", selector, err)
				}
				kubeOpts = append(kubeOpts, v)
			case "namespaces":
				a := c.RemainingArgs()
				if len(a) == 0 {
					return nil, c.ArgErr()
				}
				for _, ns := range a {
					if !validLabel(strings.ToLower(ns)) {
						return nil, c.Errf("bad namespace %q", ns)
					}
					namespaces = append(namespaces, strings.ToLower(ns))
				}
				kubeOpts = append(kubeOpts, v)
			case "include_unhealthy":
				if c.NextArg() {
					return nil, c.ArgErr()
				}
				e.includeUnhealthy = true
				orchSchemaOpts = append(orchSchemaOpts, v)
			case "schema":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				switch a[0] {
				case "orch":
					e.spec = false
				case "kubernetes":
					e.spec = true
				default:
					return nil, c.Errf("bad schema %q: want orch or kubernetes", a[0])
				}
			case "pods":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				switch a[0] {
				case "disabled":
					e.podsInsecure = false
				case "insecure":
					e.podsInsecure = true
				default:
					return nil, c.Errf("bad pods %q: want disabled or insecure", a[0])
				}
				podsSeen = true
			case "ttl":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				ttl, err := conf.ParseTTL(a[0])
				if err != nil {
					return nil, c.Err(err.Error())
				}
				if ttl > maxTTL {
					return nil, c.Errf("invalid TTL %q (want 0s to %ds)", a[0], maxTTL)
				}
				e.ttl, ttlSeen = ttl, true
			case "snapshot":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				e.snapshotPath = path(a[0])
			case "fallthrough":
				e.Fall.SetZonesFromArgs(c.RemainingArgs())
			case "token_file":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				tokenFile, orchOpts = path(a[0]), append(orchOpts, v)
			case "tls":
				a := c.RemainingArgs()
				if len(a) > 3 {
					return nil, c.ArgErr()
				}
				for i := range a {
					a[i] = path(a[i])
				}
				if _, err := pkgtls.NewTLSConfigFromArgs(a...); err != nil {
					return nil, c.Errf("tls: %v", err)
				}
				tlsArgs, orchOpts = a, append(orchOpts, v)
				if len(a) == 0 {
					tlsArgs = []string{}
				}
			case "tls_servername":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				tlsServerName, orchOpts = a[0], append(orchOpts, v)
			case "timeout", "max_backoff":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				d, err := time.ParseDuration(a[0])
				if err != nil || d <= 0 {
					return nil, c.Errf("bad %s %q: want a positive duration", v, a[0])
				}
				if v == "timeout" {
					timeout = d
				} else {
					maxBackoff = d
				}
				orchOpts = append(orchOpts, v)
			case "max_body":
				a := c.RemainingArgs()
				if len(a) != 1 {
					return nil, c.ArgErr()
				}
				n, err := parseSize(a[0])
				if err != nil {
					return nil, c.Errf("bad max_body %q: %v", a[0], err)
				}
				maxBody, orchOpts = n, append(orchOpts, v)
			default:
				return nil, c.Errf("unknown property %q", v)
			}
		}
	}
	if err := e.checkSchema(c, zonesGiven, podsSeen, orchSchemaOpts); err != nil {
		return nil, err
	}
	if e.spec && !ttlSeen {
		e.ttl = defaultSpecTTL
	}
	if kube != nil {
		kube.spec = e.spec
	}
	if kube == nil && len(kubeOpts) > 0 {
		return nil, c.Errf("%s needs 'source kubernetes'", kubeOpts[0])
	}
	switch {
	case kube != nil:
		if len(orchOpts) > 0 {
			return nil, c.Errf("%s needs 'source orch URL'", orchOpts[0])
		}
		kube.nodeAddress, kube.labels, kube.namespaces = nodeAddress, selector, namespaces
		e.source = kube
	case file != nil:
		if len(orchOpts) > 0 {
			return nil, c.Errf("%s needs 'source orch URL'", orchOpts[0])
		}
		e.source = file
	case orch != nil:
		orch.timeout, orch.maxBackoff, orch.maxBody, orch.tokenFile = timeout, maxBackoff, maxBody, tokenFile
		if orch.timeout == 0 {
			orch.timeout = defaultOrchTimeout
		}
		if orch.maxBackoff == 0 {
			orch.maxBackoff = defaultMaxBackoff
		}
		if orch.maxBody == 0 {
			orch.maxBody = defaultMaxBody
		}
		if tlsArgs != nil || tlsServerName != "" {
			cfg, err := pkgtls.NewTLSConfigFromArgs(tlsArgs...)
			if err != nil {
				return nil, c.Errf("tls: %v", err)
			}
			cfg.ServerName = tlsServerName
			orch.tlsConfig = cfg
		}
		e.source = orch
	default:
		return nil, c.Err(errNoSource.Error())
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

// carryKey names what a table depends on besides the state: the server
// (port and bind addresses), the zones and the options buildTable reads.
func carryKey(c *caddy.Controller, e *Endpointsvc) string {
	server := ""
	if cfg := dnsserver.GetConfig(c); cfg != nil {
		server = fmt.Sprintf("%v:%s", cfg.ListenHosts, cfg.Port)
	}
	return fmt.Sprintf("%s %s %v unhealthy=%v endpoint=%v spec=%v pods=%v", pluginName, server, e.Zones, e.includeUnhealthy, e.endpointMode, e.spec, e.podsInsecure)
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

// isReverseZone reports whether zone is in in-addr.arpa. or ip6.arpa.
func isReverseZone(zone string) bool {
	return dns.IsSubDomain("in-addr.arpa.", zone) || dns.IsSubDomain("ip6.arpa.", zone)
}

// parseSize accepts bytes with an optional k, m or g suffix (powers of 1024).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.ToLower(s)
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, errors.New("want a positive size such as 65536, 512k or 64m")
	}
	return n * mult, nil
}
