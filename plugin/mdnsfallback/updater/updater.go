// Package updater is mdnsfallback's container updater: it keeps the
// record database in step with the
// containers of an engine: it subscribes to the engine's events first, then
// lists the running containers and reconciles, then applies each event.
// When the engine goes away the records stay; it retries with a capped
// backoff and reconciles again on reconnect. It owns its records by
// identifier (the container ID) and by Owner, so records written by others
// through the HTTP API are never touched.
package updater

import (
	"context"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"

	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/pkg/gauges"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

var log = clog.NewWithPlugin("mdnsfallback")

// Owner is the Owner of every record the updater writes.
const Owner = "docker"

// Defaults of the updater sub-block.
const (
	DefaultCheckInterval = 2 * time.Second
	DefaultCheckTimeout  = time.Second
	// DefaultReconcileInterval: how often a connected updater lists the
	// running containers and reconciles, so a missed event (a failed
	// inspect on start, an engine that dropped one) is repaired.
	DefaultReconcileInterval = 30 * time.Second
	// DefaultCheckFailures: failures in a row that withhold a container
	// whose check passed (Docker's HEALTHCHECK retries).
	DefaultCheckFailures = 3
	// DefaultCheckRate: checks started a second, over all containers.
	DefaultCheckRate   = 100
	inspectConcurrency = 8 // inspects of a reconcile in flight at once
	backoffInitial     = 250 * time.Millisecond
	backoffCap         = 10 * time.Second
	engineCallTimeout  = 10 * time.Second
	listTimeout        = time.Minute // list plus one inspect per running container
)

// Config is the parsed `updater docker [ENDPOINT] {…}` sub-block.
type Config struct {
	Endpoint      string // "" → DOCKER_HOST, else unix:///var/run/docker.sock
	Network       string // "" → the container's own network, else its first by name
	CheckInterval time.Duration
	CheckTimeout  time.Duration
	// ReconcileInterval is the period of the full reconcile while
	// connected (0: DefaultReconcileInterval).
	ReconcileInterval time.Duration
	CheckFailures     int // failures in a row that withhold a container (0: DefaultCheckFailures)
	CheckRate         int // checks started a second (0: DefaultCheckRate)
}

// Store is what the updater needs of the record database: put and delete
// its own records, and tell which it holds.
type Store interface {
	Put(r records.Record) (records.Record, bool, error)
	DeleteOwned(id, owner string, keep func(records.Record) bool) []records.Record
	HoldsAll(recs []records.Record) bool
	OwnedIDs(owner string) map[string]bool
}

// Container is the slim form of an engine's container the updater keeps.
type Container struct {
	ID          string
	Name        string
	Running     bool
	Hostname    string
	Domainname  string
	Check       string // the meshdns.check label, "" without one
	NetworkMode string
	Networks    map[string]Net
}

// Net is a container's addresses on one network.
type Net struct {
	IPv4    netip.Addr
	Prefix4 int
	IPv6    netip.Addr
	Prefix6 int
}

// Event is one container event: Action is start, die, stop, destroy,
// connect or disconnect (network events carry the container's ID).
type Event struct {
	Action string
	ID     string
}

// Engine is what the updater needs from a container engine; dockerEngine
// implements it over the Docker Engine API, tests use a fake.
type Engine interface {
	// Ping checks the engine and returns its API version.
	Ping(ctx context.Context) (string, error)
	// Events subscribes to container events from since on (the engine
	// replays the ones it kept since then) until ctx ends or the stream
	// fails (the error channel then yields the cause).
	Events(ctx context.Context, since time.Time) (<-chan Event, <-chan error)
	// Running lists the running containers with their addresses, and the
	// IDs of those it could not inspect (left out of the list).
	Running(ctx context.Context) ([]Container, []string, error)
	// Inspect returns one container; a container that does not exist comes
	// back with Running false and no error.
	Inspect(ctx context.Context, id string) (Container, error)
	// Endpoint names the engine for logs and /status.
	Endpoint() string
	Close() error
}

// fqdn returns the container's lowercased FQDN: hostname plus domain name,
// or the hostname alone when it is already a full name; "" when neither.
func (c Container) fqdn() string {
	h := strings.TrimSuffix(c.Hostname, ".")
	d := strings.Trim(c.Domainname, ".")
	switch {
	case h == "":
		return ""
	case d != "":
		return strings.ToLower(h + "." + d + ".")
	case strings.Contains(h, "."):
		return strings.ToLower(h + ".")
	}
	return ""
}

// network picks the network whose addresses the records take: the named
// one, else the one the container was started on, else the first by name
// that has an address.
func (c Container) network(name string) (Net, bool) {
	if name != "" {
		n, ok := c.Networks[name]
		return n, ok
	}
	if n, ok := c.Networks[c.NetworkMode]; ok && (n.IPv4.IsValid() || n.IPv6.IsValid()) {
		return n, true
	}
	names := make([]string, 0, len(c.Networks))
	for k := range c.Networks {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if n := c.Networks[k]; n.IPv4.IsValid() || n.IPv6.IsValid() {
			return n, true
		}
	}
	return Net{}, false
}

// wantedRecords returns the records a running container should have: its
// FQDN, when inside one of zones, bound to its address(es) on the network.
func wantedRecords(c Container, network string, zones []string) []records.Record {
	if !c.Running {
		return nil
	}
	name := c.fqdn()
	if name == "" || plugin.Zones(zones).Matches(name) == "" {
		return nil
	}
	n, ok := c.network(network)
	if !ok {
		return nil
	}
	var out []records.Record
	if n.IPv4.IsValid() {
		out = append(out, records.Record{ID: c.ID, IP: n.IPv4.Unmap(), Domain: name, RoutingPrefix: n.Prefix4, Owner: Owner})
	}
	if n.IPv6.IsValid() {
		out = append(out, records.Record{ID: c.ID, IP: n.IPv6, Domain: name, RoutingPrefix: n.Prefix6, Owner: Owner})
	}
	return out
}

// tracked is one container the updater holds records for (or would, once
// its check passes).
type tracked struct {
	c       Container
	recs    []records.Record
	check   *checkSpec // nil: no check, a running container counts
	bad     string     // the label when it does not parse
	healthy bool
	present bool // its records are in the database
	// The check's schedule: a check is running; the first result came;
	// failures in a row; when the next check is due.
	checking, checked bool
	fails             int
	next              time.Time
}

// counts the updater exports in /status; Prometheus has them too.
type updaterCounts struct {
	events, reconciles, reconnects atomic.Int64
	checks                         [numCheckResults]atomic.Int64
}

// Updater runs one engine's container updater.
type Updater struct {
	cfg Config

	connected, containers gauges.Set // updater_connected, updater_containers of this block
	db                    Store
	zones                 []string
	eng                   Engine

	mu      sync.Mutex
	tracked map[string]*tracked // by container ID
	epoch   uint64              // one more at every event's change
	touched map[string]uint64   // the epoch of the last event's change of a container (since the last reconcile)
	state   string              // connecting, connected, disconnected, stopped
	since   time.Time
	lastErr string
	apiVer  string
	counts  updaterCounts

	kick chan struct{} // run the checks now
	// probe runs one check; nil: probe over the network (tests put a
	// fake here).
	probe  func(ctx context.Context, spec checkSpec, ip netip.Addr) error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns an updater of the containers of eng with a name in zones,
// writing to db; servers label its gauges. Start runs it.
func New(cfg Config, db Store, zones []string, eng Engine, servers []string) *Updater {
	return &Updater{
		cfg: cfg, db: db, zones: zones, eng: eng,
		connected: gauges.Of(updaterConnected, servers), containers: gauges.Of(updaterContainers, servers),
		tracked: map[string]*tracked{}, touched: map[string]uint64{},
		state: "stopped",
		kick:  make(chan struct{}, 1),
	}
}

// Start runs the event loop and the checker until stop.
func (u *Updater) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	u.cancel = cancel
	u.setState("connecting", "")
	u.wg.Add(2)
	go func() { defer u.wg.Done(); u.run(ctx) }()
	go func() { defer u.wg.Done(); u.checker(ctx) }()
}

// Stop ends both goroutines and closes the engine client; the records stay.
func (u *Updater) Stop() {
	if u.cancel == nil {
		return
	}
	u.cancel()
	u.wg.Wait()
	u.cancel = nil
	_ = u.eng.Close()
	u.setState("stopped", "")
	u.connected.Set(0)
}

func (u *Updater) setState(state, errText string) {
	u.mu.Lock()
	if u.state != state {
		u.since = time.Now()
	}
	u.state = state
	if errText != "" {
		u.lastErr = errText
	}
	u.mu.Unlock()
}

// run connects, syncs and follows events, reconnecting with a capped
// backoff whenever the engine goes away. The backoff starts over only after
// a session that stayed up for a while, so an engine that accepts and
// drops at once is not hammered.
func (u *Updater) run(ctx context.Context) {
	backoff := backoffInitial
	wasUp := true // log the first failure too
	for {
		up, err := u.session(ctx)
		if ctx.Err() != nil {
			return
		}
		u.connected.Set(0)
		if up > 0 {
			wasUp = true
			if up >= time.Second {
				backoff = backoffInitial
			}
		}
		if wasUp {
			log.Warningf("Container engine %s unreachable, keeping %d containers' records, retrying: %v", u.eng.Endpoint(), u.trackedLen(), err)
			wasUp = false
		}
		u.setState("disconnected", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = pause.Double(backoff, backoffInitial, backoffCap)
	}
}

// session runs one connection: subscribe, list, reconcile, follow. It
// returns how long it followed events after the reconcile (0 when it never
// got there), and why it ended.
func (u *Updater) session(ctx context.Context) (time.Duration, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pctx, pcancel := context.WithTimeout(sctx, engineCallTimeout)
	ver, err := u.eng.Ping(pctx)
	pcancel()
	if err != nil {
		return 0, err
	}
	// The events since a second before the list: none that happens while
	// the subscription is being set up is lost (the engine replays them;
	// handling one twice is harmless).
	events, errs := u.eng.Events(sctx, time.Now().Add(-time.Second))
	if err := u.relist(sctx); err != nil {
		return 0, err
	}
	u.mu.Lock()
	first := u.counts.reconciles.Load() == 1
	u.apiVer = ver
	u.mu.Unlock()
	if !first {
		u.counts.reconnects.Add(1)
	}
	u.setState("connected", "")
	u.connected.Set(1)
	log.Infof("Container engine %s (API %s) synced: %d containers in the zones", u.eng.Endpoint(), ver, u.trackedLen())
	since := time.Now()
	up := func() time.Duration { return max(time.Since(since), time.Nanosecond) }
	every := u.cfg.ReconcileInterval
	if every <= 0 {
		every = DefaultReconcileInterval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	work := u.startWorkers(sctx)
	var reconciling atomic.Bool
	for {
		select {
		case <-sctx.Done():
			return up(), sctx.Err()
		case <-tick.C:
			// Off the event loop: events keep flowing (an engine drops the
			// events of a subscriber that does not read them) while the
			// reconcile lists and inspects.
			if reconciling.CompareAndSwap(false, true) {
				u.wg.Add(1)
				go func() {
					defer u.wg.Done()
					defer reconciling.Store(false)
					if err := u.relist(sctx); err != nil && sctx.Err() == nil {
						log.Warningf("Reconcile with %s: %v (retried at the next one)", u.eng.Endpoint(), err)
					}
				}()
			}
		case err := <-errs:
			if err == nil {
				err = errStreamEnded
			}
			return up(), err
		case ev, ok := <-events:
			if !ok {
				return up(), errStreamEnded
			}
			u.counts.events.Add(1)
			updaterEvents.WithLabelValues(ev.Action).Inc()
			work[workerOf(ev.ID, len(work))] <- ev
		}
	}
}

// eventWorkers handle events in parallel (an inspect each), each
// container's events on one worker, in their order.
const eventWorkers = 8

// startWorkers starts the event workers until ctx ends and returns their
// queues.
func (u *Updater) startWorkers(ctx context.Context) []chan Event {
	qs := make([]chan Event, eventWorkers)
	for i := range qs {
		qs[i] = make(chan Event, 4096)
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-qs[i]:
					u.handle(ctx, ev)
				}
			}
		}()
	}
	return qs
}

