package endpointsvc

import (
	"context"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/etcd/msg"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	"github.com/miekg/dns"
)

// k8s_external finds its backend as the handler named "kubernetes" in the
// server block (dnsserver.Config.Handler, whose registry is keyed by each
// chain link's Name()) and takes its Externaler methods. So that a stock
// Corefile keeps its k8s_external line when its kubernetes block becomes
// an endpointsvc block, schema kubernetes adds one link to the chain
// right after endpointsvc: externalBackend, named "kubernetes", which
// passes every query on and answers k8s_external (and `autopath
// @kubernetes`) from endpointsvc's table. A block that also holds the
// kubernetes plugin keeps that plugin as k8s_external's backend: the link
// is then left out.

// stockName is the kubernetes plugin's name, the one k8s_external and
// `autopath @kubernetes` look up.
const stockName = "kubernetes"

// externalBackend is the chain link that stands for the kubernetes plugin
// for the plugins that look it up by name.
type externalBackend struct {
	e    *Endpointsvc
	d    *dnsSchema
	Next plugin.Handler
}

// addExternalBackend adds the link to the server block of c, unless the
// block holds the kubernetes plugin (the chain is built backwards, so a
// kubernetes plugin after endpointsvc is registered already; one before
// it registers after the link and takes the name back).
func addExternalBackend(c *caddy.Controller, e *Endpointsvc, d *dnsSchema) {
	cfgs := blockConfigs(c)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		if next != nil {
			for _, cfg := range cfgs {
				if h := cfg.Handler(stockName); h != nil {
					if _, ours := h.(*externalBackend); !ours {
						return next
					}
				}
			}
		}
		return &externalBackend{e: e, d: d, Next: next}
	})
}

// blockConfigs are the configs of every key of c's server block: each
// builds its own chain from the block's plugins.
func blockConfigs(c *caddy.Controller) []*dnsserver.Config {
	var out []*dnsserver.Config
	for i := range max(1, len(c.ServerBlockKeys)) {
		k := *c
		k.ServerBlockKeyIndex = i
		out = append(out, dnsserver.GetConfig(&k))
	}
	return out
}

// Name implements plugin.Handler.
func (x *externalBackend) Name() string { return stockName }

// ServeDNS implements plugin.Handler: every query goes on.
func (x *externalBackend) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	return plugin.NextOrFailure(pluginName, x.Next, ctx, w, r)
}

// table is the served table, or nil before the first.
func (x *externalBackend) table() (*k8sdns.Table, uint32) {
	t := x.e.tbl.Load()
	if t == nil {
		return nil, 0
	}
	kt, _ := t.model.(*k8sdns.Table)
	return kt, t.serial
}

// External implements k8s_external's Externaler: the records of the
// question's name in k8s_external's zone (state.Zone); SERVFAIL before
// the first table.
func (x *externalBackend) External(state request.Request, headless bool) ([]msg.Service, int) {
	t, _ := x.table()
	if t == nil {
		return nil, dns.RcodeServerFailure
	}
	return x.d.srv.External(t, state.Name(), state.Zone, state.QType(), headless)
}

// ExternalAddress implements Externaler: the name server's addresses.
func (x *externalBackend) ExternalAddress(state request.Request, headless bool) []dns.RR {
	t, _ := x.table()
	if t == nil {
		return nil
	}
	return x.d.srv.ExternalAddress(t, state.Zone, headless)
}

// ExternalServices implements Externaler: every external record, for a
// zone transfer.
func (x *externalBackend) ExternalServices(zone string, headless bool) ([]msg.Service, map[string][]msg.Service) {
	t, _ := x.table()
	if t == nil {
		return nil, nil
	}
	return x.d.srv.ExternalServices(t, zone, headless)
}

// ExternalSerial implements Externaler: the served table's serial (it
// changes with every change of the table, not only of external records).
func (x *externalBackend) ExternalSerial(string) uint32 {
	_, serial := x.table()
	return serial
}

// AutoPath implements autopath.AutoPather, so that `autopath
// @kubernetes` in a pasted block means `autopath @endpointsvc`.
func (x *externalBackend) AutoPath(state request.Request) []string { return x.e.AutoPath(state) }
