package endpointsvc

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/replica"
	"github.com/meshdns/meshdns/plugin/pkg/carry"
	"github.com/meshdns/meshdns/plugin/pkg/persist"

	"github.com/prometheus/client_golang/prometheus"
)

// syncer owns the served table and everything that changes it: it applies
// states and patches from the source and the snapshot, runs the schema's
// background work, writes the snapshot and carries the table over a
// reload. Only tbl and ready are read by the hot path. Its methods are on
// Endpointsvc, which holds the zones and the schema.
type syncer struct {
	tbl   atomic.Pointer[table]
	ready atomic.Bool
	fresh freshness // how far tbl is behind the source (stale.go)

	servers      []string // the server label of the gauges (conf.Servers)
	snapshotPath string
	emptyGrace   time.Duration   // the empty-sync rule's grace (persist.Writer)
	snapshot     *persist.Writer // nil without snapshotPath; set by start
	// startupTimeout (startup_timeout) makes start-up wait for a table, up
	// to that long, as the kubernetes plugin waits for its sync; 0: wait
	// firstSyncWait for the source's first result, a failure too
	startupTimeout time.Duration
	carryKey       string // identifies this instance's table across a reload

	mu     sync.Mutex // serialises table builds; never taken by ServeDNS
	serial uint32
	tg     *tableGauges // resolved on the first show; e.mu
	// programmed is programming_duration_seconds by service_kind,
	// resolved on each kind's first observation; e.mu
	programmed map[string]prometheus.Observer

	cancel context.CancelFunc
	wg     sync.WaitGroup
	first  chan struct{} // closed on the source's first result
	once   sync.Once
}

// firstSyncWait bounds how long start-up (and so a reload, while the old
// instance still serves) waits for the source's first result, so that a new
// instance does not answer SERVFAIL right after a reload.
const firstSyncWait = 3 * time.Second

// carried is what a reload hands from the old instance to the new one: the
// immutable table and what the schema keeps besides it.
type carried struct {
	tbl        *table
	extra      any
	repl       *replica.Carried // the replication leader's state; nil without one
	staleSince int64            // freshness.staleSince
}

var carryStore carry.Store[*carried]

// apply builds a table from st, swaps it in, and persists st when it came
// from a source (not from the snapshot itself). Once ctx is done it does
// nothing.
func (e *Endpointsvc) apply(ctx context.Context, source string, st feed.State, persistIt bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	t := e.publish(e.schema.build(st))
	e.tap(t.model, nil)
	log.Infof("Synced %d services, %d endpoints from %s in %v", t.model.Services(), t.model.Endpoints(), source, time.Since(start).Round(time.Microsecond))
	if persistIt && e.snapshot != nil {
		e.snapshot.Offer(st.Snapshot, st.Len(), start) // written off the lock, coalesced
	}
}

// applyPatch patches the served table, or builds the source's whole state
// when the schema cannot patch it, and hands the snapshot writer the
// source's whole state. Once ctx is done it does nothing.
func (e *Endpointsvc) applyPatch(ctx context.Context, p feed.Patch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	var t *table
	cur := e.tbl.Load()
	if cur == nil {
		log.Errorf("A patch before any state") // sources send a state first
		return
	}
	if m, whole := e.schema.patch(cur.model, p); m != nil {
		t = e.publish(m)
		e.observeProgrammed(p, time.Now())
		e.tap(t.model, p)
	} else {
		t = e.publish(e.schema.build(whole))
		e.observeProgrammed(p, time.Now())
		e.tap(t.model, nil)
	}
	if e.snapshot != nil {
		if rec := e.schema.logRecord(p); rec != nil {
			e.snapshot.AppendChange(rec, p.Snapshot, t.model.Services(), start) // appended to the change log, coalesced
		} else {
			e.snapshot.Offer(p.Snapshot, t.model.Services(), start)
		}
	}
}

// rebuild runs f with e.mu held and swaps in the table it returns, if any
// (the schema's background work).
func (e *Endpointsvc) rebuild(f func() modelTable) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := f(); m != nil {
		e.tap(e.publish(m).model, nil)
	}
}

// publish swaps in m with the next serial and updates the gauges; e.mu is
// held.
func (e *Endpointsvc) publish(m modelTable) *table {
	t := &table{model: m, serial: e.nextSerial()}
	e.show(t)
	return t
}

// show swaps t in and updates the gauges; e.mu is held.
func (e *Endpointsvc) show(t *table) {
	e.tbl.Store(t)
	e.ready.Store(true)
	g := e.tableGauges()
	g.services.Set(float64(t.model.Services()))
	g.conflicts.Set(float64(t.model.Conflicts()))
	g.endpoints.Set(float64(t.model.Endpoints()))
}

// nextSerial advances the SOA serial: the time in seconds, or one more than
// the last when that is not later; e.mu is held.
func (e *Endpointsvc) nextSerial() uint32 {
	e.serial++
	if now := uint32(time.Now().Unix()); now > e.serial {
		e.serial = now
	}
	return e.serial
}

