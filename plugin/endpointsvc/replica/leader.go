package replica

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// Leader is the stream's side of a replica that serves a table: it keeps
// the table the plugin serves (told by Patched and Rebuilt, with the
// plugin's build lock held, so in the order of the builds), numbers its
// changes by generation and logs which names each one changed. Streams
// (ServeHTTP) read it; they hold no lock while they write.
type Leader struct {
	zone  string // the metrics' zone label
	token *Token // nil: followers need no token

	mu     sync.Mutex
	epoch  string
	cur    *state // nil before the first table
	log    changeLog
	frozen bool // handed over to the instance a reload starts
	// provisional: the table is a snapshot's, the source has not
	// answered yet (Provisional, Sourced); since when
	provisional      bool
	provisionalSince time.Time
	wake             chan struct{} // closed, and replaced, when cur changes
	poke             chan struct{} // closed, and replaced, when the staleness changes

	// Age, when set before the listener starts, says how far the table
	// served is behind its source (0: current); streams of version 2
	// carry it to the followers.
	Age func() time.Duration

	// Idle is how long a stream sends nothing before a heartbeat
	// (Heartbeat); WriteTimeout bounds each chunk's write (WriteTimeout);
	// KeepWhole how long the latest whole encoding is kept (KeepWhole);
	// WholeWait how long a stream waits for a slot to send a whole state
	// (WholeWait); FirstSync how long streams wait for the source's
	// first result after a snapshot's table (FirstSync); Pace the
	// shortest time between a stream's change lines (Pace). Tests
	// shorten them.
	Idle, WriteTimeout, KeepWhole, WholeWait, FirstSync, Pace time.Duration

	slots chan struct{} // whole sends under way (WholeSends)

	enc   encoder
	Stats LeaderStats
}

// LeaderStats count the leader's work (tests and benchmarks read them).
type LeaderStats struct {
	Streams  atomic.Int64 // streams open now
	Full     atomic.Int64 // whole states sent
	Resumed  atomic.Int64 // streams opened with the changes since the follower's generation
	Moved    atomic.Int64 // of those, streams of a follower that came with another epoch's state, recognised by its digest
	Bucketed atomic.Int64 // streams opened with the buckets that differ from the follower's (version 4)
	Changes  atomic.Int64 // change batches sent on open streams
	Bytes    atomic.Int64 // bytes sent
	Encoded  atomic.Int64 // whole states and change batches encoded (the rest shared an encoding)
	Wholes   atomic.Int64 // whole states encoded
	Busy     atomic.Int64 // streams refused with 503 for want of a whole-send slot
}

// state is one table, its generation, its digest and its bucket digests
// (version 4; never changed once the state is made).
type state struct {
	gen     uint64
	table   *k8sdns.Table
	digest  digest
	buckets *buckets
}

// NewLeader returns a leader with a new epoch and no table yet; zone
// labels its metrics, and followers must send the token in tokenFile
// ("" none).
func NewLeader(zone, tokenFile string) *Leader {
	var token *Token
	if tokenFile != "" {
		token = NewToken(tokenFile)
	}
	return &Leader{zone: zone, token: token, epoch: newEpoch(), wake: make(chan struct{}), poke: make(chan struct{}),
		Idle: Heartbeat, WriteTimeout: WriteTimeout, KeepWhole: KeepWhole, WholeWait: WholeWait, FirstSync: FirstSync, Pace: Pace, slots: make(chan struct{}, WholeSends)}
}

// Provisional says the table is (about to be) a snapshot's, read at
// start-up before the source answered: followers are turned away (503,
// Retry-After 1 s) until Sourced, or FirstSync at most (the source may be
// down: then the snapshot is the best there is). A follower that moves to
// a replica just restarted would otherwise get that replica's past - a
// state no other replica has any more, so the whole of it - and then the
// changes since.
func (l *Leader) Provisional() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.provisional, l.provisionalSince = true, time.Now()
}

// Sourced says a result of the source was applied: the table is current.
func (l *Leader) Sourced() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.provisional = false
}