// workerOf is the worker of a container ID.
func workerOf(id string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % uint32(n))
}

// relist lists the running containers and reconciles the records. The
// engine inspects them in parallel; a container whose inspect failed is
// left as it is (neither added nor removed) and the reconcile goes on.
func (u *Updater) relist(ctx context.Context) error {
	u.mu.Lock()
	since := u.epoch
	u.mu.Unlock()
	lctx, lcancel := context.WithTimeout(ctx, listTimeout)
	list, failed, err := u.eng.Running(lctx)
	lcancel()
	if err != nil {
		return err
	}
	for _, id := range failed {
		log.Warningf("Inspecting container %s failed: left as it is until the next reconcile", shortID(id))
	}
	u.reconcile(list, failed, since)
	return nil
}

type updaterError string

func (e updaterError) Error() string { return string(e) }

const errStreamEnded = updaterError("event stream ended")

// handle applies one event: the container is inspected and its records
// brought in line, or removed.
func (u *Updater) handle(ctx context.Context, ev Event) {
	switch ev.Action {
	case "die", "stop", "destroy":
		u.remove(ev.ID, u.nextEpoch(), 0)
	case "start", "connect", "disconnect":
		ictx, cancel := context.WithTimeout(ctx, engineCallTimeout)
		c, err := u.eng.Inspect(ictx, ev.ID)
		cancel()
		if err != nil {
			// The next reconcile catches up.
			log.Warningf("Inspecting container %s: %v", shortID(ev.ID), err)
			return
		}
		u.upsert(c, u.nextEpoch(), 0)
	}
}

