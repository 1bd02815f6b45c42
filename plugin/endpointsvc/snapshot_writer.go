package endpointsvc

import (
	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// newSnapshotWriter returns the writer of this instance's snapshot: off the
// sync path, coalesced to at most one write a second (persist.Writer), a
// patch's change appended to the change log <snapshot>.log instead of the
// whole state written (compacted when the log passes the snapshot's size,
// and at a clean stop), and
// following the empty-sync rule with e.emptyGrace. Its entries are the
// table's services: a state with no service is empty.
func (e *Endpointsvc) newSnapshotWriter() *persist.Writer {
	zone := e.Zones[0]
	w := persist.NewWriter(e.snapshotPath, log)
	w.EmptyGrace = e.emptyGrace
	w.ChangeLog = true // a patch appends its record to <snapshot>.log; compacted now and then
	w.OnWrite = func(n int64) {
		snapshotWrites.WithLabelValues(zone).Inc()
		snapshotBytes.WithLabelValues(zone).Add(float64(n))
	}
	w.OnAppend = func(n int64) {
		snapshotAppends.WithLabelValues(zone).Inc()
		snapshotBytes.WithLabelValues(zone).Add(float64(n)) // bytes written to disk, whole or appended
	}
	errs := snapshotErrors.WithLabelValues(zone) // listed at 0, so that a rule sees the first error
	w.OnError = func(error) { errs.Inc() }
	w.OnHold = gauges.Of(snapshotHeld, e.servers, zone).SetBool
	return w
}
