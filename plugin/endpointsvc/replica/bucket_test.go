package replica

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// encoding is a table's whole encoding: two tables with the same are the
// same content.
func encoding(t *k8sdns.Table) []byte { return encodeWhole(&state{table: t}).b }

// bucketCluster is a generated cluster large enough that a few names
// differing touch a few of the 256 buckets.
func bucketCluster(seed int64) *clustergen.Cluster {
	cfg := clustergen.Small()
	cfg.Namespaces, cfg.Services, cfg.Pods = 20, 1000, 200
	return clustergen.Generate(seed, cfg)
}

// followTo runs a follower of base into sink until its table is l's
// latest generation, then stops it.
func followTo(t *testing.T, base string, l *Leader, sink *fakeSink, opts ...func(*Source)) *follower {
	t.Helper()
	f := startFollower(t, base, "", sink, opts...)
	kubefix.Eventually(t, func() string {
		tbl := sink.tbl.Load()
		if tbl == nil {
			return "no table yet"
		}
		if e, g, _ := parseOrigin(tbl.Origin()); e != l.Epoch() || g != l.Gen() {
			return fmt.Sprintf("the follower is at %s/%d, want %s/%d (errors %v)", e, g, l.Epoch(), l.Gen(), sink.errors())
		}
		return ""
	})
	f.stop()
	return f
}

// TestBucketResume (property, seeded): two leaders start from the same
// generated cluster and take different change sequences - the same
// changes in other batches (they converge: the follower's state is one
// the second never had), or changes of their own (they differ); a
// follower that holds the first's state and moves to the second receives
// only the buckets whose digests differ, far less than a whole state, and
// its table's encoding is then exactly the second's.
func TestBucketResume(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		converge := seed%2 == 0
		t.Run(fmt.Sprintf("seed=%d,converge=%v", seed, converge), func(t *testing.T) {
			ca, cb := bucketCluster(seed), bucketCluster(seed)
			a, b := NewLeader("cluster.local.", ""), NewLeader("cluster.local.", "")
			a.Rebuilt(k8sdns.Build(model(ca)))
			b.Rebuilt(k8sdns.Build(model(cb)))
			baseA, _ := serveLeader(t, a)
			baseB, _ := serveLeader(t, b)
			ra := rand.New(rand.NewSource(seed * 100))
			stepped(a, ca, ra, 1+int(seed%3))
			sink := &fakeSink{}
			followTo(t, baseA, a, sink)
			held := sink.tbl.Load()

			if converge {
				// A goes on step by step; B takes A's steps, all of them
				// in one batch: the same final state, and never the
				// follower's
				rb := rand.New(rand.NewSource(seed * 100))
				common := rand.New(rand.NewSource(seed * 300))
				n := 1 + int(seed%3)
				for range n {
					cb.Step(rb)
				}
				stepped(a, ca, common, 2)
				common = rand.New(rand.NewSource(seed * 300))
				for range 2 {
					cb.Step(common)
				}
				b.Rebuilt(k8sdns.Build(model(cb)))
				if !bytes.Equal(encoding(a.cur.table), encoding(b.cur.table)) {
					t.Fatal("the leaders did not converge")
				}
			} else {
				stepped(b, cb, rand.New(rand.NewSource(seed*7)), 3)
			}
			keys, _ := b.cur.table.Changed(held)
			whole := len(encodeWhole(b.cur).b)

			f := followTo(t, baseB, b, sink)
			if got, want := encoding(sink.tbl.Load()), encoding(b.cur.table); !bytes.Equal(got, want) {
				t.Fatalf("the follower's table differs from B's after a bucket resume:\n%s\nwant:\n%s", got, want)
			}
			if f.Stats.Full.Load() != 0 || f.Stats.Bucketed.Load() != 1 || b.Stats.Bucketed.Load() != 1 {
				t.Errorf("%d whole states, %d bucket resumes (leader %d), want 0, 1, 1", f.Stats.Full.Load(), f.Stats.Bucketed.Load(), b.Stats.Bucketed.Load())
			}
			if got := f.Stats.Bytes.Load(); got > int64(whole/8) {
				t.Errorf("%d names differ: the bucket resume sent %d bytes, a whole state is %d", len(keys), got, whole)
			}
			t.Logf("%d of %d names differ: %d bytes received, a whole state %d", len(keys), b.cur.table.Names(), f.Stats.Bytes.Load(), whole)
		})
	}
}

