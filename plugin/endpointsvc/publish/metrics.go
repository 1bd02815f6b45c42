package publish

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// peersDown is the number of peer replicas this replica finds down
	// (direct probes failed DownAfter times in a row while its Lease has
	// lapsed) and so takes out of the Service's slices.
	peersDown = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "endpointsvc", Name: "publish_peers_down",
		Help: "Peer replicas this replica finds down and takes out of the DNS Service's EndpointSlices.",
	}, []string{"service"})

	// writeErrors counts EndpointSlice and Lease writes the API refused or
	// did not answer (a conflict or a slice already gone is not one), and
	// lists and watches it refused.
	writeErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "endpointsvc", Name: "publish_errors_total",
		Help: "EndpointSlice and Lease writes of publish that failed (retried at the next round), and refused watches.",
	}, []string{"service"})
)
