package endpointsvc

import (
	"sync/atomic"

	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// requestCount counts queries answered in the zone, by result: answer,
	// nodata, nxdomain, fallthrough, servfail (no state yet).
	requestCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "requests_total",
		Help:      "Counter of queries in the endpointsvc zones, by result.",
	}, []string{"server", "zone", "result"})

	// servicesGauge is the number of services in the served state.
	servicesGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "services",
		Help:      "Number of services in the served state.",
	}, []string{"server", "zone"})

	// endpointsGauge is the number of tasks the predicate admitted.
	endpointsGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "endpoints",
		Help:      "Number of endpoints (tasks that count) in the served state.",
	}, []string{"server", "zone"})

	// syncCount counts sync attempts by source and result: updated (a
	// whole state), patched (a part of it), unchanged, error.
	syncCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "syncs_total",
		Help:      "Counter of state syncs, by source and result.",
	}, []string{"zone", "source", "result"})

	// snapshotBytes counts the bytes of snapshot files written (each whole
	// write replaces the file) and appended to their change logs, and
	// snapshotWrites the whole files, snapshotAppends the appends.
	snapshotBytes = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_written_bytes_total",
		Help:      "Counter of bytes of snapshot files written, whole or appended to their change log.",
	}, []string{"zone"})
	snapshotAppends = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_log_appends_total",
		Help:      "Counter of appends to the snapshot's change log.",
	}, []string{"zone"})
	snapshotWrites = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_writes_total",
		Help:      "Counter of snapshot files written.",
	}, []string{"zone"})
	// snapshotErrors counts snapshot writes that failed (the file keeps
	// its last good state; the next change writes again).
	snapshotErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_write_errors_total",
		Help:      "Counter of snapshot writes that failed.",
	}, []string{"zone"})

	// snapshotHeld is 1 while the snapshot keeps the last non-empty state
	// against an empty sync (the empty-sync rule, persist.Writer).
	snapshotHeld = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "snapshot_empty_held",
		Help:      "1 while the snapshot keeps the last non-empty state because the source returned none, for less than empty_grace.",
	}, []string{"server", "zone"})

	// lastSync is the time of the last successful sync (updated or
	// unchanged), by source.
	lastSync = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: pluginName,
		Name:      "last_sync_timestamp_seconds",
		Help:      "Unix time of the last successful state sync, by source.",
	}, []string{"server", "zone", "source"})
)

// Results of a query, the values of requests_total's result label.
const (
	resultAnswer = iota
	resultNodata
	resultNxdomain
	resultFallthrough
	resultServfail
	nResults
)

var resultNames = [nResults]string{"answer", "nodata", "nxdomain", "fallthrough", "servfail"}

// requestCounters are the requests_total counters of one server and zone,
// resolved once so that the hot path does no label lookup (which would take
// the metric vector's lock).
type requestCounters struct {
	server string
	zone   string
	c      [nResults]prometheus.Counter
}

// serverCounters are one server's requestCounters, per zone (nil until the
// zone's first query).
type serverCounters struct {
	zones []atomic.Pointer[requestCounters]
}

func newRequestCounters(server, zone string) *requestCounters {
	rc := &requestCounters{server: server, zone: zone}
	for i, r := range resultNames {
		rc.c[i] = requestCount.WithLabelValues(server, zone, r)
	}
	return rc
}

// cnameConflicts is the number of services (in endpoint mode) with more
// than one CNAME candidate: several distinct FQDN endpoints, or FQDN
// endpoints beside IP endpoints. Such a name gets one CNAME (the
// lexicographically first FQDN) or, beside IPs, only the IPs.
var cnameConflicts = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: plugin.Namespace,
	Subsystem: pluginName,
	Name:      "cname_conflicts",
	Help:      "Number of services with more than one CNAME candidate (FQDN endpoints).",
}, []string{"server", "zone"})

// programmingLatency is the DNS programming latency (the SIG-scalability
// SLI, the kubernetes plugin's dns_programming_duration_seconds with its
// buckets and service_kind values): the time from an EndpointSlice's
// last-change-trigger-time to the table swap that serves the change, on a
// replica that watches the API and on a follower of the replication
// stream alike (programmed.go).
var programmingLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{
	Namespace:                   plugin.Namespace,
	Subsystem:                   pluginName,
	Name:                        "dns_programming_duration_seconds",
	Help:                        "Histogram of the time (in seconds) from an EndpointSlice's last-change-trigger-time to the table that answers with the change.",
	Buckets:                     prometheus.ExponentialBuckets(0.001, 2, 20), // 1 ms doubling to 524 s (~9 min), then +Inf: the kubernetes plugin's
	NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
}, []string{"service_kind"})
