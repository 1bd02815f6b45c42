package virtualconsul

import (
	"bytes"
	"fmt"

	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"

	"github.com/prometheus/client_golang/prometheus"
)

// readSnapshot loads the table persisted at path. A missing snapshot is
// (nil, nil); a corrupt one is an error, which the caller logs and ignores.
func readSnapshot(path string) (*table.Table, error) {
	data, err := persist.ReadFile(path)
	if err != nil || data == nil {
		return nil, err
	}
	b := table.NewBuilder(0)
	if err := table.Decode(bytes.NewReader(data), b); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return b.Table(), nil
}

// newSnapshotWriter returns the writer of this instance's snapshot: off the
// source's goroutine, coalesced to at most one write a second, and
// following the empty-sync rule with v.emptyGrace (persist.Writer).
func (v *VirtualConsul) newSnapshotWriter() *persist.Writer {
	w := persist.NewWriter(v.snapshot, log)
	w.EmptyGrace = v.emptyGrace
	w.OnHold = gauges.Of(snapshotHeld, v.servers, v.metricZone).SetBool
	var errs []prometheus.Counter // listed at 0, so that a rule sees the first error
	for _, s := range v.servers {
		errs = append(errs, snapshotErrors.WithLabelValues(s, v.metricZone))
	}
	w.OnError = func(error) {
		for _, c := range errs {
			c.Inc()
		}
	}
	return w
}
