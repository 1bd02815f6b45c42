package replica

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// Bounds of the change log: a follower further behind gets the whole
// state.
const (
	maxLogEntries = 4096
	maxLogKeys    = 1 << 16
)

// changeLog is the leader's bounded change log: for each generation after
// floor, the names it changed and whether the namespaces did. A follower
// at generation g with floor <= g <= the latest needs only the union of
// the entries after g.
type changeLog struct {
	floor       uint64
	floorDigest digest     // the digest of generation floor's state
	entries     []logEntry // generations floor+1 …, in order
	keys        int        // names in entries, in all
}

type logEntry struct {
	gen        uint64
	keys       []k8sdns.Key
	namespaces bool
	pods       []netip.Addr   // pod index addresses changed (pods verified)
	digest     digest         // the digest of the state generation gen is
	programmed []feed.Trigger // the API changes the generation brought (not in the digest)
}

// size is what an entry counts against maxLogKeys.
func (e *logEntry) size() int { return len(e.keys) + len(e.pods) }

// add appends generation e.gen (the next one) and forgets the oldest
// entries beyond the bounds.
func (l *changeLog) add(e logEntry) {
	l.entries = append(l.entries, e)
	l.keys += e.size()
	drop := 0
	for drop < len(l.entries) && (len(l.entries)-drop > maxLogEntries || l.keys > maxLogKeys) {
		l.keys -= l.entries[drop].size()
		l.floor, l.floorDigest = l.entries[drop].gen, l.entries[drop].digest
		drop++
	}
	if drop > 0 {
		l.entries = slices.Delete(l.entries, 0, drop)
	}
}

// since returns the names changed after generation gen up to the latest,
// latest, sorted and each once, and whether the namespaces changed; ok is
// false when gen is outside the log.
func (l *changeLog) since(gen, latest uint64) (keys []k8sdns.Key, namespaces, ok bool) {
	if gen < l.floor || gen > latest {
		return nil, false, false
	}
	i, _ := slices.BinarySearchFunc(l.entries, gen+1, func(e logEntry, g uint64) int { return cmp.Compare(e.gen, g) })
	for _, e := range l.entries[i:] {
		keys = append(keys, e.keys...)
		namespaces = namespaces || e.namespaces
	}
	slices.SortFunc(keys, compareKeys)
	return slices.Compact(keys), namespaces, true
}

// sizeSince is how many names and pod addresses the entries after
// generation gen changed, counted once per entry (gen inside the log).
func (l *changeLog) sizeSince(gen uint64) int {
	i, _ := slices.BinarySearchFunc(l.entries, gen+1, func(e logEntry, g uint64) int { return cmp.Compare(e.gen, g) })
	n := 0
	for _, e := range l.entries[i:] {
		n += e.size()
	}
	return n
}

// podsSince returns the pod addresses changed after generation gen,
// sorted and each once (gen inside the log: since said ok).
func (l *changeLog) podsSince(gen uint64) []netip.Addr {
	i, _ := slices.BinarySearchFunc(l.entries, gen+1, func(e logEntry, g uint64) int { return cmp.Compare(e.gen, g) })
	var out []netip.Addr
	for _, e := range l.entries[i:] {
		out = append(out, e.pods...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// programmedSince returns the triggers of the generations after gen
// (inside the log: since said ok), oldest generation first, at most
// maxProgrammed: a follower that catches up on more changes than that
// observes the first ones.
func (l *changeLog) programmedSince(gen uint64) []feed.Trigger {
	i, _ := slices.BinarySearchFunc(l.entries, gen+1, func(e logEntry, g uint64) int { return cmp.Compare(e.gen, g) })
	var out []feed.Trigger
	for _, e := range l.entries[i:] {
		if len(out)+len(e.programmed) > maxProgrammed {
			out = append(out, e.programmed[:maxProgrammed-len(out)]...)
			break
		}
		out = append(out, e.programmed...)
	}
	return out
}

// find returns the latest generation in the log whose state has digest
// d; ok is false when none has.
func (l *changeLog) find(d digest) (gen uint64, ok bool) {
	for i := len(l.entries) - 1; i >= 0; i-- {
		if l.entries[i].digest == d {
			return l.entries[i].gen, true
		}
	}
	if l.floor > 0 && l.floorDigest == d {
		return l.floor, true
	}
	return 0, false
}

// clone is a copy that later adds do not change (for a reload).
func (l *changeLog) clone() changeLog {
	return changeLog{floor: l.floor, floorDigest: l.floorDigest, entries: slices.Clone(l.entries), keys: l.keys}
}

func compareKeys(a, b k8sdns.Key) int { return a.Compare(b) }
