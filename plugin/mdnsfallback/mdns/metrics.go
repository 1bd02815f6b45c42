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

// The label values of the counters above, listed at 0 when a node is made
// so that a rule's rate() sees the first event (a counter that appears at 1
// has no increase).
var (
	limitReasons  = []string{limitedRate, limitedName}
	responseKinds = []string{"multicast", "unicast", "legacy", "announcement", "goodbye"}
	dropReasons   = []string{"interface", "oversized", "bad_source", "malformed", "opcode", "source_port", "ttl",
		"unexpected", "off_link", "own", "stale", "unsolicited", "bad_address", "out_of_zone", "reply_rate", "link_local"}
)

// listCounters lists every label value of the counters at 0.
func listCounters() {
	for _, r := range limitReasons {
		mdnsLimited.WithLabelValues(r)
	}
	for _, k := range responseKinds {
		mdnsResponses.WithLabelValues(k)
	}
	for _, r := range dropReasons {
		mdnsDropped.WithLabelValues(r)
	}
}
