package endpointsvc

import (
	"github.com/meshdns/meshdns/plugin/pkg/gauges"

	"github.com/prometheus/client_golang/prometheus"
)

// tableGauges are the gauges a swapped-in table sets, resolved once per
// instance (its servers and first zone never change), so that a patch
// costs no label lookups: services, cname_conflicts, endpoints.
type tableGauges struct {
	services, conflicts, endpoints gauges.Set
}

// tableGauges returns the instance's table gauges, resolving them on first
// use; e.mu is held.
func (e *Endpointsvc) tableGauges() *tableGauges {
	if e.tg == nil {
		zone := e.Zones[0]
		e.tg = &tableGauges{
			services:  gauges.Of(servicesGauge, e.servers, zone),
			conflicts: gauges.Of(cnameConflicts, e.servers, zone),
			endpoints: gauges.Of(endpointsGauge, e.servers, zone),
		}
	}
	return e.tg
}

// syncMetrics are one source's syncs_total counters, by result, and its
// last_sync_timestamp_seconds gauges, each resolved on its first use (a
// series appears when it is first counted, as before). Only the source's
// goroutine uses them (the sink's methods).
type syncMetrics struct {
	named        bool // zone, source and servers are set
	zone, source string
	servers      []string
	results      map[string]prometheus.Counter
	last         gauges.Set
}

// count adds one sync with result.
func (m *syncMetrics) count(result string) {
	c, ok := m.results[result]
	if !ok {
		if m.results == nil {
			m.results = map[string]prometheus.Counter{}
		}
		c = syncCount.WithLabelValues(m.zone, m.source, result)
		m.results[result] = c
	}
	c.Inc()
}

// synced sets the time of the last successful sync to now.
func (m *syncMetrics) synced() {
	if m.last == nil {
		m.last = gauges.Of(lastSync, m.servers, m.zone, m.source)
	}
	m.last.SetToCurrentTime()
}