// TestBucketResumeFallbacks: a version-3 follower, or a leader of
// version 3, or a follower whose options changed, gets the whole state
// where a version-4 pair resumes by buckets; so does a follower whose
// buckets differ in more than half the buckets.
func TestBucketResumeFallbacks(t *testing.T) {
	c := bucketCluster(21)
	a, b := NewLeader("cluster.local.", ""), NewLeader("cluster.local.", "")
	a.Rebuilt(k8sdns.Build(model(c)))
	baseA, _ := serveLeader(t, a)
	baseB, _ := serveLeader(t, b)
	stepped(a, c, rand.New(rand.NewSource(21)), 2)
	cb := bucketCluster(21)
	b.Rebuilt(k8sdns.Build(model(cb)))
	stepped(b, cb, rand.New(rand.NewSource(22)), 2)
	for _, tc := range []struct {
		name  string
		opts  []func(*Source)
		whole int64
	}{
		{"version 3", []func(*Source){func(s *Source) { s.version, s.Options = 3, "pods=false" }}, 1},
		{"options changed", []func(*Source){func(s *Source) { s.Options = "pods=true" }}, 1},
		{"version 4", []func(*Source){func(s *Source) { s.Options = "pods=false" }}, 0},
	} {
		sink := &fakeSink{}
		followTo(t, baseA, a, sink, func(s *Source) { s.Options = "pods=false" })
		f := followTo(t, baseB, b, sink, tc.opts...)
		if f.Stats.Full.Load() != tc.whole || f.Stats.Bucketed.Load() != 1-tc.whole {
			t.Errorf("%s: %d whole states, %d bucket resumes, want %d whole", tc.name, f.Stats.Full.Load(), f.Stats.Bucketed.Load(), tc.whole)
		}
		if !bytes.Equal(encoding(sink.tbl.Load()), encoding(b.cur.table)) {
			t.Errorf("%s: the follower's table is not B's", tc.name)
		}
	}

	// a state with most buckets different: the whole state
	other := NewLeader("cluster.local.", "")
	other.Rebuilt(k8sdns.Build(model(bucketCluster(99))))
	baseO, _ := serveLeader(t, other)
	sink := &fakeSink{}
	followTo(t, baseA, a, sink)
	if f := followTo(t, baseO, other, sink); f.Stats.Full.Load() != 1 || f.Stats.Bucketed.Load() != 0 {
		t.Errorf("another cluster: %d whole states, %d bucket resumes, want 1, 0", f.Stats.Full.Load(), f.Stats.Bucketed.Load())
	}
}

// tamperer serves a leader's stream, but drops the first record line of a
// bucket resume (its bucket is then partial: a name the follower holds
// would be taken for gone) or, when alter, changes a byte of it.
type tamperer struct {
	l     *Leader
	alter bool

	mu       sync.Mutex
	tampered int
}

func (tp *tamperer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// through the ResponseWriter: a stream that took its connection over
	// would bypass the tampering
	r = r.WithContext(context.WithValue(r.Context(), baseKey{}, nil))
	tp.l.ServeHTTP(&tamperWriter{ResponseWriter: w, tp: tp}, r)
}

type tamperWriter struct {
	http.ResponseWriter
	tp       *tamperer
	bucketed bool
	done     bool
}

func (w *tamperWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *tamperWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"buckets":[`)) {
		w.bucketed = true
	}
	i := bytes.Index(b, []byte(recordPrefix))
	if !w.bucketed || w.done || i < 0 {
		return w.ResponseWriter.Write(b)
	}
	w.done = true
	w.tp.mu.Lock()
	w.tp.tampered++
	w.tp.mu.Unlock()
	end := i + bytes.IndexByte(b[i:], '\n') + 1
	out := slices.Clone(b)
	if w.tp.alter {
		j := i + bytes.IndexAny(b[i:end], "0123456789")
		out[j] = '0' + (out[j]-'0'+1)%10
	} else {
		out = append(out[:i:i], b[end:]...)
	}
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// TestBucketTampered (hostile): a leader whose bucket resume is wrong - a
// record of a sent bucket missing, or altered - is refused before
// anything is applied (the result's digest is not the synced line's); the
// follower asks again without its position, receives the whole state, and
// never serves a table that is neither the one it held nor the leader's.
func TestBucketTampered(t *testing.T) {
	for _, alter := range []bool{false, true} {
		t.Run(fmt.Sprintf("alter=%v", alter), func(t *testing.T) {
			c := bucketCluster(31)
			a, b := NewLeader("cluster.local.", ""), NewLeader("cluster.local.", "")
			c2 := bucketCluster(31)
			a.Rebuilt(k8sdns.Build(model(c)))
			b.Rebuilt(k8sdns.Build(model(c2)))
			baseA, _ := serveLeader(t, a)
			stepped(a, c, rand.New(rand.NewSource(31)), 1)
			stepped(b, c2, rand.New(rand.NewSource(32)), 3)
			tp := &tamperer{l: b, alter: alter}
			baseB, _ := serveLeader(t, tp)

			sink := &fakeSink{}
			followTo(t, baseA, a, sink)
			held := encoding(sink.tbl.Load())
			updates, patches := sink.updates.Load(), sink.patches.Load()
			var seen [][]byte
			watch := func() {
				if tbl := sink.tbl.Load(); tbl != nil {
					seen = append(seen, encoding(tbl))
				}
			}
			f := startFollower(t, baseB, "", sink)
			kubefix.Eventually(t, func() string {
				watch()
				if e, g, _ := parseOrigin(sink.tbl.Load().Origin()); e != b.Epoch() || g != b.Gen() {
					return fmt.Sprintf("the follower is at %s/%d, want B's %s/%d", e, g, b.Epoch(), b.Gen())
				}
				return ""
			})
			f.stop()
			want := encoding(b.cur.table)
			for _, s := range seen {
				if !bytes.Equal(s, held) && !bytes.Equal(s, want) {
					t.Fatal("the follower served a table that is neither its own nor the leader's")
				}
			}
			if !bytes.Equal(encoding(sink.tbl.Load()), want) {
				t.Fatal("the follower's table is not B's")
			}
			if tp.tampered != 1 || f.Stats.Refused.Load() != 1 || f.Stats.Full.Load() != 1 {
				t.Errorf("%d tampered, %d refused, %d whole states, want 1, 1, 1", tp.tampered, f.Stats.Refused.Load(), f.Stats.Full.Load())
			}
			if sink.patches.Load() != patches || sink.updates.Load() != updates+1 {
				t.Errorf("%d patches and %d updates applied, want none and the whole state", sink.patches.Load()-patches, sink.updates.Load()-updates)
			}
		})
	}
}
