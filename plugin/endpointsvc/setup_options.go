package endpointsvc

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coredns/caddy"
	pkgtls "github.com/coredns/coredns/plugin/pkg/tls"

	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
	"github.com/meshdns/meshdns/plugin/pkg/conf"

	"k8s.io/apimachinery/pkg/labels"
)

// options collects what parse reads from a block before it assembles the
// source: the options that belong to one source (or one schema) are
// checked once the whole block is read, so that their order is free.
type options struct {
	file *fileSource
	orch *orchSource
	kube *kubesource.Config

	publish *publishing    // publish: this replica's own endpoint
	repl    replicaOptions // replicate, source replica
	client  kubeClient     // the kubernetes plugin's client options (setup_kube_options.go)

	// the schema's options
	kubernetes       bool // schema kubernetes
	schemaSeen       bool
	namespace        string
	includeUnhealthy bool
	endpointMode     bool
	podsInsecure     bool
	podsVerified     bool
	ttl              uint32
	dnsOnly          []string // options only schema kubernetes reads, for the error message
	dnsOpts          dnsOptions

	kubeOnly       []string // options of source kubernetes seen, for the error message
	orchOnly       []string // options of source orch seen
	orchSchemaOnly []string // options schema kubernetes does not read

	nodeAddress, namespaces []string
	selector                string

	tlsArgs             []string
	tlsServerName       string
	timeout, maxBackoff time.Duration
	maxBody             int64
	tokenFile           string
	podsSeen, ttlSeen   bool
	graceSeen           bool
	zonesGiven          bool
}

// option reads the option at c's cursor into o or e.
func (o *options) option(c *caddy.Controller, e *Endpointsvc) error {
	switch v := c.Val(); v {
	case "source":
		return o.sourceOption(c)
	case "node_address", "labels", "namespaces":
		o.kubeOnly = append(o.kubeOnly, v)
		return o.kubeOption(c, v)
	case "kubeconfig", "endpoint", "apiserver_qps", "apiserver_burst", "apiserver_max_inflight", "namespace_labels":
		o.kubeOnly = append(o.kubeOnly, v)
		if v == "namespace_labels" {
			o.dnsOnly = append(o.dnsOnly, v)
		}
		return o.kubeClientOption(c, v)
	case "tls":
		return o.tlsOption(c)
	case "token_file", "tls_servername", "timeout", "max_backoff", "max_body":
		o.orchOnly = append(o.orchOnly, v)
		return o.orchOption(c, v)
	case "namespace", "addresses", "include_unhealthy", "schema", "pods":
		return o.schemaOption(c, v)
	case "endpoint_pod_names", "ignore", "noendpoints", "startup_timeout", "multicluster":
		o.dnsOnly = append(o.dnsOnly, v)
		return o.dnsOption(c, e, v)
	case "ttl", "snapshot", "empty_grace", "fallthrough":
		return o.servingOption(c, e, v)
	case "publish":
		o.kubeOnly = append(o.kubeOnly, v)
		return o.publishOption(c)
	case "replicate":
		return o.replicateOption(c)
	case "stale_ede":
		return o.staleOption(c, e)
	default:
		return c.Errf("unknown property %q", v)
	}
}

// sourceOption reads `source file|orch|kubernetes ...`.
func (o *options) sourceOption(c *caddy.Controller) error {
	if o.file != nil || o.orch != nil || o.kube != nil || o.repl.url != "" {
		return c.Err("only one source per endpointsvc block")
	}
	a := c.RemainingArgs()
	if len(a) >= 1 && a[0] == "replica" {
		return o.replicaSourceOption(c, a)
	}
	if len(a) >= 1 && a[0] == "kubernetes" {
		if len(a) > 3 {
			return c.ArgErr()
		}
		o.kube = &kubesource.Config{}
		if len(a) >= 2 {
			o.kube.Kubeconfig = conf.Path(c, a[1])
		}
		if len(a) == 3 {
			o.kube.Context = a[2]
		}
		return nil
	}
	if len(a) < 2 || len(a) > 3 {
		return c.ArgErr()
	}
	var interval time.Duration
	if len(a) == 3 {
		d, err := time.ParseDuration(a[2])
		if err != nil || d < minInterval {
			return c.Errf("bad interval %q: want a duration of at least %v", a[2], minInterval)
		}
		interval = d
	}
	switch a[0] {
	case "file":
		if interval == 0 {
			interval = defaultFileInterval
		}
		o.file = &fileSource{path: conf.Path(c, a[1]), interval: interval}
	case "orch":
		u, err := url.Parse(a[1])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c.Errf("bad orch URL %q: want http:// or https://", a[1])
		}
		if interval == 0 {
			interval = defaultOrchInterval
		}
		o.orch = &orchSource{url: a[1], interval: interval}
	default:
		return c.Errf("unknown source %q: want file, orch, kubernetes or replica", a[0])
	}
	return nil
}