// serving reports whether streams are served: not while the table is a
// snapshot's, the source has not answered, and FirstSync has not passed.
func (l *Leader) serving() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.provisional || time.Since(l.provisionalSince) >= l.FirstSync
}

// SetWholeSends sets how many whole states are written at once (before
// the listener starts).
func (l *Leader) SetWholeSends(n int) { l.slots = make(chan struct{}, max(n, 1)) }

// Stale tells the streams that the table's staleness changed (it became
// stale, or current again): each sends a heartbeat with the new age now.
func (l *Leader) Stale() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.poke)
	l.poke = make(chan struct{})
}

// poked is closed at the next Stale.
func (l *Leader) poked() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.poke
}

// age is the table's staleness (0 without an Age).
func (l *Leader) age() time.Duration {
	if l.Age == nil {
		return 0
	}
	return l.Age()
}

// Epoch is the leader's epoch.
func (l *Leader) Epoch() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// Gen is the latest generation (0 before the first table).
func (l *Leader) Gen() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.gen
}

// Patched records t, which a patch of the names keys (of the namespaces,
// when namespaces, and of the pod index's addresses pods) made of the last
// table.
func (l *Leader) Patched(t *k8sdns.Table, keys []k8sdns.Key, namespaces bool, pods ...netip.Addr) {
	l.PatchedProgrammed(t, keys, namespaces, nil, pods...)
}

// PatchedProgrammed is Patched of a patch that brought the API changes
// programmed into the table: the streams' change batches carry their
// trigger times to the followers (the synced line's optional
// "programmed"), which observe them when they apply the batch.
func (l *Leader) PatchedProgrammed(t *k8sdns.Table, keys []k8sdns.Key, namespaces bool, programmed []feed.Trigger, pods ...netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		l.first(t)
		return
	}
	l.set(t, logEntry{keys: keys, namespaces: namespaces, pods: pods, programmed: programmed})
}

// Rebuilt records t, a table built whole (or carried over a reload): the
// names it changes are those whose content differs from the last table's.
func (l *Leader) Rebuilt(t *k8sdns.Table) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		l.first(t)
		return
	}
	if l.frozen || l.cur.table == t {
		return
	}
	keys, namespaces := t.Changed(l.cur.table)
	l.set(t, logEntry{keys: keys, namespaces: namespaces, pods: t.ChangedPods(l.cur.table)})
}

// first makes t generation 1; l.mu is held.
func (l *Leader) first(t *k8sdns.Table) {
	if l.frozen {
		return
	}
	d, bs := wholeBuckets(t)
	l.cur = &state{gen: 1, table: t, digest: d, buckets: bs}
	l.log = changeLog{floor: 1, floorDigest: d}
	l.signal()
}

// set makes t the next generation with change e (its gen is set here),
// unless it changes nothing; l.mu is held.
func (l *Leader) set(t *k8sdns.Table, e logEntry) {
	if l.frozen {
		return
	}
	if len(e.keys) == 0 && !e.namespaces && len(e.pods) == 0 {
		l.cur = &state{gen: l.cur.gen, table: t, digest: l.cur.digest, buckets: l.cur.buckets} // the same content
		return
	}
	gen := l.cur.gen + 1
	var bs *buckets
	e.gen = gen
	e.digest, bs = l.cur.digest.moved(l.cur.buckets, l.cur.table, t, &e)
	l.log.add(e)
	l.cur = &state{gen: gen, table: t, digest: e.digest, buckets: bs}
	l.signal()
}

// signal wakes the streams; l.mu is held.
func (l *Leader) signal() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// Carried is what a leader hands to the leader of the instance a reload
// starts, so that its followers resume there with only what changed:
// the epoch, the latest generation with its table, and the change log.
// It is immutable.
type Carried struct {
	epoch            string
	cur              *state
	log              changeLog
	provisional      bool
	provisionalSince time.Time
}

