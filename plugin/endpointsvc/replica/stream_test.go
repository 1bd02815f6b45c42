package replica

import (
	"bytes"
	"fmt"
	"math/rand"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// TestFollowerAnswersAsLeader (property): for generated clusters and
// random steps, each published by the leader as a whole rebuilt table,
// the follower's table - fed through the real handler on loopback -
// answers every generated question as the leader's and holds the same
// content; only the first state is whole, every step a batch of the names
// it changed.
func TestFollowerAnswersAsLeader(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := clustergen.Small()
			if seed == 4 { // with Pods: the pod index of pods verified travels too
				cfg.Pods = 40
			}
			if seed == 3 { // with external IPs (k8s_external): they travel too
				cfg.External = true
			}
			c := clustergen.Generate(seed, cfg)
			r := rand.New(rand.NewSource(seed))
			l := NewLeader("cluster.local.", "")
			l.Rebuilt(k8sdns.Build(model(c)))
			base, _ := serveLeader(t, l)
			sink := &fakeSink{}
			f := startFollower(t, base, "", sink)
			waitGen(t, sink, 1)
			first := f.Stats.FullRecords.Load()
			if want := int64(l.cur.table.Names()); first != want {
				t.Errorf("the whole state had %d records, want one per name: %d", first, want)
			}
			for step := range 40 {
				for range 1 + r.Intn(3) {
					c.Step(r)
				}
				want := k8sdns.Build(model(c))
				l.Rebuilt(want)
				waitGen(t, sink, l.Gen())
				got := sink.tbl.Load()
				if g, w := got.Describe(), want.Describe(); g != w {
					t.Fatalf("step %d: the follower's table differs:\n%s\nwant:\n%s", step, g, w)
				}
				qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(int64(step))))
				ga, wa := answers(got, qs), answers(want, qs)
				for i := range qs {
					if ga[i] != wa[i] {
						t.Fatalf("step %d: %s: follower %s, leader %s", step, qs[i], ga[i], wa[i])
					}
				}
			}
			if n := f.Stats.Full.Load(); n != 1 {
				t.Errorf("%d whole states, want 1", n)
			}
			if f.Stats.FullRecords.Load() != first {
				t.Errorf("records of whole states after the first")
			}
			t.Logf("%d names: first state %d records; 40 steps: %d change records, %d bytes in all",
				l.cur.table.Names(), first, f.Stats.ChangeRecords.Load(), f.Stats.Bytes.Load())
		})
	}
}

// stepped makes n random steps of c and publishes each as the leader's
// table; it returns the names the steps changed, as the log has them.
func stepped(l *Leader, c *clustergen.Cluster, r *rand.Rand, n int) map[k8sdns.Key]bool {
	changed := map[k8sdns.Key]bool{}
	for range n {
		c.Step(r)
		next := k8sdns.Build(model(c))
		keys, _ := next.Changed(l.cur.table)
		for _, k := range keys {
			changed[k] = true
		}
		l.Rebuilt(next)
	}
	return changed
}

