package updater

import (
	"github.com/coredns/coredns/plugin"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// subsystem is the plugin's name: the metrics keep their names whichever
// package registers them.
const subsystem = "mdnsfallback"

var (
	updaterContainers = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "updater_containers",
		Help:      "Containers the container updater tracks (running, with a name in the zones).",
	}, []string{"server"})

	updaterConnected = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "updater_connected",
		Help:      "1 while the container updater follows the engine's events, else 0.",
	}, []string{"server"})

	updaterEvents = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "updater_events_total",
		Help:      "Counter of container engine events handled by action (start, die, stop, destroy, connect, disconnect).",
	}, []string{"action"})

	updaterReconciles = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "updater_reconciles_total",
		Help:      "Counter of full reconciles against the engine's list of running containers.",
	})

	updaterChecks = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: subsystem,
		Name:      "updater_checks_total",
		Help:      "Counter of container health checks by result (pass, fail, invalid).",
	}, []string{"result"})
)
