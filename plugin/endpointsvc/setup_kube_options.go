package endpointsvc

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"

	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/pkg/conf"

	"k8s.io/apimachinery/pkg/labels"
)

// The kubernetes plugin's client options, read with its meaning so that
// its block pasted into an endpointsvc block means the same
// (docs/cluster-dns.md): kubeconfig, endpoint, tls, apiserver_qps,
// apiserver_burst, apiserver_max_inflight and namespace_labels. A block
// without a `source` line is that plugin's block: it watches the
// Kubernetes API (`source kubernetes`) with the specification's names
// (`schema kubernetes`), and its zones default to the server block's.

// kubeClient is what the client options of a block say.
type kubeClient struct {
	kubeconfig, context string // kubeconfig PATH [CONTEXT]
	kubeconfigSeen      bool
	api                 kubesource.APIConfig
	tlsLine             int // the line of `tls`, for errors found once the source is known
	tlsSeen             bool
	endpointLine        int
}

// kubeClientOption reads one of the kubernetes plugin's client options.
func (o *options) kubeClientOption(c *caddy.Controller, v string) error {
	a := c.RemainingArgs()
	k := &o.client
	switch v {
	case "kubeconfig":
		if len(a) != 1 && len(a) != 2 {
			return c.ArgErr()
		}
		if k.kubeconfigSeen {
			return c.Err("kubeconfig given twice")
		}
		k.kubeconfig, k.kubeconfigSeen = conf.Path(c, a[0]), true
		if len(a) == 2 {
			k.context = a[1]
		}
	case "endpoint":
		if len(a) == 0 {
			return c.ArgErr()
		}
		if len(a) > 1 { // as the kubernetes plugin: the first one only
			log.Warningf("Multiple endpoints have been deprecated, only the first specified endpoint '%s' is used", a[0])
		}
		k.api.Endpoint, k.endpointLine = a[0], c.Line()
	case "apiserver_qps":
		if len(a) != 1 {
			return c.ArgErr()
		}
		qps, err := strconv.ParseFloat(a[0], 32)
		if err != nil {
			return c.Errf("invalid apiserver_qps %q: %v", a[0], err)
		}
		if qps < 0 {
			return c.Err("apiserver_qps must be >= 0")
		}
		k.api.QPS = float32(qps)
	case "apiserver_burst", "apiserver_max_inflight":
		if len(a) != 1 {
			return c.ArgErr()
		}
		n, err := strconv.Atoi(a[0])
		if err != nil {
			return c.Errf("invalid %s %q: %v", v, a[0], err)
		}
		if n < 0 {
			return c.Errf("%s must be >= 0", v)
		}
		if v == "apiserver_burst" {
			k.api.Burst = n
		} else {
			k.api.MaxInflight = n
		}
	case "namespace_labels":
		if len(a) == 0 {
			return c.ArgErr()
		}
		sel := strings.Join(a, " ")
		if _, err := labels.Parse(sel); err != nil {
			return c.Errf("bad namespace_labels %q: %v", sel, err)
		}
		k.api.NamespaceLabels = sel
	}
	return nil
}

// tlsOption reads `tls`, whose meaning depends on the source: source
// orch's client TLS settings ([CERT KEY] [CA]), or the kubernetes
// plugin's CERT KEY CACERT of its endpoint. source reads the arguments.
func (o *options) tlsOption(c *caddy.Controller) error {
	a := c.RemainingArgs()
	if len(a) > 3 {
		return c.ArgErr()
	}
	for i := range a {
		a[i] = conf.Path(c, a[i])
	}
	o.tlsArgs, o.client.tlsSeen, o.client.tlsLine = append([]string{}, a...), true, c.Line()
	return nil
}

// implied completes a block without a source line as the kubernetes
// plugin reads its block: source kubernetes with schema kubernetes
// (unless the block says schema orch: then it has no source), zones from
// the server block when the block names none.
func (o *options) implied(c *caddy.Controller, e *Endpointsvc) {
	if o.file != nil || o.orch != nil || o.kube != nil || o.repl.url != "" {
		return
	}
	if o.schemaSeen && !o.kubernetes {
		return // schema orch without a source: no source (errNoSource)
	}
	o.kube, o.kubernetes = &kubesource.Config{}, true
	if !o.zonesGiven && !o.schemaSeen {
		for _, z := range plugin.OriginsFromArgsOrServerBlock(nil, c.ServerBlockKeys) {
			e.Zones = append(e.Zones, plugin.Host(z).NormalizeExact()...)
		}
		o.zonesGiven = len(e.Zones) > 0
	}
}

// kubeClientConfig hands the client options to the kubernetes source's
// configuration, resolving them as the kubernetes plugin does: a
// kubeconfig wins over an endpoint, and tls applies to an endpoint only
// (each ignored with a warning otherwise, as that plugin ignores them).
func (o *options) kubeClientConfig(c *caddy.Controller) error {
	k := &o.client
	if k.kubeconfigSeen {
		if o.kube.Kubeconfig != "" {
			return c.Err("kubeconfig given twice: in 'source kubernetes' and as an option")
		}
		o.kube.Kubeconfig, o.kube.Context = k.kubeconfig, k.context
	}
	if k.tlsSeen {
		if len(o.tlsArgs) != 3 {
			return lineErr(c, k.tlsLine, "tls with source kubernetes takes CERT KEY CACERT")
		}
		k.api.TLSCert, k.api.TLSKey, k.api.TLSCA = o.tlsArgs[0], o.tlsArgs[1], o.tlsArgs[2]
	}
	switch {
	case o.kube.Kubeconfig != "" && k.api.Endpoint != "":
		log.Warningf("endpoint %q is not used: the kubeconfig %q says where the API server is", k.api.Endpoint, o.kube.Kubeconfig)
	case k.api.Endpoint == "" && k.tlsSeen:
		log.Warningf("tls is not used: it applies to an endpoint only")
	}
	if k.api.NamespaceLabels != "" && len(o.namespaces) > 0 {
		return c.Err("namespaces and namespace_labels cannot both be set")
	}
	o.kube.API = k.api
	return nil
}

// lineErr is c.Errf at another line of the same file.
func lineErr(c *caddy.Controller, line int, msg string) error {
	return fmt.Errorf("%s:%d - Error during parsing: %s", c.File(), line, msg)
}