// TestResume: a follower that comes back (a new stream, its table kept,
// as after a restart from its snapshot) with the leader's epoch and a
// generation in the log receives only the names changed since, each
// once; of another epoch (another replica, a restarted leader) or from
// outside the log it receives the whole state.
func TestResume(t *testing.T) {
	c := clustergen.Generate(7, clustergen.Small())
	r := rand.New(rand.NewSource(7))
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(model(c)))
	base, _ := serveLeader(t, l)
	sink := &fakeSink{}
	f := startFollower(t, base, "", sink)
	waitGen(t, sink, 1)
	f.stop()

	changed := stepped(l, c, r, 5)
	f = startFollower(t, base, "", sink)
	waitGen(t, sink, l.Gen())
	f.stop()
	if f.Stats.Full.Load() != 0 || f.Stats.FullRecords.Load() != 0 || l.Stats.Resumed.Load() != 1 {
		t.Errorf("resumed within the log: %d whole states (%d records), %d resumed", f.Stats.Full.Load(), f.Stats.FullRecords.Load(), l.Stats.Resumed.Load())
	}
	if got := f.Stats.ChangeRecords.Load(); got != int64(len(changed)) {
		t.Errorf("%d change records, want one per changed name: %d", got, len(changed))
	}
	if g, w := sink.tbl.Load().Describe(), l.cur.table.Describe(); g != w {
		t.Fatalf("after the resume the table differs:\n%s\nwant:\n%s", g, w)
	}

	// the same generation: nothing to send but the synced line
	f = startFollower(t, base, "", sink)
	kubefix.Eventually(t, func() string {
		if l.Stats.Resumed.Load() != 2 {
			return "no second resume"
		}
		return ""
	})
	f.stop()
	if f.Stats.ChangeRecords.Load() != 0 || f.Stats.Full.Load() != 0 {
		t.Errorf("resumed at the latest generation: %d records, %d whole", f.Stats.ChangeRecords.Load(), f.Stats.Full.Load())
	}

	// another leader (another epoch) with another table: the whole state
	// to version 3, the differing buckets to version 4 (with the same
	// table it resumes: TestResumeAnyReplica; buckets: bucket_test.go)
	c.Step(r)
	other := NewLeader("cluster.local.", "")
	other.Rebuilt(k8sdns.Build(model(c)))
	obase, _ := serveLeader(t, other)
	f = startFollower(t, obase, "", sink, func(s *Source) { s.version = 3 })
	waitGen(t, sink, 1)
	f.stop()
	if f.Stats.Full.Load() != 1 || other.Stats.Resumed.Load() != 0 {
		t.Errorf("another epoch: %d whole states, %d resumed", f.Stats.Full.Load(), other.Stats.Resumed.Load())
	}

	// back to the first leader, which logged more than it keeps since
	cur := l.cur.table
	for i := range maxLogEntries + 1 {
		l.Patched(cur, []k8sdns.Key{{Namespace: "churn", Name: fmt.Sprint(i)}}, false)
	}
	sink.tbl.Store(cur.Patched(&k8sdns.Patch{Origin: origin(l.Epoch(), 3)}))
	f = startFollower(t, base, "", sink)
	waitGen(t, sink, l.Gen())
	f.stop()
	if f.Stats.Full.Load() != 1 {
		t.Errorf("outside the log: %d whole states, want 1", f.Stats.Full.Load())
	}
}

// TestHalfStateNeverServed: a whole state or a batch of changes cut
// before its synced line is never applied; the last good table serves
// on, and the next stream brings the state whole.
func TestHalfStateNeverServed(t *testing.T) {
	epoch := newEpoch()
	good := smallState(epoch, 5, "10.96.0.5")
	raw := &rawStream{scripts: [][]string{
		good[:3],                   // cut before synced
		append(good[:3:3], "WAIT"), // stalls before synced
		append(append([]string{}, good...), `{"namespace":"shop","name":"web"}`+"\n", `{"namespace":"shop","na`), // a change, cut
		append(append([]string{}, good...), "WAIT"),
	}}
	base, _ := serveLeader(t, raw)
	sink := &fakeSink{}
	prev := k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"old"}})
	sink.tbl.Store(prev)
	startFollower(t, base, "", sink, timing(300*time.Millisecond, 20*time.Millisecond))
	kubefix.Eventually(t, func() string {
		if raw.connections() < 2 {
			return "no second stream"
		}
		return ""
	})
	if sink.tbl.Load() != prev || sink.updates.Load() != 0 {
		t.Fatal("a half-received whole state was served")
	}
	waitGen(t, sink, 5)
	kubefix.Eventually(t, func() string {
		if raw.connections() < 4 {
			return "no fourth stream"
		}
		return ""
	})
	if ip := clusterIP(sink.tbl.Load()); ip != "10.96.0.5" || sink.patches.Load() != 0 {
		t.Errorf("after a cut batch: cluster IP %q, %d patches", ip, sink.patches.Load())
	}
	errs := fmt.Sprint(sink.errors())
	for _, want := range []string{"the stream ended", "nothing received for 300ms", "unexpected EOF"} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors %s: none says %q", errs, want)
		}
	}
}

