package mdnsfallback

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// requests counts DNS requests in the zones (and reverse networks) by
	// how they were answered: local, cache, mdns, negative, miss.
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "requests_total",
		Help:      "Counter of requests by result (local, cache, mdns, negative, miss).",
	}, []string{"server", "result"})

	mdnsQueries = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "mdns_queries_sent_total",
		Help:      "Counter of mDNS queries sent (one per interface).",
	})

	mdnsRejoins = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "mdns_interface_rejoins_total",
		Help:      "Counter of interfaces joined again after they were removed and re-created.",
	})

	mdnsLimited = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "mdns_queries_limited_total",
		Help:      "Counter of mDNS queries not sent, by reason: rate (the query_rate budget spent), name (asked less than a second ago).",
	}, []string{"reason"})

	mdnsAnswers = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "mdns_answers_received_total",
		Help:      "Counter of mDNS answer records accepted into the cache (goodbyes included).",
	})

	mdnsResponses = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "mdns_responses_sent_total",
		Help:      "Counter of mDNS responses sent by kind (multicast, unicast, legacy, announcement, goodbye).",
	}, []string{"kind"})

	mdnsDropped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "mdns_dropped_total",
		Help:      "Counter of mDNS packets or records ignored by reason (malformed, off_link, interface, out_of_zone).",
	}, []string{"reason"})

	cacheEntries = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "cache_entries",
		Help:      "Names in the mDNS answer cache (positive and negative).",
	}, []string{"server"})

	records = promauto.NewGaugeVec(prometheus.GaugeOpts{
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

// Container updater metrics.
var (
	updaterContainers = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "updater_containers",
		Help:      "Containers the container updater tracks (running, with a name in the zones).",
	}, []string{"server"})

	updaterConnected = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "updater_connected",
		Help:      "1 while the container updater follows the engine's events, else 0.",
	}, []string{"server"})

	updaterEvents = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "updater_events_total",
		Help:      "Counter of container engine events handled by action (start, die, stop, destroy, connect, disconnect).",
	}, []string{"action"})

	updaterReconciles = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "updater_reconciles_total",
		Help:      "Counter of full reconciles against the engine's list of running containers.",
	})

	updaterChecks = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "updater_checks_total",
		Help:      "Counter of container health checks by result (pass, fail, invalid).",
	}, []string{"result"})
)
