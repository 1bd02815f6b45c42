package replica

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// nextTable steps c until its table differs from cur's and returns it with
// the names that changed.
func nextTable(t *testing.T, c *clustergen.Cluster, r *rand.Rand, cur *k8sdns.Table) (*k8sdns.Table, []k8sdns.Key, bool) {
	t.Helper()
	for range 100 {
		c.Step(r)
		next := k8sdns.Build(model(c))
		if keys, nss := next.Changed(cur); len(keys) > 0 {
			return next, keys, nss
		}
	}
	t.Fatal("100 steps changed no name")
	return nil, nil, false
}

// syncedLine opens a stream of version v asking for the changes since
// generation gen of l's epoch and returns its first synced line.
func syncedLine(t *testing.T, base string, l *Leader, v int, gen uint64) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s%s?v=%d&epoch=%s&gen=%d", base, Path, v, l.Epoch(), gen))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := readLine(br)
		if err != nil {
			t.Fatalf("no synced line at version %d: %v", v, err)
		}
		if bytes.Contains(line, []byte(`"synced":true`)) {
			return string(line)
		}
	}
}

// TestProgrammedCarriedToFollower: the trigger times a leader's patch
// brought reach the follower with the change batch (microseconds), each
// once, and a patch without them brings none; a stream of version 1 or
// 2 gets synced lines without the field, one of version 3 with it.
func TestProgrammedCarriedToFollower(t *testing.T) {
	c := clustergen.Generate(7, clustergen.Small())
	r := rand.New(rand.NewSource(7))
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(model(c)))
	base, _ := serveLeader(t, l)
	sink := &fakeSink{}
	f := startFollower(t, base, "", sink)
	defer f.stop()
	waitGen(t, sink, 1)

	at1 := time.Now().Add(-3 * time.Second).Truncate(time.Microsecond)
	at2 := time.Now().Add(-40 * time.Millisecond).Truncate(time.Microsecond)
	want := []feed.Trigger{{Kind: feed.KindClusterIP, At: at1}, {Kind: feed.KindHeadlessWithSelector, At: at2}, {Kind: feed.KindClusterIP, At: at2}}
	next, keys, nss := nextTable(t, c, r, l.cur.table)
	l.PatchedProgrammed(next, keys, nss, want, next.ChangedPods(l.cur.table)...)
	waitGen(t, sink, 2)
	next, keys, nss = nextTable(t, c, r, l.cur.table)
	l.Patched(next, keys, nss, next.ChangedPods(l.cur.table)...) // no trigger times
	waitGen(t, sink, 3)

	got := sink.triggers()
	byKind := func(a, b feed.Trigger) int { return strings.Compare(a.Kind, b.Kind)*2 + a.At.Compare(b.At) }
	slices.SortFunc(got, byKind)
	slices.SortFunc(want, byKind)
	if len(got) != len(want) {
		t.Fatalf("the follower's patches carried %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || !got[i].At.Equal(want[i].At) {
			t.Fatalf("the follower's patches carried %v, want %v", got, want)
		}
	}

	for v := 1; v <= Version; v++ {
		line := syncedLine(t, base, l, v, 1)
		if has := strings.Contains(line, `"programmed"`); has != (v >= 3) {
			t.Errorf("version %d: synced line %s", v, line)
		}
	}
	if line := syncedLine(t, base, l, Version, 2); strings.Contains(line, `"programmed"`) {
		t.Errorf("the changes since generation 2 brought no trigger time: %s", line)
	}
}