// HandOver returns the leader's state for the next instance's leader and
// stops taking tables: its streams send nothing the next instance's
// would not (a follower that saw a later generation here would resume
// there from a generation that means something else). Thaw undoes it.
func (l *Leader) HandOver() *Carried {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frozen = true
	return &Carried{epoch: l.epoch, cur: l.cur, log: l.log.clone(), provisional: l.provisional, provisionalSince: l.provisionalSince}
}

// TakeOver continues from a state HandOver returned; it is called before
// the leader's first table.
func (l *Leader) TakeOver(c *Carried) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c == nil || l.cur != nil {
		return
	}
	l.epoch, l.cur, l.log = c.epoch, c.cur, c.log.clone()
	l.provisional, l.provisionalSince = c.provisional, c.provisionalSince
}

// Thaw takes tables again after a reload failed; t is the table served
// now (the changes built while the leader was handed over are found by
// comparing it with the last one).
func (l *Leader) Thaw(t *k8sdns.Table) {
	l.mu.Lock()
	l.frozen = false
	l.mu.Unlock()
	if t != nil {
		l.Rebuilt(t)
	}
}

// step is what a stream sends next: body (records; nil: nothing new)
// brings it from generation from to generation body.gen (to); full says
// body is a whole state; moved that the follower came with another
// epoch's state, which its digest found in the log; buckets (version 4)
// that body is the whole content of these buckets, which the follower's
// bucket digests did not match; wake is closed at the next change.
type step struct {
	epoch   string
	body    *encoded
	from    uint64
	to      uint64
	latest  uint64 // the latest generation (to, unless a reused whole state is older)
	full    bool
	moved   bool
	buckets []uint8
	wake    <-chan struct{}
}

// maxBucketShare is the share of the buckets beyond which a follower's
// differing buckets are sent as the whole state (shared by every stream)
// rather than bucket by bucket (encoded for its own set).
const maxBucketShare = Buckets / 2

// next is the step of a stream at generation gen of epoch (first: the
// stream's opening, which always sends a state). A stream that opens with
// another epoch and the digest d of its state (version 3), which the
// current state or one in the change log has, gets the changes since that
// state, as if it had come with this epoch; one whose state no state of
// the log has but that sent its bucket digests theirs (version 4) gets
// the buckets that differ from the current state's, when they are at most
// maxBucketShare. Outside the change log, or of another epoch and an
// unknown digest, it is a whole state: the latest one encoded when it is
// still in the log and little changed since (the stream's next step sends
// those changes), else the current one.
func (l *Leader) next(epoch string, gen uint64, d digest, theirs *[Buckets]uint64, first bool) step {
	l.mu.Lock()
	st, wake, mine := l.cur, l.wake, l.epoch
	var keys []k8sdns.Key
	var pods []netip.Addr
	var programmed []feed.Trigger
	var namespaces, ok, moved bool
	if epoch != mine && first && d != zeroDigest {
		gen, moved = l.log.find(d)
		epoch = mine
	}
	if epoch == mine {
		keys, namespaces, ok = l.log.since(gen, st.gen)
		if ok {
			pods = l.log.podsSince(gen)
			programmed = l.log.programmedSince(gen)
		}
	}
	l.mu.Unlock()
	s := step{epoch: mine, from: gen, to: st.gen, latest: st.gen, wake: wake, moved: moved && ok}
	var differ bucketSet
	bucketed := !ok && first && theirs != nil && st.buckets != nil
	if bucketed {
		differ = st.buckets.differ(theirs)
		bucketed = differ.len() <= maxBucketShare
	}
	switch {
	case ok && !first && gen == st.gen:
	case ok:
		s.body = l.enc.batch(l, gen, st, change{keys: keys, namespaces: namespaces, pods: pods, programmed: programmed})
	case bucketed: // no trigger times: the follower's state was no generation of this leader's
		s.body = l.enc.buckets(l, st, differ)
		s.from, s.buckets = 0, differ.list()
		if s.buckets == nil {
			s.buckets = []uint8{}
		}
	default:
		s.body = l.enc.full(l, st)
		s.to, s.full, s.moved = s.body.gen, true, false
	}
	return s
}

