package replica

import (
	"bufio"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// TestDigestIncremental (property): the digest a leader moves patch by
// patch (Patched, and Rebuilt's changed names) is always the digest of
// its table computed whole, and the digest of a table built from scratch
// of the same cluster: it names the content, not the way it was built.
func TestDigestIncremental(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		cfg := clustergen.Small()
		cfg.Pods = 30
		c := clustergen.Generate(seed, cfg)
		r := rand.New(rand.NewSource(seed))
		l := NewLeader("cluster.local.", "")
		l.Rebuilt(k8sdns.Build(model(c)))
		seen := map[digest]bool{l.cur.digest: true}
		for step := range 60 {
			c.Step(r)
			next := k8sdns.Build(model(c))
			if step%2 == 0 { // as the plugin's patches tell it
				keys, nss := next.Changed(l.cur.table)
				l.Patched(next, keys, nss, next.ChangedPods(l.cur.table)...)
			} else {
				l.Rebuilt(next)
			}
			if got, want := l.cur.digest, wholeDigest(k8sdns.Build(model(c))); got != want {
				t.Fatalf("seed %d step %d: digest %s moved, %s whole", seed, step, got, want)
			}
			seen[l.cur.digest] = true
		}
		if len(seen) < 50 {
			t.Errorf("seed %d: %d distinct digests over 61 states", seed, len(seen))
		}
		if d, ok := parseDigest(l.cur.digest.String()); !ok || d != l.cur.digest {
			t.Errorf("digest %s does not read back", l.cur.digest)
		}
	}
}

