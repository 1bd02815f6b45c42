// Package replica is endpointsvc's replication stream: a cluster-DNS
// replica (the leader, `replicate ADDR`) offers the Kubernetes DNS model
// its table is built from over HTTP, and a node-local meshdns (the
// follower, `source replica URL`) keeps its own table from it, so that a
// thousand nodes cost the API server no watch at all.
//
// The stream is one long HTTP response, GET /v1/replicate?v=V&epoch=E&gen=G&digest=D&buckets=B,
// of newline-delimited JSON objects; each line's first key says what it
// is:
//
//	{"epoch":"3f9c…","gen":41,"full":true,"v":2}  a state begins: the whole state (full), or the changes since G
//	{"epoch":"3f9c…","gen":41,"full":false,"v":4,"buckets":[3,17]}  a state begins: the whole content of these buckets (v4)
//	{"namespaces":["default","shop"]}          the namespaces that exist (a whole state; a change when they changed)
//	{"pods":{"10.244.1.5":["shop"],…}}         pods verified: addresses with their Pods' namespaces, 4,096 a line at most (a whole state: every one; a change: those changed, [] gone)
//	{"namespace":"shop","name":"web",…}        one name's whole content: k8sdns's record (Service and slices), or gone
//	{"import":{"namespace":"shop",…}}          multicluster: a ServiceImport's name's, the same way (a follower before it ignores the line)
//	{"gen":41,"synced":true,"digest":"…"}      the state up to here is generation 41 (digest: v3): apply it
//	  …,"programmed":{"cluster_ip":[1733…],…}}  optional, change batches only (v3 and later): the API changes they bring (below)
//	{"gen":41,"age":12.5}                      a heartbeat, every 10 s while nothing changed (age: v2, the leader's own table is that many seconds behind its source)
//
// After the first state every table change of the leader follows as its
// records and a synced line. A follower that asks with the leader's epoch
// and a generation still in the leader's change log gets only the names
// changed since (each once, as it is now); so does (v3) a follower of
// another epoch whose state's digest the leader's current state or one in
// its log has (another replica, a restarted leader: the same API state
// gives the same content and digest), with "from" in the header naming
// the leader's generation of that state. One (v4) whose state no state of
// the leader has gets the buckets that differ: see below. Any other gets
// the whole state.
//
// Buckets (version 4). A state's items (each name's record, the
// namespaces line, each pod address) fall into 256 buckets by a stable
// hash of their key (buckets.go); a bucket's digest is its items' sum, as
// the whole digest is, and moves with each patch. A follower that asks
// with a position adds its buckets' digests, only when its table's
// content is its position's digest (a table its options reshaped is not
// the leader's content: it asks as version 3 did): the first lane of each
// bucket digest, 8 bytes, 256 of them in bucket order, base64url without
// padding, as the GET parameter buckets (2,731 characters; a 64-bit lane
// chooses what is sent, the 128-bit digest of the result is what is
// checked). When neither its generation nor its digest is recognised and
// at most half the buckets differ, the leader answers with a header
// listing the differing buckets ("buckets"), each such bucket's items
// whole (records, the namespaces line when its bucket is listed, the pod
// addresses), nothing for names gone, and the synced line with the
// state's digest. The follower takes every name and pod address it holds
// in a listed bucket but did not receive for gone, and before applying
// anything checks that its unlisted buckets' digests plus the hashes of
// what it received make the synced line's digest: otherwise the stream
// is dropped and the next asks for the whole state (no position), so a
// wrong or tampered bucket is never served. More than half the buckets
// differing, or options changed: the whole state.
// The follower applies a whole state as a whole table, and the changes as
// a patch, only once their synced line came: a state half received is
// never served.
//
// Versions. The follower asks with the newest version it speaks (v; none
// is 1) and the leader answers with the older of that and its own, in
// the header ("v"; none is 1): a leader sends a follower of version 1
// exactly what version 1 wrote, so that either side may be upgraded
// first. A follower ignores the fields, and the lines, it does not know,
// whatever the version. Version 2 adds the leader's staleness ("age", in
// seconds, in headers and heartbeats; none is 0): a follower whose
// leader's table is behind its source is as far behind. Version 3 adds
// the digest (synced lines, the request) and "from" (headers of changes).
// Version 4 adds buckets (the request, and headers of a bucket resume).
// A follower reads only the synced line's gen, synced, digest and
// programmed: other fields a leader adds are ignored.
//
// Programming latency. The synced line of a change batch may carry
// "programmed": for each service kind (feed.Kinds), the trigger times
// (unix microseconds) of the API changes the batch's generations brought
// into the leader's table, at most maxProgrammed in all; the follower
// observes each in its own dns_programming_duration_seconds when it has
// applied the batch. It is optional and outside the digest, so it needs
// no version: a follower that does not know it ignores it (unknown
// fields), a leader that does not know it sends none. Whole states and
// bucket resumes carry none (a follower's first table, or one rebuilt
// from another leader's state, is no change it can date), and streams of
// versions 1 and 2 none (they get what those versions wrote).
package replica

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
)

