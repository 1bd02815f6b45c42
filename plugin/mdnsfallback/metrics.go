package mdnsfallback

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The metrics of the plugin's own part; the mDNS side's are in mdns/, the
// container updater's in updater/ (all named coredns_mdnsfallback_…).
var (
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "requests_total",
		Help:      "Counter of requests by result (local, cache, mdns, negative, miss).",
	}, []string{"server", "result"})

	recordCount = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "records",
		Help:      "Records in the local record database.",
	}, []string{"server"})

	apiRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "api_requests_total",
		Help:      "Counter of record API requests by HTTP status code.",
	}, []string{"code"})
)
