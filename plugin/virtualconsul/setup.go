package virtualconsul

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/pending"
	"github.com/meshdns/meshdns/plugin/pkg/persist"
	"github.com/meshdns/meshdns/plugin/pkg/soa"
	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

const pluginName = "virtualconsul"

var log = clog.NewWithPlugin(pluginName)

func init() { plugin.Register(pluginName, setup) }

func setup(c *caddy.Controller) error {
	v, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	// see plugin/pkg/pending for a reload that fails after this instance
	// started, and plugin/pkg/carry for the table handed across a reload
	c.OnStartup(func() error {
		err := v.start()
		pending.Started(func() { _ = v.stop() })
		return err
	})
	c.OnRestart(func() error {
		pending.Begin()
		return v.handOver()
	})
	c.OnRestartFailed(func() error {
		pending.Failed()
		return v.keep()
	})
	c.OnShutdown(func() error {
		carried.Drop(v.carryKey) // what a new instance did not take
		return v.stop()
	})
	carried.Want(v.carryKey) // see carry.go
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		v.Next = next
		return v
	})
	return nil
}

// defaultTTL is the answers' TTL without a ttl line; the identity short
// names expand with defaults to Consul's (table.DefaultNamespace, …).
const defaultTTL = 5 * time.Second

// parse reads the virtualconsul directive into a plugin with no side
// effects: nothing is read and no goroutine starts until OnStartup.
func parse(c *caddy.Controller) (*VirtualConsul, error) {
	v := &VirtualConsul{
		ns: table.DefaultNamespace, ap: table.DefaultPartition, dc: table.DefaultDatacenter,
		ttl: uint32(defaultTTL / time.Second), emptyGrace: persist.DefaultEmptyGrace,
	}
	var zones []string
	for i := 0; c.Next(); i++ {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), []string{"consul."})
		if err := parseBlock(c, v); err != nil {
			return nil, err
		}
	}
	v.metricZone = zones[0]
	// The server block's keys (zones and ports) tell apart two blocks that
	// serve the same zones on different ports.
	v.carryKey = pluginName + " " + strings.Join(c.ServerBlockKeys, " ") + " " + strings.Join(zones, " ")
	v.servers = conf.Servers(c)
	if v.remote != nil {
		v.remote.OnFailing = gauges.Of(sourceFailing, v.servers, v.metricZone, "envoy").SetBool
	}
	for _, z := range zones {
		v.zones = append(v.zones, soa.For(z))
	}
	sort.SliceStable(v.zones, func(i, j int) bool { return len(v.zones[i].Zone) > len(v.zones[j].Zone) })
	return v, nil
}

// parseBlock reads the block's lines into v and checks that they fit
// together.
func parseBlock(c *caddy.Controller, v *VirtualConsul) error {
	seen := map[string]bool{}
	for c.NextBlock() {
		opt := c.Val()
		if seen[opt] {
			return c.Errf("%s given twice", opt)
		}
		seen[opt] = true
		if err := parseOption(c, v, opt, c.RemainingArgs()); err != nil {
			return err
		}
	}
	if seen["empty_grace"] && v.snapshot == "" {
		return c.Err("empty_grace needs snapshot")
	}
	if v.src == nil && v.snapshot == "" && v.remote == nil {
		return c.Err("virtualconsul needs a source or a snapshot")
	}
	if v.remote != nil && (v.snapshot != "" || v.authoritative) {
		return c.Err("source envoy keeps no table: snapshot and authoritative do not apply")
	}
	return nil
}

// parseOption reads one line of the block.
func parseOption(c *caddy.Controller, v *VirtualConsul, opt string, args []string) error {
	if opt == "source" {
		return parseSource(c, v, args)
	}
	if opt == "authoritative" {
		if len(args) != 0 {
			return c.ArgErr()
		}
		v.authoritative = true
		return nil
	}
	if len(args) != 1 {
		if _, known := oneArgOptions[opt]; known {
			return c.ArgErr()
		}
		return c.Errf("unknown property %q", opt)
	}
	set, known := oneArgOptions[opt]
	if !known {
		return c.Errf("unknown property %q", opt)
	}
	return set(c, v, args[0])
}

// parseSource reads `source TYPE ARGS…`.
func parseSource(c *caddy.Controller, v *VirtualConsul, args []string) error {
	if len(args) == 0 {
		return c.ArgErr()
	}
	var err error
	if args[0] == "envoy" {
		v.remote, err = source.NewEnvoy(c, args[1:]) // no table to sync: the handler asks the listener
	} else if src, known, serr := source.New(c, args[0], args[1:]); known {
		v.src, err = src, serr
	} else {
		return c.Errf("unknown source type %q", args[0])
	}
	if err != nil {
		return c.Errf("source %s: %v", args[0], err)
	}
	return nil
}

// oneArgOptions are the block's lines of one argument, each with what it
// sets.
var oneArgOptions = map[string]func(c *caddy.Controller, v *VirtualConsul, a string) error{
	"snapshot": func(c *caddy.Controller, v *VirtualConsul, a string) error {
		v.snapshot = conf.Path(c, a)
		if st, err := os.Stat(filepath.Dir(v.snapshot)); err != nil || !st.IsDir() {
			return c.Errf("snapshot directory %q does not exist", filepath.Dir(v.snapshot))
		}
		return nil
	},
	"empty_grace": func(c *caddy.Controller, v *VirtualConsul, a string) error {
		d, err := time.ParseDuration(a)
		if err != nil || d < 0 {
			return c.Errf("bad empty_grace %q: want a duration, 0 to write an empty table at once", a)
		}
		v.emptyGrace = d
		return nil
	},
	"namespace":  identity("namespace", func(v *VirtualConsul, a string) { v.ns = a }),
	"partition":  identity("partition", func(v *VirtualConsul, a string) { v.ap = a }),
	"datacenter": identity("datacenter", func(v *VirtualConsul, a string) { v.dc, v.dcSet = a, true }),
	"ttl": func(c *caddy.Controller, v *VirtualConsul, a string) error {
		ttl, err := conf.ParseTTL(a)
		if err != nil {
			return c.Errf("ttl: %v", err)
		}
		v.ttl = ttl
		return nil
	},
}

// identity checks a namespace, partition or datacenter name before set.
func identity(opt string, set func(v *VirtualConsul, a string)) func(c *caddy.Controller, v *VirtualConsul, a string) error {
	return func(c *caddy.Controller, v *VirtualConsul, a string) error {
		if !table.ValidIdentity(a) {
			return c.Errf("%s: invalid name %q (want 1-63 of a-z 0-9 - _)", opt, a)
		}
		set(v, a)
		return nil
	}
}

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
