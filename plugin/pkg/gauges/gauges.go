// Package gauges sets a plugin's gauges for every server of its block.
//
// CoreDNS's own plugins label their metrics with `server` (the address a
// query came in on, metrics.WithServer). A gauge that is set outside a query
// (a table's size after a sync, a source's state) takes the block's servers
// from conf.Servers instead, so that two blocks serving the same zone on
// other ports keep their own figures rather than overwrite each other's.
package gauges

import "github.com/prometheus/client_golang/prometheus"

// Set is one gauge per server of a block.
type Set []prometheus.Gauge

// Of returns vec's gauges of servers, the other labels following the
// server's (vec's first label is "server").
func Of(vec *prometheus.GaugeVec, servers []string, labels ...string) Set {
	gs := make(Set, 0, len(servers))
	for _, srv := range servers {
		gs = append(gs, vec.WithLabelValues(append([]string{srv}, labels...)...))
	}
	return gs
}

// Set sets every gauge to x.
func (gs Set) Set(x float64) {
	for _, g := range gs {
		g.Set(x)
	}
}

// SetToCurrentTime sets every gauge to the current Unix time.
func (gs Set) SetToCurrentTime() {
	for _, g := range gs {
		g.SetToCurrentTime()
	}
}

// SetBool sets every gauge to 1 when b, else to 0.
func (gs Set) SetBool(b bool) {
	x := 0.0
	if b {
		x = 1
	}
	gs.Set(x)
}