// TestHeartbeatAndSilence: an idle leader sends its heartbeat; a stream
// silent for longer than Silence is dropped and opened again after the
// fixed backoff, never faster, and the table stays.
func TestHeartbeatAndSilence(t *testing.T) {
	l := NewLeader("cluster.local.", "")
	l.Idle = 50 * time.Millisecond
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	base, _ := serveLeader(t, l)
	resp, err := http.Get(base + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got string
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(got, "{\"gen\":1}\n{\"gen\":1}\n") && time.Now().Before(deadline) {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += string(buf[:n])
	}
	want := string(appendHeader(nil, l.Epoch(), 1, true, 1, 0, 0)) + // a request without v: version 1
		"{\"namespaces\":[\"shop\"]}\n{\"gen\":1,\"synced\":true}\n{\"gen\":1}\n{\"gen\":1}\n"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("idle stream:\n%s\nwant:\n%s", got, want)
	}

	// the follower counts a heartbeat as a check that found nothing new
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	kubefix.Eventually(t, func() string {
		if sink.unchanged.Load() < 2 {
			return "no heartbeat seen"
		}
		return ""
	})

	// a silent stream: dropped after Silence, opened again after Backoff
	raw := &rawStream{scripts: [][]string{append(smallState(newEpoch(), 1, "10.96.0.1"), "WAIT")}}
	rbase, _ := serveLeader(t, raw)
	sink = &fakeSink{}
	f := startFollower(t, rbase, "", sink, timing(100*time.Millisecond, 100*time.Millisecond))
	time.Sleep(1100 * time.Millisecond)
	f.stop()
	// each round: up to 100 ms of silence, 100 ms of backoff
	if n := raw.connections(); n < 3 || n > 7 {
		t.Errorf("%d streams in 1.1 s with 100 ms of silence and 100 ms of backoff", n)
	}
	if clusterIP(sink.tbl.Load()) != "10.96.0.1" {
		t.Error("the table was lost")
	}
}

// TestNoBusyLoop: a leader that refuses connections is tried once per
// backoff (here at most 100 ms, at least half of it).
func TestNoBusyLoop(t *testing.T) {
	sink := &fakeSink{}
	f := startFollower(t, "http://"+closedPort(t), "", sink, timing(time.Second, 100*time.Millisecond))
	time.Sleep(550 * time.Millisecond)
	f.stop()
	if n := len(sink.errors()); n < 4 || n > 12 {
		t.Errorf("%d attempts in 550 ms with a backoff of 50-100 ms", n)
	}
}