// kubeOption reads an option of source kubernetes.
func (o *options) kubeOption(c *caddy.Controller, v string) error {
	a := c.RemainingArgs()
	if len(a) == 0 {
		return c.ArgErr()
	}
	switch v {
	case "node_address":
		o.nodeAddress = o.nodeAddress[:0]
		for _, t := range a {
			if !slices.Contains(kubesource.NodeAddressTypes, strings.ToLower(t)) {
				return c.Errf("bad node_address %q: want InternalIP, ExternalIP, Hostname, InternalDNS or ExternalDNS", t)
			}
			o.nodeAddress = append(o.nodeAddress, strings.ToLower(t))
		}
		o.orchSchemaOnly = append(o.orchSchemaOnly, v)
	case "labels":
		o.selector = strings.Join(a, " ")
		if _, err := labels.Parse(o.selector); err != nil {
			return c.Errf("bad labels %q: %v", o.selector, err)
		}
	case "namespaces":
		for _, ns := range a {
			if !orch.ValidLabel(strings.ToLower(ns)) {
				return c.Errf("bad namespace %q", ns)
			}
			o.namespaces = append(o.namespaces, strings.ToLower(ns))
		}
	}
	return nil
}

// orchOption reads an option of source orch.
func (o *options) orchOption(c *caddy.Controller, v string) error {
	a := c.RemainingArgs()
	if len(a) != 1 {
		return c.ArgErr()
	}
	switch v {
	case "token_file":
		o.tokenFile = conf.Path(c, a[0])
	case "tls_servername":
		o.tlsServerName = a[0]
	case "timeout", "max_backoff":
		d, err := time.ParseDuration(a[0])
		if err != nil || d <= 0 {
			return c.Errf("bad %s %q: want a positive duration", v, a[0])
		}
		if v == "timeout" {
			o.timeout = d
		} else {
			o.maxBackoff = d
		}
	case "max_body":
		n, err := conf.ParseSize(a[0])
		if err != nil {
			return c.Errf("bad max_body %q: %v", a[0], err)
		}
		o.maxBody = n
	}
	return nil
}

// schemaOption reads the options that choose the names and records.
func (o *options) schemaOption(c *caddy.Controller, v string) error {
	a := c.RemainingArgs()
	if v == "include_unhealthy" {
		if len(a) != 0 {
			return c.ArgErr()
		}
		o.includeUnhealthy = true
		o.orchSchemaOnly = append(o.orchSchemaOnly, v)
		return nil
	}
	if len(a) != 1 {
		return c.ArgErr()
	}
	switch v {
	case "namespace":
		ns := strings.ToLower(a[0])
		if !orch.ValidLabel(ns) || ns == orch.NodeNamespace {
			return c.Errf("bad namespace %q", a[0])
		}
		o.namespace = ns
		o.orchSchemaOnly = append(o.orchSchemaOnly, v)
	case "addresses":
		switch a[0] {
		case "node", "endpoint":
			o.endpointMode = a[0] == "endpoint"
		default:
			return c.Errf("bad addresses %q: want node or endpoint", a[0])
		}
		o.orchSchemaOnly = append(o.orchSchemaOnly, v)
	case "schema":
		switch a[0] {
		case "orch", "kubernetes":
			o.kubernetes, o.schemaSeen = a[0] == "kubernetes", true
		default:
			return c.Errf("bad schema %q: want orch or kubernetes", a[0])
		}
	case "pods":
		switch a[0] {
		case "disabled", "insecure", "verified":
			o.podsInsecure, o.podsVerified = a[0] == "insecure", a[0] == "verified"
		default:
			return c.Errf("bad pods %q: want disabled, insecure or verified", a[0])
		}
		o.podsSeen = true
	}
	return nil
}

