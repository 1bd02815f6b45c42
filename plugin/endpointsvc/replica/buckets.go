package replica

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"net/netip"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// Buckets (version 4). A state's items - each name's record, the
// namespaces line, each pod address - fall into Buckets buckets by a
// stable hash of the item's key (bucketOf: FNV-1a, folded to a byte;
// the same in every meshdns of version 4, whatever the process); each
// bucket has a digest, the sum of its items' hashes (digest.go), so the
// buckets' digests sum to the state's. A follower that comes with a state
// no replica recognises sends its buckets' digests (their first lanes),
// and the leader sends only the buckets whose digest differs.
const Buckets = 256

// buckets are a state's bucket digests.
type buckets [Buckets]digest

// bucketSet is a set of buckets.
type bucketSet [Buckets / 64]uint64

func (s *bucketSet) add(b uint8)              { s[b/64] |= 1 << (b % 64) }
func (s *bucketSet) has(b uint8) bool         { return s[b/64]&(1<<(b%64)) != 0 }
func (s *bucketSet) hasKey(k k8sdns.Key) bool { return s.has(keyBucket(k)) }

// len is how many buckets s holds.
func (s *bucketSet) len() int {
	n := 0
	for b := range Buckets {
		if s.has(uint8(b)) {
			n++
		}
	}
	return n
}

// list is s's buckets in order.
func (s *bucketSet) list() []uint8 {
	var out []uint8
	for b := range Buckets {
		if s.has(uint8(b)) {
			out = append(out, uint8(b))
		}
	}
	return out
}

// fold is a 64-bit FNV-1a hash folded to a bucket.
func fold(h uint64) uint8 {
	h ^= h >> 32
	h ^= h >> 16
	h ^= h >> 8
	return uint8(h)
}

// keyBucket is a record's bucket: of "r", its namespace, NUL, its name,
// and "\x00i" for a ServiceImport's.
func keyBucket(k k8sdns.Key) uint8 {
	h := fnv.New64a()
	h.Write([]byte{itemRecord})
	h.Write([]byte(k.Namespace))
	h.Write([]byte{0})
	h.Write([]byte(k.Name))
	if k.Import {
		h.Write([]byte{0, 'i'})
	}
	return fold(h.Sum64())
}

// nsBucket is the namespaces line's bucket: of "n".
var nsBucket = func() uint8 {
	h := fnv.New64a()
	h.Write([]byte{itemNSs})
	return fold(h.Sum64())
}()

// podBucket is a pod address's bucket: of "p" and its 4 or 16 bytes.
func podBucket(a netip.Addr) uint8 {
	h := fnv.New64a()
	h.Write([]byte{itemPod})
	h.Write(a.Unmap().AsSlice())
	return fold(h.Sum64())
}

// wholeBuckets are t's digest and bucket digests, item by item.
func wholeBuckets(t *k8sdns.Table) (digest, *buckets) {
	var h hasher
	var bs buckets
	d := h.namespaces(t.Namespaces())
	bs[nsBucket] = d
	for c := range t.All() {
		x := h.record(c)
		d = d.add(x)
		b := keyBucket(c.Key)
		bs[b] = bs[b].add(x)
	}
	if t.PodCount() > 0 {
		for _, p := range t.Pods() {
			x := h.pod(p.Addr, p.Namespaces)
			d = d.add(x)
			b := podBucket(p.Addr)
			bs[b] = bs[b].add(x)
		}
	}
	return d, &bs
}

// bucketsParamLen is the length of the buckets parameter: the first lane
// of each bucket's digest, 8 bytes big-endian, in bucket order, base64url
// without padding (2,731 characters: a GET fits; a 64-bit lane per bucket
// only chooses what is sent, the whole digest of the result is checked).
var bucketsParamLen = base64.RawURLEncoding.EncodedLen(Buckets * 8)

// lanes is the buckets parameter of bs.
func (bs *buckets) lanes() string {
	b := make([]byte, Buckets*8)
	for i, d := range bs {
		binary.BigEndian.PutUint64(b[i*8:], d[0])
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseLanes reads the buckets parameter.
func parseLanes(s string) (*[Buckets]uint64, bool) {
	if len(s) != bucketsParamLen {
		return nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != Buckets*8 {
		return nil, false
	}
	var out [Buckets]uint64
	for i := range out {
		out[i] = binary.BigEndian.Uint64(b[i*8:])
	}
	return &out, true
}

// differ is the set of buckets of bs whose digest's first lane is not
// the follower's.
func (bs *buckets) differ(theirs *[Buckets]uint64) bucketSet {
	var s bucketSet
	for i := range bs {
		if bs[i][0] != theirs[i] {
			s.add(uint8(i))
		}
	}
	return s
}
