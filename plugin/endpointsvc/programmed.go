package endpointsvc

import (
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"

	"github.com/prometheus/client_golang/prometheus"
)

// observeProgrammed observes the programming latency of the API changes p
// carries (feed.Triggered), now that the table that serves them was
// swapped in (e.mu is held: the swaps are in order). A trigger time
// after now (the API server's clock ahead of this node's) counts as 0.
// Only patches carry triggers: a whole state (the first list, a snapshot,
// a reload's carried table) is no change the API just made.
func (e *Endpointsvc) observeProgrammed(p feed.Patch, now time.Time) {
	tp, ok := p.(feed.Triggered)
	if !ok {
		return
	}
	for _, t := range tp.Triggers() {
		o, ok := e.programmed[t.Kind]
		if !ok { // each service_kind's histogram resolved once (e.mu)
			if e.programmed == nil {
				e.programmed = map[string]prometheus.Observer{}
			}
			o = programmingLatency.WithLabelValues(t.Kind)
			e.programmed[t.Kind] = o
		}
		o.Observe(max(now.Sub(t.At), 0).Seconds())
	}
}
