package endpointsvc

import (
	"context"
	"encoding/json"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/pkg/persist"
)

// syncer owns the served table and everything that changes it: it applies
// states from the source and from the snapshot, re-resolves hostname
// advertise addresses every TTL, and writes the snapshot. Only tbl and
// ready are read by the hot path.
type syncer struct {
	tbl   atomic.Pointer[table]
	ready atomic.Bool

	zones            []string // the plugin's zones (SRV target names are built per zone)
	zone             string   // metrics label: the first zone
	includeUnhealthy bool
	snapshotPath     string
	refresh          time.Duration // hostname re-resolution period (the TTL)

	mu       sync.Mutex // serialises apply and refresh; never taken by ServeDNS
	state    *State
	resolver *hostResolver
	serial   uint32

	cancel context.CancelFunc
	wg     sync.WaitGroup
	first  chan struct{} // closed on the source's first result
	once   sync.Once
}

// firstSyncWait bounds how long start-up (and so a reload, while the old
// instance still serves) waits for the source's first result, so that a new
// instance does not answer SERVFAIL right after a reload.
const firstSyncWait = 3 * time.Second

// apply builds a table from st, swaps it in, and persists st when it came
// from a source (not from the snapshot itself).
func (s *syncer) apply(source string, st *State, persistIt bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	resolved, _ := s.resolver.resolve(context.Background(), hostnames(st), false)
	s.swap(st, resolved)
	log.Infof("Synced %d services, %d endpoints from %s in %v", s.tbl.Load().nServices, s.tbl.Load().nEndpts, source, time.Since(start).Round(time.Microsecond))
	if persistIt && s.snapshotPath != "" {
		b, err := json.Marshal(st)
		if err == nil {
			err = persist.WriteFile(s.snapshotPath, b)
		}
		if err != nil {
			log.Warningf("Writing snapshot %q: %v", s.snapshotPath, err)
		}
	}
}

// swap builds and publishes a table; s.mu is held.
func (s *syncer) swap(st *State, resolved map[string][]netip.Addr) {
	s.serial++
	if now := uint32(time.Now().Unix()); now > s.serial {
		s.serial = now
	}
	t := buildTable(st, s.zones, s.includeUnhealthy, resolved, s.serial)
	s.state = nil
	if len(resolved) > 0 {
		s.state = st // kept only to rebuild when a hostname's addresses change
	}
	s.tbl.Store(t)
	s.ready.Store(true)
	servicesGauge.WithLabelValues(s.zone).Set(float64(t.nServices))
	endpointsGauge.WithLabelValues(s.zone).Set(float64(t.nEndpts))
}

// refreshHosts re-resolves the current state's hostnames and rebuilds the
// table when an address changed.
func (s *syncer) refreshHosts(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == nil {
		return
	}
	hosts := hostnames(s.state)
	if len(hosts) == 0 {
		return
	}
	resolved, changed := s.resolver.resolve(ctx, hosts, true)
	if changed && ctx.Err() == nil {
		s.swap(s.state, resolved)
		log.Infof("Hostname advertise addresses changed; rebuilt the table")
	}
}

// loadSnapshot applies the snapshot file, if there is a valid one.
func (s *syncer) loadSnapshot() {
	if s.snapshotPath == "" {
		return
	}
	b, err := persist.ReadFile(s.snapshotPath)
	if err != nil || b == nil {
		if err != nil {
			log.Warningf("Reading snapshot: %v", err)
		}
		return
	}
	st, err := DecodeState(b)
	if err != nil {
		log.Warningf("Ignoring snapshot %q: %v", s.snapshotPath, err)
		return
	}
	s.apply("snapshot", st, false)
}

// start loads the snapshot and runs the source and the hostname refresher
// until stop.
func (s *syncer) start(src Source) {
	s.loadSnapshot()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.first = make(chan struct{})
	s.once = sync.Once{}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		src.Run(ctx, &sink{s: s, source: src.Name()})
	}()
	go func() {
		defer s.wg.Done()
		for sleep(ctx, s.refresh) {
			s.refreshHosts(ctx)
		}
	}()
	if s.tbl.Load() == nil {
		t := time.NewTimer(firstSyncWait)
		defer t.Stop()
		select {
		case <-s.first:
		case <-t.C:
		}
	}
}

// firstResult notes that the source reported for the first time.
func (s *syncer) firstResult() { s.once.Do(func() { close(s.first) }) }

// stop ends the goroutines started by start and waits for them.
func (s *syncer) stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
		s.cancel = nil
	}
}

// sink is a source's view of the syncer: it counts and logs results.
type sink struct {
	s       *syncer
	source  string
	lastErr string // last failure logged, "" while healthy
}

func (k *sink) Update(st *State) {
	syncCount.WithLabelValues(k.s.zone, k.source, "updated").Inc()
	lastSync.WithLabelValues(k.s.zone, k.source).SetToCurrentTime()
	k.recovered()
	k.s.apply(k.source, st, true)
	k.s.firstResult()
}

func (k *sink) Unchanged() {
	syncCount.WithLabelValues(k.s.zone, k.source, "unchanged").Inc()
	lastSync.WithLabelValues(k.s.zone, k.source).SetToCurrentTime()
	k.recovered()
	k.s.firstResult()
}

func (k *sink) Failed(err error) {
	syncCount.WithLabelValues(k.s.zone, k.source, "error").Inc()
	if msg := err.Error(); msg != k.lastErr {
		k.lastErr = msg
		if k.s.ready.Load() {
			log.Warningf("Source %s failing, keeping the last good state: %v", k.source, err)
		} else {
			log.Errorf("Source %s failing, no state to serve yet: %v", k.source, err)
		}
	}
	k.s.firstResult()
}

func (k *sink) recovered() {
	if k.lastErr != "" {
		log.Infof("Source %s recovered", k.source)
		k.lastErr = ""
	}
}
