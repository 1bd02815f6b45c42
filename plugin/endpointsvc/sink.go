package endpointsvc

import (
	"context"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
)

// sink is a source's view of the plugin: it counts and logs results and
// hands states and patches to the syncer.
type sink struct {
	e       *Endpointsvc
	ctx     context.Context // the source's: done once stop is called
	source  string
	lastErr string        // last failure logged, "" while healthy
	metrics syncMetrics   // syncs_total and last_sync_timestamp_seconds, resolved once
	age     time.Duration // SetAge's, for the next result
	aged    bool          // SetAge was called for the next result
}

var (
	_ feed.Sink   = (*sink)(nil)
	_ feed.Served = (*sink)(nil)
	_ feed.Aged   = (*sink)(nil)
)

// SetAge takes the age of the next result (the replica source's leader's
// staleness): that result, a patch too, is a verdict on the table's
// freshness.
func (k *sink) SetAge(age time.Duration) { k.age, k.aged = age, true }

// current records a success: the table is as far behind as the source
// said (SetAge), else current.
func (k *sink) current() {
	age := k.age
	k.age, k.aged = 0, false
	if k.e.fresh.current(time.Now(), age) {
		k.e.staleChanged()
	}
}

// Served is the schema's table served now, or nil.
func (k *sink) Served() any {
	if t := k.e.tbl.Load(); t != nil {
		return t.model
	}
	return nil
}

func (k *sink) Update(st feed.State) {
	k.count("updated")
	k.recovered()
	k.e.apply(k.ctx, k.source, st, true)
	k.e.replicaSourced()
	k.current()
	k.e.firstResult()
}

// Patch applies a change. It does not end a failure: a source that patches
// reports its health with Unchanged and Failed (one object's events say
// little about the rest), unless it said the patch's age (SetAge: the
// replica source's synced state is its leader's whole table).
func (k *sink) Patch(p feed.Patch) {
	k.count("patched")
	k.e.applyPatch(k.ctx, p)
	k.e.replicaSourced()
	if k.aged { // a source that knows its age: the patch brings the table up to its data
		k.current()
	}
	k.e.firstResult()
}

func (k *sink) Unchanged() {
	k.count("unchanged")
	k.recovered()
	k.e.replicaSourced()
	k.current()
	k.e.firstResult()
}

func (k *sink) Failed(err error) {
	k.metricsOf().count("error")
	k.age, k.aged = 0, false
	if k.e.fresh.failed(time.Now()) {
		k.e.staleChanged()
	}
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

// count records a successful sync with result.
func (k *sink) count(result string) {
	m := k.metricsOf()
	m.count(result)
	m.synced()
}

// metricsOf returns the sink's metrics, naming them on first use.
func (k *sink) metricsOf() *syncMetrics {
	if !k.metrics.named {
		k.metrics = syncMetrics{named: true, zone: k.e.Zones[0], source: k.source, servers: k.e.servers}
	}
	return &k.metrics
}

func (k *sink) recovered() {
	if k.lastErr != "" {
		log.Infof("Source %s recovered", k.source)
		k.lastErr = ""
	}
}