// TestMalformedLines: a bad line, anywhere, ends the stream with an error
// naming the line; what came before it in the same state is dropped and
// the last good table keeps serving.
func TestMalformedLines(t *testing.T) {
	epoch := newEpoch()
	rec := func(ip string) string {
		return `{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["` + ip + `"]}}` + "\n"
	}
	for _, tc := range []struct {
		name  string
		lines []string // a last line without newline: the stream ends there
		want  string
	}{
		{"not JSON", []string{"hello\n"}, "line 5: invalid character"},
		{"bad age", []string{`{"gen":1,"age":-1}` + "\n"}, "line 5: replica: bad age -1"},
		{"unknown field in a bad record", []string{`{"namespace":"shop","name":"web","colour":1,"service":{"namespace":"shop","name":"other","kind":"ClusterIP"}}` + "\n"}, "record shop/web: Service shop/other"},
		{"trailing data", []string{`{"gen":1} {}` + "\n"}, "trailing data"},
		{"bad record", []string{`{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"Fancy"}}` + "\n", `{"gen":2,"synced":true}` + "\n"}, `unknown kind "Fancy"`},
		{"bad epoch", []string{`{"epoch":"ZZ","gen":2,"full":true}` + "\n"}, `bad epoch "ZZ"`},
		{"resume mid-stream", []string{`{"epoch":"` + epoch + `","gen":2,"full":false}` + "\n"}, "in the middle"},
		{"generation back", []string{rec("10.96.0.9"), `{"gen":0,"synced":true}` + "\n"}, "synced generation 0 after 1"},
		{"records, then a bad line", []string{rec("10.96.0.9"), "{}\n"}, "line 6: not a line of the stream"},
		{"heartbeat of another generation", []string{`{"gen":7}` + "\n"}, "heartbeat of generation 7 at 1"},
		{"heartbeat in a batch", []string{rec("10.96.0.9"), `{"gen":1}` + "\n"}, "heartbeat of generation 1"},
		{"header without full", []string{`{"epoch":"` + epoch + `","gen":2}` + "\n"}, "epoch, gen and full only"},
		{"namespaces and gen", []string{`{"namespaces":[],"gen":2}` + "\n"}, "namespaces only"},
		{"cut line", []string{`{"gen":2,"syn`}, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := append(smallState(epoch, 1, "10.96.0.1"), tc.lines...)
			if last := tc.lines[len(tc.lines)-1]; strings.HasSuffix(last, "\n") {
				script = append(script, "WAIT")
			}
			base, _ := serveLeader(t, &rawStream{scripts: [][]string{script}})
			sink := &fakeSink{}
			f := startFollower(t, base, "", sink, timing(5*time.Second, time.Hour)) // one stream
			kubefix.Eventually(t, func() string {
				if len(sink.errors()) == 0 {
					return "no error"
				}
				return ""
			})
			f.stop()
			if err := sink.errors()[0]; !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one with %q", err, tc.want)
			}
			if ip := clusterIP(sink.tbl.Load()); ip != "10.96.0.1" || sink.updates.Load() != 1 || sink.patches.Load() != 0 {
				t.Errorf("cluster IP %q after %d updates and %d patches: want the first state only", ip, sink.updates.Load(), sink.patches.Load())
			}
		})
	}
}

// TestToken: with a token file, a stream needs its bearer token; the
// follower sends its own, read per connection.
func TestToken(t *testing.T) {
	l := NewLeader("cluster.local.", writeToken(t, "s3cret"))
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	base, _ := serveLeader(t, l)
	for _, tc := range []struct {
		auth string
		code int
	}{{"", http.StatusUnauthorized}, {"Bearer nope", http.StatusUnauthorized}, {"Bearer s3cret2", http.StatusUnauthorized}, {"s3cret", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodGet, base+Path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, resp.StatusCode, tc.code)
		}
	}
	bad := &fakeSink{}
	f := startFollower(t, base, writeToken(t, "wrong"), bad)
	kubefix.Eventually(t, func() string {
		if len(bad.errors()) == 0 {
			return "no error with a wrong token"
		}
		return ""
	})
	f.stop()
	if err := bad.errors()[0].Error(); !strings.Contains(err, "401 Unauthorized") || bad.tbl.Load() != nil {
		t.Errorf("a wrong token: %s", err)
	}
	good := &fakeSink{}
	startFollower(t, base, writeToken(t, "s3cret"), good)
	waitGen(t, good, 1)

	gone := NewLeader("cluster.local.", t.TempDir()+"/missing")
	gone.Rebuilt(k8sdns.Build(&k8sdns.Cluster{}))
	gbase, _ := serveLeader(t, gone)
	resp, err := http.Get(gbase + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a leader without its token file answers %d, want 503", resp.StatusCode)
	}
}

