package replica

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// withUnknown adds a field this version does not know to a line's object
// (before its closing brace), as a newer leader would.
func withUnknown(line string) string {
	l := strings.TrimSuffix(line, "\n")
	return l[:len(l)-1] + `,"zz_future":{"x":[1,2]}}` + "\n"
}

// TestUnknownFieldsIgnored: a follower fed the stream a newer leader
// writes - every line with a field it does not know, records with unknown
// fields in their Service and slices too, and lines of a kind it does not
// know - applies it as the same stream without them.
func TestUnknownFieldsIgnored(t *testing.T) {
	epoch := newEpoch()
	rec := `{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["10.96.0.7"],"zz_svc":true},` +
		`"slices":[{"namespace":"shop","name":"web-1","service":"web","type":"IPv4","addresses":[["10.244.0.5"]],"conditions":["yyn"],"zz_slice":"new"}]}` + "\n"
	script := []string{
		withUnknown(string(appendHeader(nil, epoch, 3, true, 3, 0, 0))),
		withUnknown(`{"namespaces":["shop"]}` + "\n"),
		`{"zz_new_kind":{"a":1}}` + "\n",
		withUnknown(rec),
		withUnknown(`{"pods":{"10.244.0.5":["shop"]}}` + "\n"),
		withUnknown(string(appendSynced(nil, 3, 3, digest{1, 2}, nil))),
		withUnknown(string(appendHeartbeat(nil, 3, 2, 0))),
		"WAIT",
	}
	base, _ := serveLeader(t, &rawStream{scripts: [][]string{script}})
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	kubefix.Eventually(t, func() string {
		if sink.unchanged.Load() < 1 {
			return "the heartbeat was not applied"
		}
		return ""
	})
	if errs := sink.errors(); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	tbl := sink.tbl.Load()
	if ip := clusterIP(tbl); ip != "10.96.0.7" || sink.updates.Load() != 1 {
		t.Fatalf("cluster IP %q after %d updates", ip, sink.updates.Load())
	}
	c := tbl.Name(k8sdns.Key{Namespace: "shop", Name: "web"})
	if len(c.Slices) != 1 || c.Slices[0].Name != "web-1" {
		t.Errorf("slices %+v", c.Slices)
	}
}

// v1Control is version 1's control line, as a meshdns of that version
// decodes it: unknown fields refused.
type v1Control struct {
	Epoch      *string              `json:"epoch"`
	Gen        *uint64              `json:"gen"`
	Full       *bool                `json:"full"`
	Synced     bool                 `json:"synced"`
	Namespaces *[]string            `json:"namespaces"`
	Pods       *map[string][]string `json:"pods"`
}

// strictV1 checks each line of a stream as a version-1 follower reads it
// and counts the synced lines and heartbeats.
func strictV1(t *testing.T, body io.Reader, synced, beats *atomic.Int64) {
	br := bufio.NewReader(body)
	for {
		line, err := readLine(br)
		if err != nil {
			return
		}
		if bytes.HasPrefix(line, []byte(recordPrefix)) {
			if _, err := k8sdns.DecodeChange(line); err != nil { // strict
				t.Errorf("a version-1 follower refuses %s: %v", line, err)
			}
			continue
		}
		d := json.NewDecoder(bytes.NewReader(line))
		d.DisallowUnknownFields()
		var c v1Control
		if err := d.Decode(&c); err != nil {
			t.Errorf("a version-1 follower refuses %s: %v", line, err)
			continue
		}
		if _, err := d.Token(); !errors.Is(err, io.EOF) {
			t.Errorf("trailing data: %s", line)
		}
		switch {
		case c.Synced:
			synced.Add(1)
		case c.Gen != nil && c.Epoch == nil:
			beats.Add(1)
		}
	}
}

