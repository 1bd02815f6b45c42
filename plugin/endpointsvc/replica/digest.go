package replica

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"slices"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// A digest names a state by its content, so that any replica recognises
// it (version 3): the sum, lane by lane modulo 2^64, of a 128-bit hash
// (SHA-256's first 16 bytes) of each of the state's items in the stream's
// own encoding - each name's record (AppendChange), the namespaces line,
// and each pod address with its namespaces. A sum does not depend on the
// order, so a patch moves it by the items it changed alone (minus the old
// ones' hashes, plus the new ones'), and two replicas that built the same
// content from the same API state, whatever their generations, hold the
// same digest.
type digest [2]uint64

// zeroDigest is no digest (an empty state has the namespaces line's).
var zeroDigest digest

// item kinds, hashed first: a record, the namespaces, a pod address
const (
	itemRecord = 'r'
	itemNSs    = 'n'
	itemPod    = 'p'
)

// hasher hashes items into a reused buffer.
type hasher struct{ buf []byte }

func (h *hasher) sum(b []byte) digest {
	s := sha256.Sum256(b)
	h.buf = b[:0]
	return digest{binary.LittleEndian.Uint64(s[0:8]), binary.LittleEndian.Uint64(s[8:16])}
}

// record is a name's hash; zeroDigest when the name is gone.
func (h *hasher) record(c k8sdns.Change) digest {
	if c.Service == nil && len(c.Slices) == 0 {
		return zeroDigest
	}
	return h.sum(k8sdns.AppendChange(append(h.buf[:0], itemRecord), c))
}

func (h *hasher) namespaces(nss []string) digest {
	return h.sum(appendNamespaces(append(h.buf[:0], itemNSs), nss))
}

// pod is an address's hash; zeroDigest when no Pod has it.
func (h *hasher) pod(a netip.Addr, nss []string) digest {
	if len(nss) == 0 {
		return zeroDigest
	}
	b := a.Unmap().AppendTo(append(h.buf[:0], itemPod))
	return h.sum(jsonw.AppendStrings(b, nss))
}

func (d digest) add(o digest) digest { return digest{d[0] + o[0], d[1] + o[1]} }
func (d digest) sub(o digest) digest { return digest{d[0] - o[0], d[1] - o[1]} }

// String is the digest in 32 hex digits.
func (d digest) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], d[0])
	binary.BigEndian.PutUint64(b[8:16], d[1])
	return hex.EncodeToString(b[:])
}

// parseDigest reads String's form.
func parseDigest(s string) (digest, bool) {
	if len(s) != 32 || !validEpoch(s[:16]) || !validEpoch(s[16:]) {
		return zeroDigest, false
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return zeroDigest, false
	}
	return digest{binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])}, true
}

// wholeDigest is t's digest, item by item.
func wholeDigest(t *k8sdns.Table) digest {
	var h hasher
	d := h.namespaces(t.Namespaces())
	for c := range t.All() {
		d = d.add(h.record(c))
	}
	if t.PodCount() > 0 {
		for _, p := range t.Pods() {
			d = d.add(h.pod(p.Addr, p.Namespaces))
		}
	}
	return d
}

// moved is the digest of t, and its bucket digests (bs: old's; nil: not
// kept), which differs from old (whose digest d is) in e's names,
// namespaces and pod addresses at most: work in proportion to the change.
// A name or address listed twice counts once. bs is not changed.
func (d digest) moved(bs *buckets, old, t *k8sdns.Table, e *logEntry) (digest, *buckets) {
	var h hasher
	var nb *buckets
	if bs != nil {
		c := *bs
		nb = &c
	}
	move := func(b uint8, was, is digest) {
		d = d.sub(was).add(is)
		if nb != nil {
			nb[b] = nb[b].sub(was).add(is)
		}
	}
	keys := slices.Compact(slices.SortedFunc(slices.Values(e.keys), compareKeys))
	pods := make([]netip.Addr, len(e.pods))
	for i, a := range e.pods {
		pods[i] = a.Unmap()
	}
	slices.SortFunc(pods, netip.Addr.Compare)
	pods = slices.Compact(pods)
	for _, k := range keys {
		move(keyBucket(k), h.record(old.Name(k)), h.record(t.Name(k)))
	}
	if e.namespaces {
		move(nsBucket, h.namespaces(old.Namespaces()), h.namespaces(t.Namespaces()))
	}
	for _, a := range pods {
		move(podBucket(a), h.pod(a, old.PodNamespaces(a)), h.pod(a, t.PodNamespaces(a)))
	}
	return d, nb
}