// TestRequests: the handler's answers to what is not a stream request,
// and to one before the leader has a table.
func TestRequests(t *testing.T) {
	l := NewLeader("cluster.local.", "")
	base, _ := serveLeader(t, l)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/v1/other", http.StatusNotFound},
		{http.MethodPost, Path, http.StatusMethodNotAllowed},
		{http.MethodGet, Path + "?gen=x", http.StatusBadRequest},
		{http.MethodGet, Path, http.StatusServiceUnavailable},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
		}
	}
	// a follower waits for the leader's first table
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	kubefix.Eventually(t, func() string {
		if errs := sink.errors(); len(errs) == 0 || !strings.Contains(errs[0].Error(), "503") {
			return fmt.Sprintf("errors %v, want a 503", errs)
		}
		return ""
	})
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	waitGen(t, sink, 1)
}

// TestFanOutEncodesOnce: a change sent to many streams is encoded once.
func TestFanOutEncodesOnce(t *testing.T) {
	c := clustergen.Generate(4, clustergen.Small())
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(model(c)))
	base, _ := serveLeader(t, l)
	sinks := make([]*fakeSink, 20)
	for i := range sinks {
		sinks[i] = &fakeSink{}
		startFollower(t, base, "", sinks[i])
		waitGen(t, sinks[i], 1)
	}
	before := l.Stats.Encoded.Load()
	stepped(l, c, rand.New(rand.NewSource(4)), 1)
	for _, s := range sinks {
		waitGen(t, s, 2)
	}
	if n := l.Stats.Encoded.Load() - before; n != 1 {
		t.Errorf("one change to %d streams encoded %d times", len(sinks), n)
	}
}

// TestReloadCarry: a leader's state handed over a reload lets its
// followers resume on the next instance's leader with the changes only;
// the old leader takes no table after the hand-over, and a failed reload
// thaws it with what changed meanwhile.
func TestReloadCarry(t *testing.T) {
	c := clustergen.Generate(5, clustergen.Small())
	r := rand.New(rand.NewSource(5))
	old := NewLeader("cluster.local.", "")
	old.Rebuilt(k8sdns.Build(model(c)))
	stepped(old, c, r, 2)
	obase, osrv := serveLeader(t, old)
	sink := &fakeSink{}
	f := startFollower(t, obase, "", sink)
	waitGen(t, sink, 3)
	f.stop()

	carried := old.HandOver()
	next := k8sdns.Build(model(c))
	stepped(old, c, r, 1) // ignored: handed over
	if old.Gen() != 3 {
		t.Fatalf("a handed-over leader moved to generation %d", old.Gen())
	}
	osrv.Stop()

	nl := NewLeader("cluster.local.", "")
	nl.TakeOver(carried)
	nl.Rebuilt(next) // the carried table: nothing new
	nl.Rebuilt(k8sdns.Build(model(c)))
	if nl.Epoch() != old.Epoch() || nl.Gen() != 4 {
		t.Fatalf("the new leader: epoch %s gen %d, want %s 4", nl.Epoch(), nl.Gen(), old.Epoch())
	}
	nbase, _ := serveLeader(t, nl)
	f = startFollower(t, nbase, "", sink)
	waitGen(t, sink, 4)
	f.stop()
	if f.Stats.Full.Load() != 0 || nl.Stats.Resumed.Load() != 1 {
		t.Errorf("after the reload: %d whole states, %d resumed", f.Stats.Full.Load(), nl.Stats.Resumed.Load())
	}
	if g, w := sink.tbl.Load().Describe(), nl.cur.table.Describe(); g != w {
		t.Fatalf("after the reload the table differs:\n%s\nwant:\n%s", g, w)
	}

	// a failed reload: the old leader catches up with the table served
	old.Thaw(k8sdns.Build(model(c)))
	if old.Gen() != 4 {
		t.Errorf("thawed at generation %d, want 4", old.Gen())
	}
}