// Protocol settings.
const (
	// Path is the stream's HTTP route.
	Path = "/v1/replicate"
	// ContentType is the stream's media type.
	ContentType = "application/x-ndjson"
	// Heartbeat is how often an idle stream says it is alive.
	Heartbeat = 10 * time.Second
	// Pace is the shortest time between two change lines of one stream:
	// the changes that come meanwhile go out in the next line together.
	// The table takes every change at once (the kubernetes source patches
	// at most every 10 ms); a thousand streams write at most 20 lines a
	// second each, under any churn.
	Pace = 50 * time.Millisecond
	// Silence is how long a follower waits for a line before it takes the
	// stream for broken (three heartbeats).
	Silence = 30 * time.Second
	// Backoff is the follower's first wait before it connects again; each
	// failure in a row doubles it up to MaxBackoff, a healthy stream
	// (Healthy long, with a state applied) starts it over, and each wait
	// is drawn between half of it and all of it.
	Backoff    = time.Second
	MaxBackoff = 30 * time.Second
	Healthy    = 10 * time.Second
	// WholeSends is how many whole states a leader writes at once; a
	// stream that would be one more waits WholeWait for a slot, then gets
	// 503 with a Retry-After.
	WholeSends = 8
	WholeWait  = 2 * time.Second
	// WriteTimeout bounds the write of one chunk (ChunkSize) to a
	// follower: one that reads nothing for that long loses its stream.
	WriteTimeout = 10 * time.Second
	ChunkSize    = 64 << 10
	// KeepWhole is how long the latest whole state's encoding is kept
	// after it was last asked for, so that the streams that start within
	// it share it (and get the changes since) rather than encode again.
	KeepWhole = 10 * time.Second
	// FirstSync bounds how long a leader that started from its snapshot
	// turns followers away while its source has not answered.
	FirstSync = 20 * time.Second
	// maxLine bounds one line (a Service with thousands of endpoints is
	// a few hundred kilobytes).
	maxLine = 16 << 20
)

// Version is the newest version of the stream this meshdns speaks.
const Version = 4

// control is any line but a record, as the follower reads it (unknown
// fields ignored). A record line is k8sdns's (AppendChange).
type control struct {
	Epoch      *string              `json:"epoch"`
	Gen        *uint64              `json:"gen"`
	Full       *bool                `json:"full"`
	V          *int                 `json:"v"`
	Age        *float64             `json:"age"`
	From       *uint64              `json:"from"`
	Digest     *string              `json:"digest"`
	Synced     bool                 `json:"synced"`
	Namespaces *[]string            `json:"namespaces"`
	Pods       *map[string][]string `json:"pods"`
	Buckets    *[]int               `json:"buckets"`
	// Programmed is a synced line's optional trigger times, by kind (no
	// version: known() does not count it)
	Programmed map[string][]int64 `json:"programmed"`
}

// known reports whether the line has any field this version reads.
func (c *control) known() bool {
	return c.Epoch != nil || c.Gen != nil || c.Full != nil || c.V != nil || c.Age != nil || c.From != nil || c.Digest != nil ||
		c.Synced || c.Namespaces != nil || c.Pods != nil || c.Buckets != nil
}

// recordPrefix starts every record line; importPrefix a ServiceImport's.
const (
	recordPrefix = `{"namespace":`
	importPrefix = `{"import":`
)

