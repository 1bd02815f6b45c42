package endpointsvc

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/pkg/carry"
	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// syncer owns the served table and everything that changes it: it applies
// states from the source and from the snapshot, re-resolves hostname
// advertise addresses every TTL, and writes the snapshot. Only tbl and
// ready are read by the hot path. Its methods are on Endpointsvc, which
// holds the zones.
type syncer struct {
	tbl   atomic.Pointer[table]
	ready atomic.Bool

	includeUnhealthy bool
	endpointMode     bool     // addresses endpoint: answer the tasks' own addresses
	servers          []string // the server label of the gauges (conf.Servers)
	snapshotPath     string
	emptyGrace       time.Duration   // the empty-sync rule's grace (persist.Writer)
	snapshot         *persist.Writer // nil without snapshotPath; set by start
	refresh          time.Duration   // hostname re-resolution period (the TTL)
	carryKey         string          // identifies this instance's table across a reload

	mu       sync.Mutex // serialises table builds; never taken by ServeDNS nor held during lookups
	state    *State
	resolver *hostResolver
	serial   uint32
	kick     chan struct{} // asks the refresher to resolve hostnames not cached yet

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
// immutable table, the state it was built from (when it has hostnames) and
// the resolved hostnames.
type carried struct {
	tbl   *table
	state *State
	hosts map[string][]netip.Addr
}

var carryStore carry.Store[*carried]

// apply builds a table from st, swaps it in, and persists st when it came
// from a source (not from the snapshot itself). It does no lookups:
// hostnames not resolved yet are left to the refresher. Once ctx is done it
// does nothing.
func (e *Endpointsvc) apply(ctx context.Context, source string, st *State, persistIt bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	e.swap(st)
	log.Infof("Synced %d services, %d endpoints from %s in %v", e.tbl.Load().nServices, e.tbl.Load().nEndpts, source, time.Since(start).Round(time.Microsecond))
	if persistIt && e.snapshot != nil {
		e.snapshot.Offer(st.encodeCompact, e.tbl.Load().nServices, start) // written off the lock, coalesced
	}
}

// swap builds and publishes a table from st and the cached hostname
// addresses, and asks the refresher for hostnames not cached yet; e.mu is
// held.
func (e *Endpointsvc) swap(st *State) {
	hosts := hostnames(st)
	resolved, missing := e.resolver.cached(hosts)
	serial := e.nextSerial()
	var t *table
	if e.spec {
		sp := buildSpecTable(st)
		t = &table{spec: sp, serial: serial, nServices: len(sp.services), nEndpts: sp.nEndpts}
	} else {
		t = buildTable(st, e.Zones, e.includeUnhealthy, e.endpointMode, resolved, serial)
	}
	e.state = nil
	if len(hosts) > 0 {
		e.state = st // kept only to rebuild when a hostname's addresses change
	}
	e.publish(t)
	if missing {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// publish swaps t in and updates the gauges.
func (e *Endpointsvc) publish(t *table) {
	e.tbl.Store(t)
	e.ready.Store(true)
	zone := e.Zones[0]
	gauges.Of(servicesGauge, e.servers, zone).Set(float64(t.nServices))
	gauges.Of(cnameConflicts, e.servers, zone).Set(float64(t.nConflicts))
	gauges.Of(endpointsGauge, e.servers, zone).Set(float64(t.nEndpts))
}

// refreshHosts re-resolves the current state's hostnames and rebuilds the
// table when an address changed.
func (e *Endpointsvc) refreshHosts(ctx context.Context) { e.resolveHosts(ctx, true) }

// resolveHosts looks up the current state's hostnames (all of them with
// refresh, else those not cached yet) without holding e.mu, and rebuilds
// the table when an address changed.
func (e *Endpointsvc) resolveHosts(ctx context.Context, refresh bool) {
	e.mu.Lock()
	st := e.state
	e.mu.Unlock()
	if st == nil {
		return
	}
	hosts := hostnames(st)
	if len(hosts) == 0 {
		return
	}
	if !e.resolver.resolve(ctx, hosts, refresh) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == nil || ctx.Err() != nil {
		return
	}
	e.swap(e.state)
	log.Infof("Hostname advertise addresses changed; rebuilt the table")
}

// loadSnapshot applies the snapshot file, if there is a valid one.
func (e *Endpointsvc) loadSnapshot(ctx context.Context) {
	if e.snapshotPath == "" {
		return
	}
	persist.Loaded(e.snapshotPath, 0)
	b, err := persist.ReadFile(e.snapshotPath)
	if err != nil || b == nil {
		if err != nil {
			log.Warningf("Reading snapshot: %v", err)
		}
		return
	}
	st, err := DecodeSnapshot(b)
	if err != nil {
		log.Warningf("Ignoring snapshot %q: %v", e.snapshotPath, err)
		return
	}
	persist.Loaded(e.snapshotPath, len(st.Services))
	e.apply(ctx, "snapshot", st, false)
}

// handOver keeps the served table for the instance a reload starts.
func (e *Endpointsvc) handOver() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.tbl.Load(); t != nil {
		carryStore.Put(e.carryKey, &carried{tbl: t, state: e.state, hosts: e.resolver.snapshot()})
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
	e.resolver.restore(c.hosts)
	e.state, e.serial = c.state, c.tbl.serial
	e.publish(c.tbl)
	log.Infof("Serving %d services, %d endpoints carried over the reload", c.tbl.nServices, c.tbl.nEndpts)
	return true
}

// start serves the carried table or loads the snapshot, and runs the
// source and the hostname refresher until stop.
func (e *Endpointsvc) start(src Source) {
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
		e.resolveHosts(ctx, false)
		t := time.NewTimer(e.refresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.kick:
				e.resolveHosts(ctx, false)
			case <-t.C:
				e.resolveHosts(ctx, true)
				t.Reset(e.refresh)
			}
		}
	}()
	if e.tbl.Load() == nil {
		t := time.NewTimer(firstSyncWait)
		defer t.Stop()
		select {
		case <-e.first:
		case <-t.C:
		}
	}
}

// hadResult reports whether the source reported already.
func (e *Endpointsvc) hadResult() bool {
	select {
	case <-e.first:
		return true
	default:
		return false
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

// synced records a successful sync of source.
func (e *Endpointsvc) synced(source string) {
	gauges.Of(lastSync, e.servers, e.Zones[0], source).SetToCurrentTime()
}

// sink is a source's view of the plugin: it counts and logs results.
type sink struct {
	e       *Endpointsvc
	ctx     context.Context // the source's: done once stop is called
	source  string
	lastErr string // last failure logged, "" while healthy
}

func (k *sink) Update(st *State) {
	zone := k.e.Zones[0]
	syncCount.WithLabelValues(zone, k.source, "updated").Inc()
	k.e.synced(k.source)
	k.recovered()
	k.e.apply(k.ctx, k.source, st, true)
	k.e.firstResult()
}

// Patch applies a change. It does not end a failure: a source that patches
// reports its health with Unchanged and Failed (one object's events say
// little about the rest).
func (k *sink) Patch(p *Patch) {
	syncCount.WithLabelValues(k.e.Zones[0], k.source, "patched").Inc()
	k.e.synced(k.source)
	k.e.applyPatch(k.ctx, p)
	k.e.firstResult()
}

func (k *sink) Unchanged() {
	zone := k.e.Zones[0]
	syncCount.WithLabelValues(zone, k.source, "unchanged").Inc()
	k.e.synced(k.source)
	k.recovered()
	k.e.firstResult()
}

func (k *sink) Failed(err error) {
	syncCount.WithLabelValues(k.e.Zones[0], k.source, "error").Inc()
	if msg := err.Error(); msg != k.lastErr {
		k.lastErr = msg
		if k.e.ready.Load() {
			log.Warningf("Source %s failing, keeping the last good state: %v", k.source, err)
		} else {
			log.Errorf("Source %s failing, no state to serve yet: %v", k.source, err)
		}
	}
	k.e.firstResult()
}

func (k *sink) recovered() {
	if k.lastErr != "" {
		log.Infof("Source %s recovered", k.source)
		k.lastErr = ""
	}
}