// nextEpoch numbers an event's change.
func (u *Updater) nextEpoch() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.epoch++
	return u.epoch
}

// reconcile makes the database match the list of running containers
// (taken after epoch since): new ones are added, tracked ones that
// vanished lose their records, and so do records this updater owns for
// containers that no longer run. A container an event changed after since
// is the event's (the list is older), and one whose inspect failed stays
// as it is.
func (u *Updater) reconcile(list []Container, failed []string, since uint64) {
	u.counts.reconciles.Add(1)
	updaterReconciles.Inc()
	seen := map[string]bool{}
	for _, id := range failed {
		seen[id] = true
	}
	for _, c := range list {
		seen[c.ID] = true
		u.upsert(c, 0, since)
	}
	u.mu.Lock()
	var gone []string
	for id := range u.tracked {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	u.mu.Unlock()
	for _, id := range gone {
		u.remove(id, 0, since)
	}
	for id := range u.db.OwnedIDs(Owner) {
		if !seen[id] {
			u.remove(id, 0, since)
		}
	}
	u.mu.Lock()
	for id, e := range u.touched {
		if e <= since {
			delete(u.touched, id)
		}
	}
	u.mu.Unlock()
}

// stale reports, for a change of a reconcile (ev 0) from a list taken
// after epoch since, whether an event changed id since; for an event's
// change (ev > 0) it records it. u.mu is held.
func (u *Updater) stale(id string, ev, since uint64) bool {
	if ev > 0 {
		u.touched[id] = ev
		return false
	}
	return u.touched[id] > since
}

// upsert tracks a container (or drops it when it stopped or is not in the
// zones) and brings its records in line; ev and since as for stale.
func (u *Updater) upsert(c Container, ev, since uint64) {
	recs := wantedRecords(c, u.cfg.Network, u.zones)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stale(c.ID, ev, since) {
		return
	}
	if len(recs) == 0 {
		u.removeLocked(c.ID)
		return
	}
	t := u.tracked[c.ID]
	if t == nil || t.c.Check != c.Check {
		nt := &tracked{}
		if t != nil {
			nt.present = t.present
		} else if c.Check != "" && u.db.HoldsAll(recs) {
			// Records carried across a reload or restored from the snapshot
			// stand for a check that passed: they stay until a check fails,
			// rather than leave (with goodbyes) until the first one passes.
			nt.healthy = true
		}
		t = nt
		if c.Check != "" {
			spec, err := parseCheck(c.Check)
			if err != nil {
				log.Warningf("Container %s (%s): label %s: %v; its name stays out", shortID(c.ID), c.Name, checkLabel, err)
				t.bad = c.Check
				u.counts.checks[checkInvalid].Add(1)
				updaterChecks.WithLabelValues(checkResultNames[checkInvalid]).Inc()
			} else {
				t.check = &spec
			}
			u.kickChecks()
		}
		u.tracked[c.ID] = t
	}
	t.c, t.recs = c, recs
	u.applyLocked(t)
	u.containers.Set(float64(len(u.tracked)))
}

// remove forgets a container and deletes its records (with goodbyes);
// ev and since as for stale.
func (u *Updater) remove(id string, ev, since uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.stale(id, ev, since) {
		u.removeLocked(id)
	}
}

// removeLocked is remove with u.mu held.
func (u *Updater) removeLocked(id string) {
	delete(u.tracked, id)
	u.containers.Set(float64(len(u.tracked)))
	u.db.DeleteOwned(id, Owner, nil)
}

// counts reports whether t's records belong in the database: a running
// container counts, unless it has a check that does not pass.
func (t *tracked) counts() bool {
	if t.bad != "" {
		return false
	}
	return t.check == nil || t.healthy
}

// applyLocked puts or deletes t's records; u.mu is held.
func (u *Updater) applyLocked(t *tracked) {
	id := t.c.ID
	if !t.counts() {
		t.present = false
		u.db.DeleteOwned(id, Owner, nil)
		return
	}
	type key struct {
		ip     netip.Addr
		domain string
	}
	want := map[key]bool{}
	for _, r := range t.recs {
		want[key{r.IP, r.Domain}] = true
	}
	u.db.DeleteOwned(id, Owner, func(r records.Record) bool { return want[key{r.IP, r.Domain}] })
	ok := true
	for _, r := range t.recs {
		if _, _, err := u.db.Put(r); errors.Is(err, records.ErrOwned) {
			continue // written through the API first: it stays the API's, and answers
		} else if err != nil {
			ok = false
			log.Warningf("Container %s (%s): record %s %s: %v", shortID(id), t.c.Name, r.Domain, r.IP, err)
		}
	}
	t.present = ok
}

func (u *Updater) trackedLen() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.tracked)
}