// appendHeader appends the header of a state of version v (1: without
// v and age; 3: the changes say from which generation); age is the
// leader's staleness.
func appendHeader(b []byte, epoch string, gen uint64, full bool, v int, age time.Duration, from uint64) []byte {
	b = append(b, `{"epoch":"`...)
	b = append(b, epoch...) // hex: no escaping
	b = append(b, `","gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, `,"full":`...)
	b = strconv.AppendBool(b, full)
	if v >= 2 {
		b = append(b, `,"v":`...)
		b = strconv.AppendInt(b, int64(v), 10)
		b = appendAge(b, age)
	}
	if v >= 3 && !full {
		b = append(b, `,"from":`...)
		b = strconv.AppendUint(b, from, 10)
	}
	return append(b, "}\n"...)
}

// appendBucketHeader appends the header of a bucket resume (version 4):
// the content of buckets follows, whole.
func appendBucketHeader(b []byte, epoch string, gen uint64, v int, age time.Duration, buckets []uint8) []byte {
	b = append(b, `{"epoch":"`...)
	b = append(b, epoch...)
	b = append(b, `","gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, `,"full":false,"v":`...)
	b = strconv.AppendInt(b, int64(v), 10)
	b = appendAge(b, age)
	b = append(b, `,"buckets":[`...)
	for i, n := range buckets {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(n), 10)
	}
	return append(b, "]}\n"...)
}

// appendAge appends `,"age":SECONDS` (milliseconds) when age is not 0.
func appendAge(b []byte, age time.Duration) []byte {
	if age <= 0 {
		return b
	}
	b = append(b, `,"age":`...)
	return strconv.AppendFloat(b, age.Round(time.Millisecond).Seconds(), 'f', -1, 64)
}

// appendSynced appends the synced line of generation gen, of version v
// (3: with the state's digest d, and prog, appendProgrammed's field).
func appendSynced(b []byte, gen uint64, v int, d digest, prog []byte) []byte {
	b = append(b, `{"gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, `,"synced":true`...)
	if v >= 3 {
		b = append(b, `,"digest":"`...)
		b = append(b, d.String()...)
		b = append(b, '"')
		b = append(b, prog...)
	}
	return append(b, "}\n"...)
}

// maxProgrammed bounds the trigger times of one synced line.
const maxProgrammed = 4096

// appendProgrammed appends `,"programmed":{KIND:[MICROSECONDS,…],…}`
// for ts (kinds in feed.Kinds order), nothing when ts is empty.
func appendProgrammed(b []byte, ts []feed.Trigger) []byte {
	if len(ts) == 0 {
		return b
	}
	b = append(b, `,"programmed":{`...)
	first := true
	for _, k := range feed.Kinds {
		n := 0
		for _, t := range ts {
			if t.Kind != k {
				continue
			}
			switch {
			case n == 0 && first:
				b = append(b, '"')
			case n == 0:
				b = append(b, `,"`...)
			default:
				b = append(b, ',')
			}
			if n == 0 {
				b = append(b, k...) // a kind name: no escaping
				b = append(b, `":[`...)
				first = false
			}
			b = strconv.AppendInt(b, t.At.UnixMicro(), 10)
			n++
		}
		if n > 0 {
			b = append(b, ']')
		}
	}
	return append(b, '}')
}

// programmedOf reads a synced line's "programmed": the trigger times of
// the kinds this version knows (a newer leader's others are ignored), at
// most maxProgrammed; a time that is not after 1970 is an error.
func programmedOf(m map[string][]int64) ([]feed.Trigger, error) {
	var out []feed.Trigger
	for _, k := range feed.Kinds {
		for _, us := range m[k] {
			if us <= 0 {
				return nil, errorf("bad programmed time %d", us)
			}
			if len(out) < maxProgrammed {
				out = append(out, feed.Trigger{Kind: k, At: time.UnixMicro(us)})
			}
		}
	}
	return out, nil
}

// appendHeartbeat appends a heartbeat of version v (1: without age).
func appendHeartbeat(b []byte, gen uint64, v int, age time.Duration) []byte {
	b = append(b, `{"gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	if v >= 2 {
		b = appendAge(b, age)
	}
	return append(b, "}\n"...)
}

// ageOf reads a line's age: seconds, none 0; anything negative, not a
// number or beyond a year is refused.
func ageOf(s *float64) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	if !(*s >= 0 && *s <= 365*24*3600) {
		return 0, errorf("bad age %v", *s)
	}
	return time.Duration(*s * float64(time.Second)), nil
}

// newEpoch is a leader's random epoch: 16 hex digits.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// origin is a table's Origin: where it stands in a stream, EPOCH/GEN.
func origin(epoch string, gen uint64) string { return epoch + "/" + strconv.FormatUint(gen, 10) }

// position is where a follower's table stands: the epoch and generation
// of the stream it came from, the state's digest (version 3; zero: not
// known) and the follower's options it was built with ("": not known).
// Its Origin form is EPOCH/GEN[/DIGEST[/OPTIONS]].
type position struct {
	epoch   string
	gen     uint64
	digest  digest
	options string
}

func (p position) String() string {
	s := origin(p.epoch, p.gen)
	if p.digest == zeroDigest && p.options == "" {
		return s
	}
	if p.digest != zeroDigest {
		s += "/" + p.digest.String()
	} else {
		s += "/-"
	}
	if p.options != "" {
		s += "/" + p.options
	}
	return s
}

// parsePosition reads an Origin; ok is false for "" or another form (a
// table of another source: the follower asks for the whole state).
func parsePosition(s string) (p position, ok bool) {
	parts := strings.SplitN(s, "/", 4)
	if len(parts) < 2 || !validEpoch(parts[0]) {
		return position{}, false
	}
	n, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return position{}, false
	}
	p = position{epoch: parts[0], gen: n}
	if len(parts) > 2 && parts[2] != "-" {
		if p.digest, ok = parseDigest(parts[2]); !ok {
			return position{}, false
		}
	}
	if len(parts) > 3 {
		p.options = parts[3]
	}
	return p, true
}

// parseOrigin reads an Origin's epoch and generation.
func parseOrigin(s string) (epoch string, gen uint64, ok bool) {
	p, ok := parsePosition(s)
	return p.epoch, p.gen, ok
}

// validEpoch reports whether s could be an epoch: 1 to 64 hex digits.
func validEpoch(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// errorf is the package's error prefix.
func errorf(format string, a ...any) error { return fmt.Errorf("replica: "+format, a...) }
