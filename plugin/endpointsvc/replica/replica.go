// Package replica is endpointsvc's replication stream: a cluster-DNS
// replica (the leader, `replicate ADDR`) offers the Kubernetes DNS model
// its table is built from over HTTP, and a node-local meshdns (the
// follower, `source replica URL`) keeps its own table from it, so that a
// thousand nodes cost the API server no watch at all.
//
// The stream is one long HTTP response, GET /v1/replicate?epoch=E&gen=G,
// of newline-delimited JSON objects; each line's first key says what it
// is:
//
//	{"epoch":"3f9c…","gen":41,"full":true}     a state begins: the whole state (full), or the changes since G
//	{"namespaces":["default","shop"]}          the namespaces that exist (a whole state; a change when they changed)
//	{"pods":{"10.244.1.5":["shop"],…}}         pods verified: addresses with their Pods' namespaces, 4,096 a line at most (a whole state: every one; a change: those changed, [] gone)
//	{"namespace":"shop","name":"web",…}        one name's whole content: k8sdns's record (Service and slices), or gone
//	{"gen":41,"synced":true}                   the state up to here is generation 41: apply it
//	{"gen":41}                                 a heartbeat, every 10 s while nothing changed
//
// After the first state every table change of the leader follows as its
// records and a synced line. A follower that asks with the leader's epoch
// and a generation still in the leader's change log gets only the names
// changed since (each once, as it is now); any other gets the whole state.
// The follower applies a whole state as a whole table, and the changes as
// a patch, only once their synced line came: a state half received is
// never served.
package replica

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Protocol settings.
const (
	// Path is the stream's HTTP route.
	Path = "/v1/replicate"
	// ContentType is the stream's media type.
	ContentType = "application/x-ndjson"
	// Heartbeat is how often an idle stream says it is alive.
	Heartbeat = 10 * time.Second
	// Silence is how long a follower waits for a line before it takes the
	// stream for broken (three heartbeats).
	Silence = 30 * time.Second
	// Backoff is the follower's fixed wait before it connects again.
	Backoff = time.Second
	// maxLine bounds one line (a Service with thousands of endpoints is
	// a few hundred kilobytes).
	maxLine = 16 << 20
)

// The control lines. A record line is k8sdns's (AppendChange).
type header struct {
	Epoch string `json:"epoch"`
	Gen   uint64 `json:"gen"`
	Full  bool   `json:"full"`
}

// control is any line but a record, as the follower reads it.
type control struct {
	Epoch      *string              `json:"epoch"`
	Gen        *uint64              `json:"gen"`
	Full       *bool                `json:"full"`
	Synced     bool                 `json:"synced"`
	Namespaces *[]string            `json:"namespaces"`
	Pods       *map[string][]string `json:"pods"`
}

// recordPrefix starts every record line.
const recordPrefix = `{"namespace":`

func appendHeader(b []byte, epoch string, gen uint64, full bool) []byte {
	b = append(b, `{"epoch":"`...)
	b = append(b, epoch...) // hex: no escaping
	b = append(b, `","gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, `,"full":`...)
	b = strconv.AppendBool(b, full)
	return append(b, "}\n"...)
}

func appendSynced(b []byte, gen uint64) []byte {
	b = append(b, `{"gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	return append(b, ",\"synced\":true}\n"...)
}

func appendHeartbeat(b []byte, gen uint64) []byte {
	b = append(b, `{"gen":`...)
	b = strconv.AppendUint(b, gen, 10)
	return append(b, "}\n"...)
}

// newEpoch is a leader's random epoch: 16 hex digits.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// origin is a table's Origin: where it stands in a stream.
func origin(epoch string, gen uint64) string { return epoch + "/" + strconv.FormatUint(gen, 10) }

// parseOrigin reads an Origin; ok is false for "" or another form (a
// table of another source: the follower asks for the whole state).
func parseOrigin(s string) (epoch string, gen uint64, ok bool) {
	e, g, found := strings.Cut(s, "/")
	if !found || !validEpoch(e) {
		return "", 0, false
	}
	n, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return e, n, true
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