func (u *Updater) kickChecks() {
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Status is the updater's part of GET /status.
type Status struct {
	Kind       string            `json:"kind"`
	Endpoint   string            `json:"endpoint"`
	Network    string            `json:"network,omitempty"`
	State      string            `json:"state"`
	Since      time.Time         `json:"since"`
	APIVersion string            `json:"api_version,omitempty"`
	LastError  string            `json:"last_error,omitempty"`
	Containers []ContainerStatus `json:"containers"`
	Counters   map[string]int64  `json:"counters"`
}

type ContainerStatus struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Domain  string `json:"domain"`
	Check   string `json:"check,omitempty"`
	Healthy bool   `json:"healthy"`
	Present bool   `json:"present"`
}

func (u *Updater) Status() *Status {
	u.mu.Lock()
	s := &Status{
		Kind: "docker", Endpoint: u.eng.Endpoint(), Network: u.cfg.Network,
		State: u.state, Since: u.since, APIVersion: u.apiVer, LastError: u.lastErr,
		Containers: []ContainerStatus{},
	}
	for id, t := range u.tracked {
		s.Containers = append(s.Containers, ContainerStatus{
			ID: id, Name: t.c.Name, Domain: t.c.fqdn(), Check: t.c.Check,
			Healthy: t.counts(), Present: t.present,
		})
	}
	u.mu.Unlock()
	sort.Slice(s.Containers, func(i, j int) bool {
		return s.Containers[i].Domain+s.Containers[i].ID < s.Containers[j].Domain+s.Containers[j].ID
	})
	s.Counters = map[string]int64{
		"events":         u.counts.events.Load(),
		"reconciles":     u.counts.reconciles.Load(),
		"reconnects":     u.counts.reconnects.Load(),
		"checks_pass":    u.counts.checks[checkPass].Load(),
		"checks_fail":    u.counts.checks[checkFail].Load(),
		"checks_invalid": u.counts.checks[checkInvalid].Load(),
	}
	return s
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