// TestVersionNegotiation: the leader answers each follower with the older
// of the two versions. A request without v (a version-1 follower: a
// leader upgraded first) gets exactly version 1's lines, even from a
// stale leader; a newer follower's request (v=4) is answered with
// Version; and a follower of this version reads a version-1 leader's
// stream (a follower upgraded first).
func TestVersionNegotiation(t *testing.T) {
	c := clustergen.Generate(6, clustergen.Small())
	l := NewLeader("cluster.local.", "")
	l.Idle = 30 * time.Millisecond
	var stale atomic.Int64
	l.Age = func() time.Duration { return time.Duration(stale.Load()) }
	l.Rebuilt(k8sdns.Build(model(c)))
	base, _ := serveLeader(t, l)

	// leader first: a version-1 follower
	resp, err := http.Get(base + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var synced, beats atomic.Int64
	done := make(chan struct{})
	go func() { defer close(done); strictV1(t, resp.Body, &synced, &beats) }()
	stale.Store(int64(40 * time.Second))
	l.Stale()
	stepped(l, c, rand.New(rand.NewSource(6)), 3)
	kubefix.Eventually(t, func() string {
		if synced.Load() < 2 || beats.Load() < 2 { // the changes may come as one batch
			return fmt.Sprintf("the version-1 stream carried %d states and %d heartbeats, want 2 and 2", synced.Load(), beats.Load())
		}
		return ""
	})
	resp.Body.Close()
	<-done

	// a follower newer than this leader
	for _, tc := range []struct{ ask, want string }{{"5", `"v":4`}, {"4", `"v":4`}, {"3", `"v":3`}, {"2", `"v":2`}, {"1", `"full":true}`}} {
		resp, err := http.Get(base + Path + "?v=" + tc.ask)
		if err != nil {
			t.Fatal(err)
		}
		head, _ := bufio.NewReader(resp.Body).ReadString('\n')
		resp.Body.Close()
		if !strings.Contains(head, tc.want) {
			t.Errorf("v=%s: header %q, want %s", tc.ask, head, tc.want)
		}
	}

	// follower first: a version-1 leader's stream (no v, no age)
	epoch := newEpoch()
	old := &rawStream{scripts: [][]string{append(smallState(epoch, 1, "10.96.0.1"), `{"gen":1}`+"\n", "WAIT")}}
	obase, _ := serveLeader(t, old)
	sink := &fakeSink{}
	startFollower(t, obase, "", sink)
	kubefix.Eventually(t, func() string {
		if sink.unchanged.Load() < 1 || clusterIP(sink.tbl.Load()) != "10.96.0.1" {
			return "the version-1 stream was not applied"
		}
		return ""
	})
	if errs := sink.errors(); len(errs) > 0 || sink.lastAge() != 0 {
		t.Errorf("errors %v, age %v", errs, sink.lastAge())
	}
}

// TestStaleness: the leader's staleness travels with version 2: a stale
// leader's header and heartbeats carry its age, which the follower hands
// the sink before each result (a heartbeat of a stale leader does not make
// the table current), and the leader's recovery reaches the follower at
// once (Stale), not at the next heartbeat.
func TestStaleness(t *testing.T) {
	l := NewLeader("cluster.local.", "")
	l.Idle = time.Hour // no heartbeat but the ones Stale sends
	var stale atomic.Int64
	stale.Store(int64(90 * time.Second))
	l.Age = func() time.Duration { return time.Duration(stale.Load()) }
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	base, _ := serveLeader(t, l)
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	waitGen(t, sink, 1)
	if age := sink.lastAge(); age != 90*time.Second {
		t.Fatalf("the whole state of a leader 90 s behind came with age %v", age)
	}
	stale.Store(int64(95 * time.Second))
	l.Stale()
	kubefix.Eventually(t, func() string {
		if sink.lastAge() != 95*time.Second || sink.unchanged.Load() < 1 {
			return "no heartbeat with the new age"
		}
		return ""
	})
	stale.Store(0)
	l.Stale()
	kubefix.Eventually(t, func() string {
		if sink.lastAge() != 0 || sink.unchanged.Load() < 2 {
			return "the leader's recovery did not reach the follower"
		}
		return ""
	})
}