// loadSnapshot applies the snapshot file, if there is a valid one, with
// the good records of its change log replayed onto it.
func (e *Endpointsvc) loadSnapshot(ctx context.Context) {
	if e.snapshotPath == "" {
		return
	}
	persist.Loaded(e.snapshotPath, 0)
	st, at, err := e.readSnapshot()
	if err != nil || st == nil {
		if err != nil {
			log.Warningf("Ignoring snapshot %q: %v", e.snapshotPath, err)
		}
		return
	}
	persist.Loaded(e.snapshotPath, st.Len())
	e.replicaProvisional() // followers wait for the source's first result (a bounded while)
	e.apply(ctx, "snapshot", st, false)
	if !at.IsZero() {
		e.fresh.staleSet(at) // as old as the files, until the source reports
	}
}

// readSnapshot reads the snapshot file and replays its change log's good
// records onto it (snapshot_log.go's rules: a torn or corrupt tail, a
// record that does not decode or a log of another snapshot is logged and
// left out, never the snapshot itself). nil: no snapshot. at is when the
// state was written: the snapshot's time, or the log's when it replayed
// records of it.
func (e *Endpointsvc) readSnapshot() (st feed.State, at time.Time, err error) {
	s, err := persist.ReadWithLog(e.snapshotPath)
	if err != nil || s.Base == nil {
		return nil, at, err
	}
	st, err = e.schema.decodeSnapshot(s.Base)
	if err != nil {
		return nil, at, err
	}
	if fi, err := os.Stat(e.snapshotPath); err == nil {
		at = fi.ModTime()
	}
	if s.LogTail != nil {
		log.Warningf("Snapshot %q: %v; replaying the %d good records before it", e.snapshotPath, s.LogTail, len(s.Records))
	}
	if len(s.Records) == 0 {
		return st, at, nil
	}
	out, n, err := e.schema.replay(st, s.Records)
	if err != nil {
		log.Warningf("Snapshot %q: %v; %d of %d records replayed", e.snapshotPath, err, n, len(s.Records))
	}
	if fi, err := os.Stat(persist.LogPath(e.snapshotPath)); err == nil && n > 0 && fi.ModTime().After(at) {
		at = fi.ModTime()
	}
	return out, at, nil
}

// handOver keeps the served table for the instance a reload starts.
func (e *Endpointsvc) handOver() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.tbl.Load(); t != nil {
		carryStore.Put(e.carryKey, &carried{tbl: t, extra: e.schema.carry(), repl: e.replicaHandOver(), staleSince: e.fresh.staleSince.Load()})
	}
}

// takeOver serves the table the previous instance handed over, if any.
func (e *Endpointsvc) takeOver() bool {
	c, ok := carryStore.Take(e.carryKey)
	if !ok {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.schema.restore(c.extra)
	e.replicaTakeOver(c.repl)
	e.serial = c.tbl.serial
	e.fresh.staleSince.Store(c.staleSince)
	e.show(c.tbl)
	e.tap(c.tbl.model, nil)
	log.Infof("Serving %d services, %d endpoints carried over the reload", c.tbl.model.Services(), c.tbl.model.Endpoints())
	return true
}

// start serves the carried table or loads the snapshot, and runs the
// source and the schema's background work until stop.
func (e *Endpointsvc) start(src feed.Source) {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if !e.takeOver() {
		e.loadSnapshot(ctx)
	}
	e.first = make(chan struct{})
	e.once = sync.Once{}
	if e.snapshotPath != "" {
		e.snapshot = e.newSnapshotWriter()
		w := e.snapshot
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			w.Run(ctx)
		}()
	}
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		src.Run(ctx, &sink{e: e, ctx: ctx, source: src.Name()})
	}()
	go func() {
		defer e.wg.Done()
		e.schema.background(ctx, e.rebuild)
	}()
	e.waitFirst()
}

// waitFirst holds start-up until there is something to serve: the
// source's first result (firstSyncWait at most), or with startup_timeout
// a table (that long at most).
func (e *Endpointsvc) waitFirst() {
	if e.tbl.Load() != nil {
		return
	}
	if e.startupTimeout == 0 {
		t := time.NewTimer(firstSyncWait)
		defer t.Stop()
		select {
		case <-e.first:
		case <-t.C:
		}
		return
	}
	deadline := time.Now().Add(e.startupTimeout)
	for e.tbl.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(min(50*time.Millisecond, time.Until(deadline)))
	}
}

// firstResult notes that the source reported for the first time.
func (e *Endpointsvc) firstResult() { e.once.Do(func() { close(e.first) }) }

// stop ends the goroutines started by start and waits for them.
func (e *Endpointsvc) stop() {
	if e.cancel != nil {
		e.cancel()
		e.wg.Wait()
		e.cancel = nil
		if e.snapshot != nil {
			e.snapshot.Flush() // a state applied while the writer was stopping
		}
	}
}
