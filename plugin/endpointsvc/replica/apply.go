package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// applier turns the lines of one stream into whole states and patches
// for the sink. A state is handed over only once its synced line came:
// whatever arrived before a broken stream or a bad line is dropped, and
// the last good table keeps serving.
type applier struct {
	sink   feed.Sink
	served func() *k8sdns.Table // the table the plugin serves; nil none
	stats  *FollowerStats
	zone   string

	// asked for the changes since (askEpoch, askGen), or since the state
	// whose digest is askDigest (version 3: any replica's): the served
	// table's origin; askEpoch "" asks for the whole state
	askEpoch  string
	askGen    uint64
	askDigest digest
	// askBuckets (version 4): the served table's bucket digests, sent when
	// its content is its origin's digest's (nil: not sent)
	askBuckets *buckets
	options    string // the follower's options, which its tables are built with

	started bool          // the header came
	applied bool          // a state was handed to the sink
	v       int           // the stream's version (the header's)
	epoch   string        // the stream's
	gen     uint64        // the last synced generation (or the one resumed from)
	age     time.Duration // the leader's staleness, as its last header or heartbeat said

	full    *k8sdns.Cluster // a whole state being received; nil: changes
	changes []k8sdns.Change
	seen    map[k8sdns.Key]int // changes' index by name
	nss     []string
	setNSs  bool
	pods    map[netip.Addr][]string // pod addresses changed (pods verified)

	// bucketed: the state being received is the whole content of the
	// buckets in set (version 4), the rest is the served table's
	bucketed bool
	set      bucketSet
}

// errDigest is a bucket resume whose result is not the state the leader
// named: the follower asks for the whole state next.
var errDigest = errors.New("the buckets received do not make the state the synced line names: not applied")

// line applies one line (without its newline).
func (a *applier) line(b []byte) error {
	if bytes.HasPrefix(b, []byte(recordPrefix)) || bytes.HasPrefix(b, []byte(importPrefix)) {
		return a.record(b)
	}
	var c control
	d := json.NewDecoder(bytes.NewReader(b)) // unknown fields ignored: a newer leader's
	if err := d.Decode(&c); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	age, err := ageOf(c.Age)
	if err != nil {
		return err
	}
	switch {
	case !c.known() && bytes.HasPrefix(b, []byte(`{"`)):
		return nil // a line of a newer version (it has fields, none this one reads)
	case c.Pods != nil:
		if c.Epoch != nil || c.Gen != nil || c.Full != nil || c.Synced || c.Namespaces != nil {
			return errors.New("a pods line wants pods only")
		}
		return a.podsLine(*c.Pods)
	case c.Epoch != nil:
		if c.Gen == nil || c.Full == nil || c.Synced || c.Namespaces != nil {
			return errors.New("a header wants epoch, gen and full only")
		}
		if err := a.header(*c.Epoch, *c.Gen, *c.Full, c.From, c.Buckets); err != nil {
			return err
		}
		a.v, a.age = 1, age
		if c.V != nil {
			a.v = *c.V
		}
		return nil
	case c.Namespaces != nil:
		if c.Gen != nil || c.Full != nil || c.Synced {
			return errors.New("a namespaces line wants namespaces only")
		}
		return a.namespaces(*c.Namespaces)
	case c.Gen != nil && c.Full == nil && c.Synced:
		d := zeroDigest
		if c.Digest != nil {
			var ok bool
			if d, ok = parseDigest(*c.Digest); !ok {
				return errorf("bad digest %q", *c.Digest)
			}
		}
		prog, err := programmedOf(c.Programmed)
		if err != nil {
			return err
		}
		return a.synced(*c.Gen, d, prog)
	case c.Gen != nil && c.Full == nil:
		return a.heartbeat(*c.Gen, age)
	}
	return errors.New("not a line of the stream")
}

