package replica

import (
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The package logs and counts as the endpointsvc plugin it is part of.
const pluginName = "endpointsvc"

var log = clog.NewWithPlugin(pluginName)

var (
	// leader
	streamsGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replicate_streams",
		Help: "Replication streams open to followers.",
	}, []string{"zone"})
	statesSent = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replicate_sent_total",
		Help: "States sent on replication streams, by kind: full (the whole state), resume (a stream opened with the changes since the follower's state: its generation, or its digest from another replica), buckets (a stream opened with the buckets whose digests differ from the follower's, version 4), change.",
	}, []string{"zone", "kind"})
	busyRefused = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replicate_busy_total",
		Help: "Replication streams refused with 503 and a Retry-After: every whole-send slot was taken.",
	}, []string{"zone"})
	wholeEncodes = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replicate_whole_encodes_total",
		Help: "Whole states encoded for replication streams (the streams that start meanwhile share one).",
	}, []string{"zone"})
	sentBytes = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replicate_sent_bytes_total",
		Help: "Bytes sent on replication streams.",
	}, []string{"zone"})

	// follower
	receivedBytes = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replica_received_bytes_total",
		Help: "Bytes received from the replication stream.",
	}, []string{"zone"})
	connectedGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replica_connected",
		Help: "1 while the follower's replication stream is open (a response received), else 0.",
	}, []string{"zone"})
	receivedRecords = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "replica_received_records_total",
		Help: "Name records received from the replication stream, by kind: full (in a whole state) or change.",
	}, []string{"zone", "kind"})
)