// TestResumeAnyReplica: a follower that moves to another replica (another
// epoch) whose current state, or a state still in its change log, is the
// follower's - recognised by its digest - receives only the names
// changed since, and its table is that replica's; a state the other
// replica never had (its changes came in other batches) gets the whole
// state, as does a table built with other options of the follower, and a
// version-2 request.
func TestResumeAnyReplica(t *testing.T) {
	c := clustergen.Generate(11, clustergen.Small())
	r := rand.New(rand.NewSource(11))
	a, b := NewLeader("cluster.local.", ""), NewLeader("cluster.local.", "")
	a.Rebuilt(k8sdns.Build(model(c)))
	b.Rebuilt(k8sdns.Build(model(c)))
	baseA, _ := serveLeader(t, a)
	baseB, _ := serveLeader(t, b)
	sink := &fakeSink{}
	follow := func(base string, l *Leader, opts ...func(*Source)) *follower {
		t.Helper()
		// delivered counts the sink's calls: a connect alone is not enough,
		// the table served may still be the previous follower's
		delivered := func() int64 { return sink.updates.Load() + sink.patches.Load() + sink.unchanged.Load() }
		before := delivered()
		// version 3: a version-4 follower resumes by buckets where this
		// test wants the whole state (bucket_test.go)
		opts = append([]func(*Source){func(s *Source) { s.version = 3 }}, opts...)
		f := startFollower(t, base, "", sink, opts...)
		kubefix.Eventually(t, func() string {
			if sink.tbl.Load() == nil || delivered() == before {
				return "nothing delivered yet"
			}
			if e, g, _ := parseOrigin(sink.tbl.Load().Origin()); e != l.Epoch() || g != l.Gen() || f.Stats.Connects.Load() == 0 {
				return fmt.Sprintf("the follower is at %s/%d, want %s/%d (errors %v)", e, g, l.Epoch(), l.Gen(), sink.errors())
			}
			return ""
		})
		f.stop()
		if g, w := sink.tbl.Load().Describe(), l.cur.table.Describe(); g != w {
			t.Fatalf("the follower's table differs from its leader's:\n%s\nwant:\n%s", g, w)
		}
		return f
	}
	follow(baseA, a)

	// the same content on B: nothing but the synced line
	f := follow(baseB, b)
	if f.Stats.Full.Load() != 0 || f.Stats.ChangeRecords.Load() != 0 || b.Stats.Moved.Load() != 1 {
		t.Errorf("moved to a replica with the same state: %d whole, %d change records, %d moved", f.Stats.Full.Load(), f.Stats.ChangeRecords.Load(), b.Stats.Moved.Load())
	}
	if f.Stats.Bytes.Load() > 300 {
		t.Errorf("moved to a replica with the same state: %d bytes", f.Stats.Bytes.Load())
	}

	// A takes three steps one by one, B the same as one: the follower's
	// state (B's) is one A had, three generations back
	var changed map[k8sdns.Key]bool
	changed = stepped(a, c, r, 3)
	b.Rebuilt(a.cur.table)
	f = follow(baseA, a)
	if f.Stats.Full.Load() != 0 || a.Stats.Moved.Load() != 1 || f.Stats.ChangeRecords.Load() != int64(len(changed)) {
		t.Errorf("moved back to A three steps on: %d whole, %d moved, %d change records, want 0, 1, %d", f.Stats.Full.Load(), a.Stats.Moved.Load(), f.Stats.ChangeRecords.Load(), len(changed))
	}
	whole := f.Stats.Bytes.Load()

	// A takes a step alone (the follower follows it); B takes it with the
	// next one: B never had the follower's state
	stepped(a, c, r, 1)
	follow(baseA, a)
	stepped(a, c, r, 1)
	b.Rebuilt(a.cur.table)
	f = follow(baseB, b)
	if f.Stats.Full.Load() != 1 || b.Stats.Moved.Load() != 1 {
		t.Errorf("moved to a replica that never had its state: %d whole, %d moved, want 1, 1", f.Stats.Full.Load(), b.Stats.Moved.Load())
	}
	t.Logf("%d names: moving resumed with %d bytes; a whole state %d bytes", b.cur.table.Names(), whole, f.Stats.Bytes.Load())

	// other options than its table was built with: the whole state, even
	// from the same replica and generation (a table of an origin without
	// options, an older version's, is taken for the follower's)
	f = follow(baseB, b, func(s *Source) { s.Options = "pods=false" })
	if f.Stats.Full.Load() != 0 {
		t.Errorf("options named for the first time: %d whole states, want 0", f.Stats.Full.Load())
	}
	f = follow(baseB, b, func(s *Source) { s.Options = "pods=true" })
	if f.Stats.Full.Load() != 1 {
		t.Errorf("options changed: %d whole states, want 1", f.Stats.Full.Load())
	}
	if !strings.HasSuffix(sink.tbl.Load().Origin(), "/pods=true") {
		t.Errorf("origin %q does not name the options", sink.tbl.Load().Origin())
	}
	f = follow(baseB, b, func(s *Source) { s.Options = "pods=true" })
	if f.Stats.Full.Load() != 0 {
		t.Errorf("the same options: %d whole states, want 0", f.Stats.Full.Load())
	}

	// a version-2 request with the digest: not read, the whole state;
	// version 3 (and 4): the changes since (none) from B's latest generation
	p, _ := parsePosition(sink.tbl.Load().Origin())
	for _, tc := range []struct{ v, want string }{{"2", `"full":true`}, {"3", fmt.Sprintf(`"full":false,"v":3,"from":%d}`, b.Gen())}} {
		q := url.Values{"v": {tc.v}, "epoch": {a.Epoch()}, "gen": {"1"}, "digest": {p.digest.String()}}
		resp, err := http.Get(baseB + Path + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		head, _ := bufio.NewReader(resp.Body).ReadString('\n')
		resp.Body.Close()
		if !strings.Contains(head, tc.want) {
			t.Errorf("v=%s with another epoch and the digest: header %q, want %s", tc.v, head, tc.want)
		}
	}
}

// TestPositionOrigin: origins of every form read back; an older
// version's EPOCH/GEN still reads.
func TestPositionOrigin(t *testing.T) {
	for _, p := range []position{
		{epoch: "3f9c", gen: 41},
		{epoch: "3f9c", gen: 41, digest: digest{1, 2}},
		{epoch: "3f9c", gen: 41, options: "pods=true,noendpoints=false"},
		{epoch: "3f9c", gen: 41, digest: digest{^uint64(0), 7}, options: "x"},
	} {
		got, ok := parsePosition(p.String())
		if !ok || got != p {
			t.Errorf("%q read back as %+v (%v)", p.String(), got, ok)
		}
	}
	for _, bad := range []string{"", "3f9c", "3f9c/x", "zz/1", "3f9c/1/nothex"} {
		if _, ok := parsePosition(bad); ok {
			t.Errorf("%q read as a position", bad)
		}
	}
}

// TestProvisional: a leader whose table is its snapshot's turns followers
// away (503, Retry-After 1) until its source answers, or FirstSync at
// most; a reload carries that.
func TestProvisional(t *testing.T) {
	l := NewLeader("cluster.local.", "")
	l.FirstSync = 300 * time.Millisecond
	l.Provisional()
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	base, _ := serveLeader(t, l)
	get := func() *http.Response {
		t.Helper()
		resp, err := http.Get(base + Path + "?v=3")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get(); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("a snapshot's table: %s, Retry-After %q; want 503, 1", r.Status, r.Header.Get("Retry-After"))
	}
	next := NewLeader("cluster.local.", "")
	next.FirstSync = l.FirstSync
	next.TakeOver(l.HandOver())
	if next.serving() {
		t.Error("the reloaded leader serves a snapshot's table before FirstSync")
	}
	l.Sourced()
	if r := get(); r.StatusCode != http.StatusOK {
		t.Fatalf("after the source's result: %s", r.Status)
	}
	time.Sleep(300 * time.Millisecond)
	if !next.serving() {
		t.Error("FirstSync passed: the snapshot's table is served")
	}
}
