package mdns

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// subsystem is the plugin's name: the metrics keep their names whichever
// package registers them.
const subsystem = "mdnsfallback"

var (
	mdnsQueries = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "mdns_queries_sent_total",
		Help:      "Counter of mDNS queries sent (one per interface).",
	})

	mdnsRejoins = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "mdns_interface_rejoins_total",
		Help:      "Counter of interfaces joined again after they were removed and re-created.",
	})

	mdnsLimited = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "mdns_queries_limited_total",
		Help:      "Counter of mDNS queries not sent, by reason: rate (the query_rate budget spent), name (asked less than a second ago).",
	}, []string{"reason"})

	mdnsAnswers = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "mdns_answers_received_total",
		Help:      "Counter of mDNS answer records accepted into the cache (goodbyes included).",
	})

	mdnsResponses = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "mdns_responses_sent_total",
		Help:      "Counter of mDNS responses sent by kind (multicast, unicast, legacy, announcement, goodbye).",
	}, []string{"kind"})

	mdnsDropped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "mdns_dropped_total",
		Help:      "Counter of mDNS packets or records ignored by reason (malformed, off_link, interface, out_of_zone).",
	}, []string{"reason"})

	cacheEntries = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "cache_entries",
		Help:      "Names in the mDNS answer cache (positive and negative).",
	}, []string{"server"})
)
