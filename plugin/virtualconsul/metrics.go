package virtualconsul

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Request results (the result label of requestCount).
const (
	resultHit         = "hit"          // answered with the VIP
	resultNodata      = "nodata"       // the name exists, not for this type
	resultMiss        = "miss"         // not in the table
	resultAmbiguous   = "ambiguous"    // more than one VIP: passed on
	resultPassthrough = "passthrough"  // in the zone, not a virtual name we answer
	resultNotReady    = "not_ready"    // no table yet: passed on
	resultRemoteError = "remote_error" // remote-listener mode: the listener failed, passed on
	resultBackoff     = "backoff"      // remote-listener mode: in the backoff window, passed on
)

var (
	requestCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "requests_total",
		Help:      "Counter of queries in the plugin's zones, by result.",
	}, []string{"server", "result"})

	tableEntries = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "entries",
		Help:      "The number of distinct names in the serving table.",
	}, []string{"server", "zone"})

	syncCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "syncs_total",
		Help:      "Counter of table sync attempts, by source and result.",
	}, []string{"zone", "source", "result"})

	sourceFailing = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "source_failing",
		Help:      "1 while the source is failing (error, disconnect, timeout) and the last good table serves, else 0.",
	}, []string{"server", "zone", "source"})

	// failingReason says why the source is failing: 1 on the current
	// reason's series while failing, every series 0 once it recovered.
	failingReason = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "source_failing_reason",
		Help:      "1 for the reason the source is failing (error, acl_filtered, no_leader, no_response, tls, denied), else 0.",
	}, []string{"server", "zone", "source", "reason"})

	// entriesSkipped counts the entries the last table built left out.
	entriesSkipped = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "entries_skipped",
		Help:      "Entries of the control plane left out of the serving table, by reason (name, address, no_address).",
	}, []string{"server", "zone", "source", "reason"})

	// snapshotHeld is 1 while the snapshot keeps the last non-empty table
	// against an empty sync (the empty-sync rule, persist.Writer).
	snapshotHeld = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_empty_held",
		Help:      "1 while the snapshot keeps the last non-empty table because the source returned none, for less than empty_grace.",
	}, []string{"server", "zone"})

	// snapshotErrors counts snapshot writes that failed (the file keeps
	// its last good table; the next change writes again).
	snapshotErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_write_errors_total",
		Help:      "Counter of snapshot writes that failed.",
	}, []string{"server", "zone"})

	// lastSync moves on every successful check of the source, changed or
	// not, so that an alert on its age fires for a source that stopped
	// answering, not for a quiet one; lastChange only when the table
	// changed.
	lastSync = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "last_sync_timestamp_seconds",
		Help:      "The time of the last successful check of the source (changed or not), by source.",
	}, []string{"server", "zone", "source"})
	lastChange = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "last_change_timestamp_seconds",
		Help:      "The time the source last changed the table, by source.",
	}, []string{"server", "zone", "source"})
)

// counters are one server's request counters, resolved once so that the
// query path only increments (no label lookup, no lock).
type counters struct {
	hit, nodata, miss, ambiguous, passthrough, notReady prometheus.Counter
	remoteError, backoff                                prometheus.Counter
}

func newCounters(server string) *counters {
	c := func(result string) prometheus.Counter { return requestCount.WithLabelValues(server, result) }
	return &counters{
		hit: c(resultHit), nodata: c(resultNodata), miss: c(resultMiss),
		ambiguous: c(resultAmbiguous), passthrough: c(resultPassthrough), notReady: c(resultNotReady),
		remoteError: c(resultRemoteError), backoff: c(resultBackoff),
	}
}