// header begins a state: whole (at the stream's start, or again when the
// follower fell behind the leader's log) or the changes since what the
// follower asked for (only at the start): since its generation of the
// same epoch, or (version 3, from given) since the leader's generation
// from, whose state has the digest the follower asked with, or (version
// 4, buckets given) the whole content of the buckets whose digests
// differed from those the follower asked with.
func (a *applier) header(epoch string, gen uint64, full bool, from *uint64, buckets *[]int) error {
	if !validEpoch(epoch) {
		return errorf("bad epoch %q", epoch)
	}
	switch {
	case a.started:
		if !full || buckets != nil || epoch != a.epoch || gen <= a.gen || a.pending() {
			return errorf("header (epoch %s gen %d full %v) in the middle of a state or of another stream", epoch, gen, full)
		}
	case buckets != nil:
		if full || from != nil || a.askBuckets == nil || a.served() == nil {
			return errorf("buckets at %s/%d, but none were asked for", epoch, gen)
		}
		for _, b := range *buckets {
			if b < 0 || b >= Buckets {
				return errorf("bad bucket %d", b)
			}
			a.set.add(uint8(b))
		}
		a.bucketed, a.gen = true, 0
	case !full:
		since := a.askGen
		if from != nil {
			since = *from
		}
		same := epoch == a.askEpoch && since == a.askGen
		moved := epoch != a.askEpoch && from != nil && a.askDigest != zeroDigest
		if (!same && !moved) || gen < since || a.served() == nil {
			return errorf("changes since %s/%d, but the table is at %s/%d", epoch, since, a.askEpoch, a.askGen)
		}
		a.gen = since
	}
	a.started, a.epoch = true, epoch
	if full {
		a.full = &k8sdns.Cluster{}
	}
	return nil
}

func (a *applier) record(b []byte) error {
	if !a.started {
		return errors.New("a record before the header")
	}
	c, err := k8sdns.DecodeChangeTolerant(b)
	if err != nil {
		return err
	}
	if a.bucketed && !a.set.hasKey(c.Key) {
		return errorf("a record of %s/%s outside the buckets sent", c.Key.Namespace, c.Key.Name)
	}
	if a.full != nil {
		a.full.Add(c)
		a.stats.FullRecords.Add(1)
		receivedRecords.WithLabelValues(a.zone, "full").Inc()
		return nil
	}
	if a.seen == nil {
		a.seen = map[k8sdns.Key]int{}
	}
	if i, ok := a.seen[c.Key]; ok {
		a.changes[i] = c
	} else {
		a.seen[c.Key] = len(a.changes)
		a.changes = append(a.changes, c)
	}
	a.stats.ChangeRecords.Add(1)
	receivedRecords.WithLabelValues(a.zone, "change").Inc()
	return nil
}

func (a *applier) namespaces(nss []string) error {
	if !a.started {
		return errors.New("namespaces before the header")
	}
	if a.bucketed && !a.set.has(nsBucket) {
		return errors.New("namespaces outside the buckets sent")
	}
	if a.full != nil {
		a.full.Namespaces = nss
	} else {
		a.nss, a.setNSs = nss, true
	}
	return nil
}

// podsLine takes the pod addresses of a pods line: a whole state's, or
// changes (an address with no namespace is gone).
func (a *applier) podsLine(m map[string][]string) error {
	if !a.started {
		return errors.New("pods before the header")
	}
	if a.pods == nil {
		a.pods = make(map[netip.Addr][]string, len(m))
	}
	for s, nss := range m {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" || slices.Contains(nss, "") {
			return fmt.Errorf("pods: bad address %q or namespace", s)
		}
		if a.bucketed && !a.set.has(podBucket(ip)) {
			return fmt.Errorf("pods: address %s outside the buckets sent", ip)
		}
		a.pods[ip.Unmap()] = slices.Sorted(slices.Values(nss))
	}
	return nil
}

// podAddrs are the pod addresses received, in address order (whole: the
// gone ones left out).
func (a *applier) podAddrs(whole bool) []k8sdns.PodAddr {
	out := make([]k8sdns.PodAddr, 0, len(a.pods))
	for ip, nss := range a.pods {
		if !whole || len(nss) > 0 {
			out = append(out, k8sdns.PodAddr{Addr: ip, Namespaces: nss})
		}
	}
	slices.SortFunc(out, func(x, y k8sdns.PodAddr) int { return x.Addr.Compare(y.Addr) })
	return out
}

// pending reports whether part of a state has arrived.
func (a *applier) pending() bool {
	return a.full != nil || len(a.changes) > 0 || a.setNSs || len(a.pods) > 0 || a.bucketed
}

