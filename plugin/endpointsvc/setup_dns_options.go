package endpointsvc

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
)

// dnsOptions are the kubernetes plugin's options that schema kubernetes
// reads besides pods, ttl, namespaces and labels, with its semantics.
type dnsOptions struct {
	podNames         bool          // endpoint_pod_names
	ignoreEmpty      bool          // ignore empty_service
	noEndpoints      bool          // noendpoints
	startup          time.Duration // startup_timeout; 0: not given
	multicluster     []string      // multicluster ZONES: lowercased FQDNs
	multiclusterLine int
}

// dnsOption reads endpoint_pod_names, ignore empty_service, noendpoints,
// startup_timeout and multicluster.
func (o *options) dnsOption(c *caddy.Controller, _ *Endpointsvc, v string) error {
	a := c.RemainingArgs()
	switch v {
	case "endpoint_pod_names", "noendpoints":
		if len(a) != 0 {
			return c.ArgErr()
		}
		if v == "noendpoints" {
			o.dnsOpts.noEndpoints = true
		} else {
			o.dnsOpts.podNames = true
		}
	case "ignore":
		if len(a) != 1 || a[0] != "empty_service" {
			return c.Errf("bad ignore %q: want empty_service", strings.Join(a, " "))
		}
		o.dnsOpts.ignoreEmpty = true
	case "multicluster":
		// as the kubernetes plugin reads it: the zones given (none given:
		// the server block's, which it gives as none), checked once the
		// block's zones are known
		o.dnsOpts.multicluster = append(o.dnsOpts.multicluster, plugin.OriginsFromArgsOrServerBlock(a, []string{})...)
		o.dnsOpts.multiclusterLine = c.Line()
	case "startup_timeout":
		if len(a) != 1 {
			return c.ArgErr()
		}
		d, err := time.ParseDuration(a[0])
		if err != nil || d <= 0 {
			return c.Errf("bad startup_timeout %q: want a positive duration", a[0])
		}
		o.dnsOpts.startup = d
	}
	return nil
}

// multiclusterZones marks which of zones are multicluster zones (nil:
// none); a multicluster zone the block does not serve is an error, as
// with the kubernetes plugin.
func (o *options) multiclusterZones(c *caddy.Controller, zones []string) ([]bool, error) {
	if len(o.dnsOpts.multicluster) == 0 {
		return nil, nil
	}
	mc := make([]bool, len(zones))
	for _, z := range o.dnsOpts.multicluster {
		i := slices.Index(zones, z)
		if i < 0 {
			return nil, lineErr(c, o.dnsOpts.multiclusterLine, fmt.Sprintf("is not authoritative for the multicluster zone %s (authoritative zones: %v)", z, zones))
		}
		mc[i] = true
	}
	return mc, nil
}

// searchFromResolvConf is the machine's search list, lowercased FQDNs, as
// the kubernetes plugin reads it for autopath's tail (nil without one).
func searchFromResolvConf(path string) []string {
	rc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil
	}
	plugin.Zones(rc.Search).Normalize()
	return rc.Search
}