// reusable reports whether a whole state encoded at generation g may
// start a stream now that st is the latest: st's own, or one in the
// change log whose changes since are few (an eighth of the names, at
// least 64).
func (l *Leader) reusable(g uint64, st *state) bool {
	if g == st.gen {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil || g > l.cur.gen || g < l.log.floor {
		return false
	}
	return l.log.sizeSince(g) <= max(64, st.table.Names()/8)
}

// encoded is an encoding streams share: the records (and namespaces and
// pods lines) of a whole state or of a change batch, which bring a
// follower to generation gen, whose state has digest d. Each stream ends
// it with a synced line of its own version.
type encoded struct {
	b   []byte
	gen uint64
	d   digest
	// prog is the synced line's optional "programmed" field (with its
	// leading comma) of a change batch, nil when none
	prog []byte
}

// encoder keeps the last change batch and the latest whole state
// encoded, so that a change fanned out to many streams is encoded once,
// and the streams that start while the latest whole state is reusable
// share it (each then gets the changes since). One whole state is
// encoded at a time; the streams that want one meanwhile wait for it.
// The latest whole state is held for KeepWhole after it was last asked
// for, and after that only as long as a stream still writes it (a weak
// pointer).
type encoder struct {
	mu        sync.Mutex
	from, to  uint64
	lastBatch *encoded
	fullGen   uint64
	lastFull  weak.Pointer[encoded]
	keep      *encoded    // lastFull's, until the timer
	timer     *time.Timer // drops keep
	flight    *flight     // a whole state being encoded
	// the last buckets encoded: those of set, at generation bucketGen
	bucketGen  uint64
	bucketSet  bucketSet
	lastBucket weak.Pointer[encoded] // held while a stream writes it
}

// flight is a whole state being encoded: enc and gen once done is
// closed.
type flight struct {
	done chan struct{}
	enc  *encoded
	gen  uint64
}

// change is what a batch carries: names, whether the namespaces changed,
// pod index addresses.
type change struct {
	keys       []k8sdns.Key
	namespaces bool
	pods       []netip.Addr
	programmed []feed.Trigger // the API changes the generations brought (programmedSince)
}

// batch encodes the records of c's names (the namespaces, the pod
// addresses) in st's table and the synced line of st.gen: the changes
// from generation from.
func (e *encoder) batch(l *Leader, from uint64, st *state, c change) *encoded {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastBatch != nil && e.from == from && e.to == st.gen {
		return e.lastBatch
	}
	var b []byte
	if c.namespaces {
		b = appendNamespaces(b, st.table.Namespaces())
	}
	if len(c.pods) > 0 {
		ps := make([]k8sdns.PodAddr, len(c.pods))
		for i, a := range c.pods {
			ps[i] = k8sdns.PodAddr{Addr: a, Namespaces: st.table.PodNamespaces(a)}
		}
		b = appendPodLines(b, ps)
	}
	for _, k := range c.keys {
		b = k8sdns.AppendChange(b, st.table.Name(k))
		b = append(b, '\n')
	}
	enc := &encoded{b: b, gen: st.gen, d: st.digest, prog: appendProgrammed(nil, c.programmed)}
	e.from, e.to, e.lastBatch = from, st.gen, enc
	l.Stats.Encoded.Add(1)
	return enc
}

// buckets encodes the whole content of set's buckets in st's table: the
// namespaces line when its bucket is in set, the pod addresses and the
// names of set's buckets (none gone: the follower drops the names of
// those buckets it holds that are not sent). The last set encoded is
// kept: the followers that held the same state ask for the same.
func (e *encoder) buckets(l *Leader, st *state, set bucketSet) *encoded {
	e.mu.Lock()
	defer e.mu.Unlock()
	if enc := e.lastBucket.Value(); enc != nil && e.bucketGen == st.gen && e.bucketSet == set {
		return enc
	}
	var b []byte
	if set.has(nsBucket) {
		b = appendNamespaces(b, st.table.Namespaces())
	}
	if st.table.PodCount() > 0 {
		var ps []k8sdns.PodAddr
		for _, p := range st.table.Pods() {
			if set.has(podBucket(p.Addr)) {
				ps = append(ps, p)
			}
		}
		b = appendPodLines(b, ps)
	}
	for c := range st.table.All() {
		if set.hasKey(c.Key) {
			b = k8sdns.AppendChange(b, c)
			b = append(b, '\n')
		}
	}
	enc := &encoded{b: b, gen: st.gen, d: st.digest}
	e.bucketGen, e.bucketSet, e.lastBucket = st.gen, set, weak.Make(enc)
	l.Stats.Encoded.Add(1)
	return enc
}

// full returns a whole state for a stream starting while st is the
// latest: the latest encoded when l.reusable says it will do, else st's,
// encoded once however many streams ask at once.
func (e *encoder) full(l *Leader, st *state) *encoded {
	for {
		e.mu.Lock()
		enc, gen, f := e.lastFull.Value(), e.fullGen, e.flight
		e.mu.Unlock()
		if enc != nil && l.reusable(gen, st) {
			e.hold(l, enc)
			return enc
		}
		if f != nil {
			<-f.done
			if l.reusable(f.gen, st) {
				e.hold(l, f.enc)
				return f.enc
			}
			continue // an older state than st may use: encode anew
		}
		e.mu.Lock()
		if e.flight != nil || e.lastFull.Value() != enc || e.fullGen != gen {
			e.mu.Unlock()
			continue // another stream began meanwhile
		}
		f = &flight{done: make(chan struct{}), gen: st.gen}
		e.flight = f
		e.mu.Unlock()

		f.enc = encodeWhole(st)
		l.Stats.Encoded.Add(1)
		l.Stats.Wholes.Add(1)
		wholeEncodes.WithLabelValues(l.zone).Inc()
		e.mu.Lock()
		e.fullGen, e.lastFull, e.flight = st.gen, weak.Make(f.enc), nil
		e.mu.Unlock()
		close(f.done)
		e.hold(l, f.enc)
		return f.enc
	}
}

// hold keeps enc for l.KeepWhole from now (if it is still the latest).
func (e *encoder) hold(l *Leader, enc *encoded) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastFull.Value() != enc {
		return
	}
	e.keep = enc
	if e.timer == nil {
		e.timer = time.AfterFunc(l.KeepWhole, func() {
			e.mu.Lock()
			e.keep = nil
			e.mu.Unlock()
		})
		return
	}
	e.timer.Reset(l.KeepWhole)
}