// synced hands the state received to the sink: a whole state as an
// update, changes as a patch of the served table, with the trigger times
// of the API changes they bring (the line's "programmed"; a whole state's
// are not observed).
func (a *applier) synced(gen uint64, d digest, programmed []feed.Trigger) error {
	switch {
	case !a.started:
		return errors.New("synced before the header")
	case gen < a.gen || (gen == a.gen && a.pending()):
		return errorf("synced generation %d after %d", gen, a.gen)
	}
	if a.bucketed {
		if err := a.fillBuckets(d); err != nil {
			return err
		}
		programmed = nil // a bucket resume is no change this follower can date (a leader sends none)
	}
	o := position{epoch: a.epoch, gen: gen, digest: d, options: a.options}.String()
	a.setAge()
	switch {
	case a.full != nil:
		a.full.Origin = o
		if len(a.pods) > 0 {
			a.full.Pods = a.podAddrs(true)
		}
		a.sink.Update(a.full)
		a.stats.Full.Add(1)
	case a.pending() || gen != a.gen || a.reorigin(o):
		p := a.patch(o)
		p.Programmed = programmed // the leader's API changes, observed once the patch is served
		a.sink.Patch(p)
		a.stats.Patches.Add(1)
	default:
		a.sink.Unchanged()
	}
	a.gen, a.full, a.changes, a.seen, a.nss, a.setNSs, a.pods = gen, nil, nil, nil, nil, false, nil
	a.bucketed, a.set, a.askBuckets = false, bucketSet{}, nil
	a.applied = true
	return nil
}

// fillBuckets completes a bucket resume into a patch of the served table:
// each name and pod address the table holds in a bucket sent but that
// was not sent is gone. It checks, before anything is applied, that the
// result's digest - the served table's other buckets' digests and the
// hashes of what was received - is d, the synced line's: a leader that
// sent a wrong or partial bucket, or a table that is not the content its
// buckets were computed from, fails with errDigest.
func (a *applier) fillBuckets(d digest) error {
	t := a.served()
	if t == nil || d == zeroDigest {
		return errDigest
	}
	if a.set.has(nsBucket) && !a.setNSs {
		return errors.New("a bucket resume without the namespaces line of its bucket")
	}
	var h hasher
	sum := zeroDigest
	for b := range Buckets {
		if !a.set.has(uint8(b)) {
			sum = sum.add(a.askBuckets[b])
		}
	}
	for _, c := range a.changes {
		sum = sum.add(h.record(c))
	}
	if a.set.has(nsBucket) {
		sum = sum.add(h.namespaces(a.nss))
	}
	for ip, nss := range a.pods {
		sum = sum.add(h.pod(ip, nss))
	}
	if sum != d {
		return errDigest
	}
	for c := range t.All() {
		if _, ok := a.seen[c.Key]; !ok && a.set.hasKey(c.Key) {
			if a.seen == nil {
				a.seen = map[k8sdns.Key]int{}
			}
			a.seen[c.Key] = len(a.changes)
			a.changes = append(a.changes, k8sdns.Change{Key: c.Key})
		}
	}
	if t.PodCount() > 0 {
		for _, p := range t.Pods() {
			if _, ok := a.pods[p.Addr]; !ok && a.set.has(podBucket(p.Addr)) {
				if a.pods == nil {
					a.pods = map[netip.Addr][]string{}
				}
				a.pods[p.Addr] = nil
			}
		}
	}
	return nil
}

// reorigin reports whether the served table's origin is not o (a
// follower resumed from another epoch's state, or whose origin did not
// name its options or digest yet): an empty patch sets it.
func (a *applier) reorigin(o string) bool {
	t := a.served()
	return t != nil && t.Origin() != o
}

// patch is the changes received, from generation o on.
func (a *applier) patch(o string) *k8sdns.Patch {
	served := a.served
	return &k8sdns.Patch{
		Changes: a.changes, Namespaces: a.nss, SetNamespaces: a.setNSs, Origin: o, Pods: a.podAddrs(false),
		Whole: func() *k8sdns.Cluster {
			if t := served(); t != nil {
				return t.Whole()
			}
			return &k8sdns.Cluster{}
		},
		// the table served when the snapshot is written: this patch's or
		// a later one, with its own origin
		WriteSnapshot: func(w io.Writer) error {
			t := served()
			if t == nil {
				return errors.New("replica: no table to write")
			}
			return t.Snapshot(w)
		},
	}
}

// heartbeat is an idle stream's sign of life: the follower's table is the
// leader's, which is age behind its own source.
func (a *applier) heartbeat(gen uint64, age time.Duration) error {
	if !a.started || a.pending() || gen != a.gen {
		return errorf("heartbeat of generation %d at %d", gen, a.gen)
	}
	a.age = age
	a.setAge()
	a.sink.Unchanged()
	return nil
}

// setAge tells the sink how far behind the leader's table is, before a
// result.
func (a *applier) setAge() {
	if s, ok := a.sink.(feed.Aged); ok {
		s.SetAge(a.age)
	}
}