// TestWholeStateReleased: the encoding of a whole state, shared by the
// streams that ask for it, is held KeepWhole after it was last asked for
// and then only while they write it: once every one has sent it and waits
// for changes, it is garbage.
func TestWholeStateReleased(t *testing.T) {
	l := NewLeader("cluster.local.", "")
	l.KeepWhole = 100 * time.Millisecond
	l.Rebuilt(k8sdns.Build(model(clustergen.Generate(6, clustergen.Small()))))
	base, _ := serveLeader(t, l)
	sinks := make([]*fakeSink, 5)
	for i := range sinks {
		sinks[i] = &fakeSink{}
		startFollower(t, base, "", sinks[i])
	}
	for _, s := range sinks {
		waitGen(t, s, 1)
	}
	held := func() bool {
		runtime.GC()
		l.enc.mu.Lock()
		defer l.enc.mu.Unlock()
		return l.enc.lastFull.Value() != nil
	}
	for deadline := time.Now().Add(time.Second); held(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // well before the streams' 5 s of silence end them
			t.Fatal("the whole state's encoding is still held by the idle streams")
		}
	}
}

// TestPodLinesBounded: a pod index of any size travels in lines of at most
// podsPerLine addresses, and the follower's table has all of it.
func TestPodLinesBounded(t *testing.T) {
	c := &k8sdns.Cluster{Namespaces: []string{"a", "b"}}
	for i := range 2*podsPerLine + 10 {
		c.Pods = append(c.Pods, k8sdns.PodAddr{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Namespaces: []string{[]string{"a", "b"}[i%2]}})
	}
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(c))
	enc := l.enc.full(l, l.cur)
	lines := 0
	for _, line := range bytes.Split(enc.b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(`{"pods":`)) {
			lines++
			if n := bytes.Count(line, []byte(`":[`)); n > podsPerLine {
				t.Errorf("a pods line with %d addresses", n)
			}
		}
	}
	if lines != 3 {
		t.Errorf("%d pods lines, want 3", lines)
	}
	base, _ := serveLeader(t, l)
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	waitGen(t, sink, 1)
	if got := sink.tbl.Load().PodCount(); got != len(c.Pods) {
		t.Errorf("the follower has %d pod addresses, want %d", got, len(c.Pods))
	}
}

// TestStreamPaced: a stream writes at most one change line per Pace. A
// change after a quiet spell goes out at once; changes that come faster
// than the pace go out together in the next line, so that the table can
// take every change at once without a thousand streams writing a line for
// each.
func TestStreamPaced(t *testing.T) {
	const pace = time.Second
	c := clustergen.Generate(9, clustergen.Small())
	r := rand.New(rand.NewSource(9))
	l := NewLeader("cluster.local.", "")
	l.Pace = pace
	l.Rebuilt(k8sdns.Build(model(c)))
	base, _ := serveLeader(t, l)
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	waitGen(t, sink, 1)
	time.Sleep(pace + 100*time.Millisecond) // quiet since the first state

	start, lines := time.Now(), l.Stats.Changes.Load()
	stepped(l, c, r, 1)
	waitGen(t, sink, l.Gen())
	if d := time.Since(start); d > pace/2 {
		t.Errorf("a change after a quiet spell reached the follower after %v: held for the pace (%v)", d, pace)
	}
	for range 5 { // within the pace of the line just written
		time.Sleep(20 * time.Millisecond)
		stepped(l, c, r, 1)
	}
	waitGen(t, sink, l.Gen())
	if n := l.Stats.Changes.Load() - lines; n != 2 {
		t.Errorf("6 changes, the last 5 within the pace: %d change lines, want 2", n)
	}
	if g, w := sink.tbl.Load().Describe(), l.cur.table.Describe(); g != w {
		t.Errorf("the follower's table differs from the leader's:\n%s\nwant:\n%s", g, w)
	}
}