// encodeWhole encodes st's whole table.
func encodeWhole(st *state) *encoded {
	b := appendNamespaces(make([]byte, 0, 256*st.table.Names()+32*st.table.PodCount()), st.table.Namespaces())
	if st.table.PodCount() > 0 {
		b = appendPodLines(b, st.table.Pods())
	}
	for c := range st.table.All() {
		b = k8sdns.AppendChange(b, c)
		b = append(b, '\n')
	}
	return &encoded{b: b, gen: st.gen, d: st.digest}
}

// podsPerLine bounds the addresses of one pods line (~40 bytes each: a
// line stays far below maxLine however many Pods a cluster has).
const podsPerLine = 4096

// appendPodLines appends ps as pods lines of at most podsPerLine
// addresses each.
func appendPodLines(b []byte, ps []k8sdns.PodAddr) []byte {
	for len(ps) > 0 {
		n := min(len(ps), podsPerLine)
		b = appendPods(b, ps[:n])
		ps = ps[n:]
	}
	return b
}

// appendPods appends a pods line: each address with the namespaces of its
// Pods (none: no Pod has it any more).
func appendPods(b []byte, ps []k8sdns.PodAddr) []byte {
	b = append(b, `{"pods":{`...)
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = p.Addr.AppendTo(b)
		b = append(b, `":`...)
		b = jsonw.AppendStrings(b, p.Namespaces)
	}
	return append(b, "}}\n"...)
}

func appendNamespaces(b []byte, nss []string) []byte {
	b = append(b, `{"namespaces":[`...)
	for i, ns := range nss {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.AppendString(b, ns)
	}
	return append(b, "]}\n"...)
}