// servingOption reads the options of every schema and source.
func (o *options) servingOption(c *caddy.Controller, e *Endpointsvc, v string) error {
	a := c.RemainingArgs()
	if v == "fallthrough" {
		e.Fall.SetZonesFromArgs(a)
		return nil
	}
	if len(a) != 1 {
		return c.ArgErr()
	}
	switch v {
	case "ttl":
		ttl, err := conf.ParseTTL(a[0])
		if err != nil {
			return c.Err(err.Error())
		}
		if ttl > maxTTL {
			return c.Errf("invalid TTL %q (want 0s to %ds)", a[0], maxTTL)
		}
		o.ttl, o.ttlSeen = ttl, true
	case "snapshot":
		e.snapshotPath = conf.Path(c, a[0])
	case "empty_grace":
		d, err := time.ParseDuration(a[0])
		if err != nil || d < 0 {
			return c.Errf("bad empty_grace %q: want a duration, 0 to write an empty state at once", a[0])
		}
		e.emptyGrace, o.graceSeen = d, true
	}
	return nil
}

// source checks that the options seen fit the source and hands them to it.
func (o *options) source(c *caddy.Controller, e *Endpointsvc) error {
	if o.kube == nil && len(o.kubeOnly) > 0 {
		return c.Errf("%s needs 'source kubernetes'", o.kubeOnly[0])
	}
	if o.orch == nil && len(o.orchOnly) > 0 {
		return c.Errf("%s needs 'source orch URL'", o.orchOnly[0])
	}
	if o.orch == nil && o.kube == nil && o.client.tlsSeen {
		return lineErr(c, o.client.tlsLine, "tls needs 'source orch URL' or 'source kubernetes'")
	}
	if err := o.replication(c, e); err != nil {
		return err
	}
	switch {
	case o.repl.url != "":
		// the follower, made by replication
	case o.kube != nil:
		if err := o.kubeClientConfig(c); err != nil {
			return err
		}
		o.kube.NodeAddress, o.kube.Labels, o.kube.Namespaces = o.nodeAddress, o.selector, o.namespaces
		o.kube.Pods, o.kube.NoEndpoints = o.podsVerified, o.dnsOpts.noEndpoints
		o.kube.Multicluster = o.kubernetes && len(o.dnsOpts.multicluster) > 0
		if o.publish != nil {
			o.publish.kube, e.publishing = *o.kube, o.publish
		}
		if o.kubernetes {
			e.source = kubesource.NewDNS(*o.kube)
		} else {
			e.source = kubesource.NewOrch(*o.kube)
		}
	case o.file != nil:
		o.file.decode = e.schema.decode
		e.source = o.file
	case o.orch != nil:
		return o.orchSource(c, e)
	default:
		return c.Err(errNoSource.Error())
	}
	return nil
}

// orchSource completes source orch with its options and their defaults.
func (o *options) orchSource(c *caddy.Controller, e *Endpointsvc) error {
	s := o.orch
	s.timeout, s.maxBackoff, s.maxBody, s.tokenFile = o.timeout, o.maxBackoff, o.maxBody, o.tokenFile
	s.decode = e.schema.decode
	if s.timeout == 0 {
		s.timeout = defaultOrchTimeout
	}
	if s.maxBackoff == 0 {
		s.maxBackoff = defaultMaxBackoff
	}
	if s.maxBody == 0 {
		s.maxBody = defaultMaxBody
	}
	if o.client.tlsSeen || o.tlsServerName != "" {
		cfg, err := pkgtls.NewTLSConfigFromArgs(o.tlsArgs...)
		if err != nil {
			return lineErr(c, o.client.tlsLine, "tls: "+err.Error())
		}
		cfg.ServerName = o.tlsServerName
		s.tlsConfig = cfg
	}
	e.source = s
	return nil
}
