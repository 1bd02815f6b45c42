package virtualconsul

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// lifecycle holds the running source and snapshot writer between
// OnStartup and OnShutdown.
type lifecycle struct {
	mu     sync.Mutex
	cancel context.CancelFunc // nil when not running
	wg     sync.WaitGroup     // the source's and the writer's goroutines
	writer *persist.Writer    // nil without a snapshot
}

// handOver, before a reload, leaves the serving table for the instance
// that replaces this one: a reload during a control-plane outage then keeps
// answering, with or without a snapshot.
func (v *VirtualConsul) handOver() error {
	if t := v.table.Load(); t != nil {
		carried.Put(v.carryKey, v.sourceKey(), t)
	} else {
		carried.Drop(v.carryKey)
	}
	return nil
}

// keep, when a reload failed, takes back what handOver left: this instance
// serves on with its own table, and no stale table waits for a later reload.
func (v *VirtualConsul) keep() error {
	carried.Drop(v.carryKey)
	carried.Failed()
	return nil
}

// start serves the table carried across a reload or else the snapshot at
// once, then starts the source.
func (v *VirtualConsul) start() error {
	v.register() // listed by inspect from now on
	if v.remote != nil {
		// A fresh listener state is not failing: clear a gauge the replaced
		// instance (before a reload) may have left at 1.
		gauges.Of(sourceFailing, v.servers, v.metricZone, "envoy").Set(0)
		return nil
	}
	if t, ok := carried.Take(v.carryKey, v.sourceKey()); ok {
		v.swap(t) // at least as new as the snapshot
		v.served("carried")
		log.Infof("Carried %d entries across the reload", t.Len())
	} else if v.snapshot != "" {
		v.loadSnapshot()
	}
	if v.src == nil {
		return nil
	}
	v.life.mu.Lock()
	defer v.life.mu.Unlock()
	if v.life.cancel != nil {
		return nil // already running
	}
	ctx, cancel := context.WithCancel(context.Background())
	v.life.cancel, v.life.writer = cancel, nil
	if v.snapshot != "" {
		w := v.newSnapshotWriter()
		v.life.writer = w
		v.life.wg.Go(func() { w.Run(ctx) }) // writes what is pending when ctx ends
	}
	if sd, ok := v.src.(source.Seeded); ok {
		if t := v.table.Load(); t != nil {
			sd.Seed(t)
		}
	}
	report := v.reporter(v.src.Name(), v.life.writer)
	v.life.wg.Go(func() { v.src.Run(ctx, report) })
	return nil
}

// stop stops the source and the snapshot writer and waits for them; a
// table the source reported while the writer was stopping is written too.
func (v *VirtualConsul) stop() error {
	v.unregister()
	v.life.mu.Lock()
	defer v.life.mu.Unlock()
	if v.life.cancel == nil {
		return nil
	}
	v.life.cancel()
	v.life.wg.Wait()
	if v.life.writer != nil {
		v.life.writer.Flush()
	}
	v.life.cancel, v.life.writer = nil, nil
	return nil
}

// swap makes t the serving table.
func (v *VirtualConsul) swap(t *table.Table) {
	v.table.Store(t)
	gauges.Of(tableEntries, v.servers, v.metricZone).Set(float64(t.Len()))
}

// loadSnapshot serves the persisted table, if there is a valid one; a
// corrupt snapshot is logged and ignored.
func (v *VirtualConsul) loadSnapshot() {
	t, err := readSnapshot(v.snapshot)
	n := 0
	if t != nil {
		n = t.Len()
	}
	persist.Loaded(v.snapshot, n)
	switch {
	case err != nil:
		syncCount.WithLabelValues(v.metricZone, "snapshot", source.SyncRejected).Inc()
		log.Errorf("Ignoring the snapshot: %v", err)
	case t != nil:
		syncCount.WithLabelValues(v.metricZone, "snapshot", source.SyncOK).Inc()
		v.swap(t)
		v.served("snapshot")
		log.Infof("Loaded %d entries from snapshot %q", t.Len(), v.snapshot)
	}
}

// apply serves a source's new table, counts what it skipped and hands it
// to the snapshot writer.
func (v *VirtualConsul) apply(s source.Sync, src string, changed gauges.Set, snap *persist.Writer) {
	v.swap(s.Table)
	v.served(src)
	v.insp.lastChange.Store(time.Now().UnixNano())
	for _, r := range table.SkipReasons {
		gauges.Of(entriesSkipped, v.servers, v.metricZone, src, r).Set(float64(s.Skipped[r]))
	}
	changed.SetToCurrentTime()
	log.Infof("Synced %d entries from source %s", s.Table.Len(), src)
	if snap != nil {
		snap.Offer(s.Table.WriteJSON, s.Table.Len(), time.Now()) // written off the source's goroutine, coalesced
	}
}

// reporter returns the function a source reports its sync attempts to. It
// swaps good tables in, writes the snapshot, counts every attempt and logs
// state changes only: one line when the source starts failing (an error,
// a disconnect, a timeout) and one when it recovers; the last good table
// keeps serving meanwhile.
func (v *VirtualConsul) reporter(src string, snap *persist.Writer) func(source.Sync) {
	var (
		failing    bool   // touched by the source's goroutine only
		lastReject string //
		reason     string // the reason series at 1 while failing
	)
	failingGauge := gauges.Of(sourceFailing, v.servers, v.metricZone, src)
	synced := gauges.Of(lastSync, v.servers, v.metricZone, src)
	changed := gauges.Of(lastChange, v.servers, v.metricZone, src)
	failingGauge.Set(0)
	return func(s source.Sync) {
		syncCount.WithLabelValues(v.metricZone, src, s.Result).Inc()
		if s.Result == source.SyncOK || s.Result == source.SyncUnchanged || s.Result == source.SyncNoTable {
			synced.SetToCurrentTime()
			v.insp.lastSync.Store(time.Now().UnixNano())
		}
		if s.Result != source.SyncError && failing {
			failing = false
			failingGauge.Set(0)
			gauges.Of(failingReason, v.servers, v.metricZone, src, reason).Set(0)
			log.Infof("Source %s recovered", src)
		}
		switch s.Result {
		case source.SyncOK:
			v.apply(s, src, changed, snap)
			lastReject = ""
		case source.SyncUnchanged:
		case source.SyncRejected:
			if msg := s.Err.Error(); msg != lastReject {
				log.Errorf("Rejected a table, the previous one keeps serving: %s", msg)
				lastReject = msg
			}
		case source.SyncNoTable:
			if msg := s.Err.Error(); msg != lastReject {
				log.Warningf("Source %s carries no table, the previous one keeps serving: %s", src, msg)
				lastReject = msg
			}
		default:
			why := cmp.Or(s.Reason, source.SyncError)
			if failing && why != reason {
				gauges.Of(failingReason, v.servers, v.metricZone, src, reason).Set(0)
				log.Errorf("Source %s still failing, now: %s", src, s.Err)
			}
			if !failing {
				log.Errorf("Source %s failing, the previous table keeps serving: %s", src, s.Err)
			}
			failing, reason = true, why
			failingGauge.Set(1)
			gauges.Of(failingReason, v.servers, v.metricZone, src, reason).Set(1)
		}
	}
}