// TestProgrammedFromStream: a follower reads the synced line's
// "programmed" of the kinds it knows (a newer leader's others ignored);
// a synced line without it (an older leader) applies with none; a bad
// time is an error that keeps the last good table.
func TestProgrammedFromStream(t *testing.T) {
	epoch := newEpoch()
	rec := func(ip string) string {
		return `{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["` + ip + `"]}}` + "\n"
	}
	us := time.Now().Add(-time.Second).UnixMicro()
	script := append(smallState(epoch, 3, "10.96.0.3"),
		rec("10.96.0.4"),
		fmt.Sprintf(`{"gen":4,"synced":true,"programmed":{"zz_kind":[5],"headless_without_selector":[%d,%d]}}`+"\n", us, us+1),
		rec("10.96.0.5"),
		`{"gen":5,"synced":true}`+"\n",
		rec("10.96.0.6"),
		`{"gen":6,"synced":true,"programmed":{"cluster_ip":[-1]}}`+"\n",
		"WAIT")
	base, _ := serveLeader(t, &rawStream{scripts: [][]string{script, {"WAIT"}}})
	sink := &fakeSink{}
	f := startFollower(t, base, "", sink)
	defer f.stop()
	kubefix.Eventually(t, func() string {
		if len(sink.errors()) == 0 {
			return fmt.Sprintf("no error yet, at %q", clusterIP(sink.tbl.Load()))
		}
		return ""
	})
	if ip := clusterIP(sink.tbl.Load()); ip != "10.96.0.5" || sink.patches.Load() != 2 {
		t.Fatalf("at %s after %d patches; want 10.96.0.5 after 2", ip, sink.patches.Load())
	}
	got := sink.triggers()
	if len(got) != 2 || got[0].Kind != feed.KindHeadlessWithoutSelector || got[0].At.UnixMicro() != us || got[1].At.UnixMicro() != us+1 {
		t.Errorf("triggers %v", got)
	}
	if err := sink.errors()[0]; !strings.Contains(err.Error(), "bad programmed time -1") {
		t.Errorf("error %v", err)
	}
}

// TestProgrammedBucketResume (version 4): a follower that moves to a
// leader which never had its state resumes by buckets and observes no
// trigger time from it (the leader's log holds some: they date changes
// of a history the follower did not follow); the change batches that
// follow on the same stream carry theirs.
func TestProgrammedBucketResume(t *testing.T) {
	ca, cb := bucketCluster(31), bucketCluster(31)
	a, b := NewLeader("cluster.local.", ""), NewLeader("cluster.local.", "")
	a.Rebuilt(k8sdns.Build(model(ca)))
	b.Rebuilt(k8sdns.Build(model(cb)))
	baseA, _ := serveLeader(t, a)
	baseB, _ := serveLeader(t, b)
	stepped(a, ca, rand.New(rand.NewSource(31)), 2)
	at := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	rb := rand.New(rand.NewSource(32))
	for range 2 {
		next, keys, nss := nextTable(t, cb, rb, b.cur.table)
		b.PatchedProgrammed(next, keys, nss, []feed.Trigger{{Kind: feed.KindClusterIP, At: at}}, next.ChangedPods(b.cur.table)...)
	}
	sink := &fakeSink{}
	followTo(t, baseA, a, sink)
	f := startFollower(t, baseB, "", sink)
	waitAt(t, sink, b)
	if f.Stats.Bucketed.Load() != 1 || f.Stats.Full.Load() != 0 {
		t.Fatalf("%d bucket resumes, %d whole states, want 1, 0", f.Stats.Bucketed.Load(), f.Stats.Full.Load())
	}
	if got := sink.triggers(); len(got) != 0 {
		t.Fatalf("the bucket resume carried trigger times %v", got)
	}
	next, keys, nss := nextTable(t, cb, rb, b.cur.table)
	b.PatchedProgrammed(next, keys, nss, []feed.Trigger{{Kind: feed.KindHeadlessWithSelector, At: at}}, next.ChangedPods(b.cur.table)...)
	waitAt(t, sink, b)
	if got := sink.triggers(); len(got) != 1 || got[0].Kind != feed.KindHeadlessWithSelector || !got[0].At.Equal(at) {
		t.Fatalf("the change batch after the bucket resume carried %v, want one headless_with_selector at %v", got, at)
	}
}

// waitAt waits until the sink serves l's latest generation.
func waitAt(t *testing.T, sink *fakeSink, l *Leader) {
	t.Helper()
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
}
