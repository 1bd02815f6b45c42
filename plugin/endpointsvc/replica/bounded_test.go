package replica

import (
	"bufio"
	"context"
	"math/rand"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// TestWholeEncodedOnce: streams that start together share one encoding
// of the whole state, and so do streams that start after a few changes
// (they get the changes since after it): one whole encoding for all.
func TestWholeEncodedOnce(t *testing.T) {
	c := clustergen.Generate(7, clustergen.Small())
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(model(c)))
	base, _ := serveLeader(t, l)
	sinks := make([]*fakeSink, 20)
	var wg sync.WaitGroup
	for i := range sinks {
		sinks[i] = &fakeSink{}
		wg.Add(1)
		go func() { defer wg.Done(); startFollower(t, base, "", sinks[i]) }()
	}
	wg.Wait()
	for _, s := range sinks {
		waitGen(t, s, 1)
	}
	if n := l.Stats.Wholes.Load(); n != 1 {
		t.Errorf("%d streams starting together: %d whole encodings, want 1", len(sinks), n)
	}
	stepped(l, c, rand.New(rand.NewSource(7)), 3) // generation 4
	late := &fakeSink{}
	startFollower(t, base, "", late)
	waitGen(t, late, 4)
	for _, s := range sinks {
		waitGen(t, s, 4)
	}
	if n := l.Stats.Wholes.Load(); n != 1 {
		t.Errorf("a stream starting three changes later: %d whole encodings, want 1 (the latest, then the changes)", n)
	}
	if g, w := late.tbl.Load().Describe(), l.cur.table.Describe(); g != w {
		t.Errorf("the late follower's table differs from the leader's")
	}
	if l.Stats.Full.Load() != int64(len(sinks)+1) {
		t.Errorf("%d whole states sent, want %d", l.Stats.Full.Load(), len(sinks)+1)
	}
}

// bigLeader is a leader whose whole state (~4.5 MB of pod lines) is more
// than loopback's socket buffers hold with a small receive buffer.
func bigLeader(t *testing.T) *Leader {
	c := &k8sdns.Cluster{Namespaces: []string{"a"}}
	for i := range 200_000 {
		c.Pods = append(c.Pods, k8sdns.PodAddr{Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Namespaces: []string{"a"}})
	}
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(c))
	return l
}

// stalled opens a stream and reads nothing: a receive buffer of 4 KiB,
// set before the connection, so the leader's writes block at once.
func stalled(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("GET " + Path + "?v=2 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestStalledReaderDropped: a follower that stops reading is dropped one
// write timeout after it stopped, whatever the size of the state, and
// gives its whole-send slot back; meanwhile, with every slot taken,
// another stream that needs a whole state gets 503 with a Retry-After.
func TestStalledReaderDropped(t *testing.T) {
	l := bigLeader(t)
	l.WriteTimeout, l.WholeWait = 300*time.Millisecond, 50*time.Millisecond
	l.SetWholeSends(1)
	_, srv := serveLeader(t, l)
	start := time.Now()
	stalled(t, srv.Addr())
	kubefix.Eventually(t, func() string {
		if l.Stats.Streams.Load() != 1 || len(l.slots) != 1 {
			return "the stalled stream has not started"
		}
		return ""
	})
	resp, err := http.Get("http://" + srv.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a whole state beyond the cap: %s, Retry-After %q; want 503 with one", resp.Status, resp.Header.Get("Retry-After"))
	}
	for l.Stats.Streams.Load() != 0 || len(l.slots) != 0 {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("the stalled stream still open after %v (write timeout %v)", time.Since(start), l.WriteTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("a stalled reader dropped after %v, %d bytes sent", time.Since(start).Round(time.Millisecond), l.Stats.Bytes.Load())
	whole := len(encodeWhole(l.cur).b)
	if sent := l.Stats.Bytes.Load(); sent >= int64(whole) {
		t.Errorf("all %d bytes of the state went to a reader that read nothing: the test proves nothing", sent)
	}
	resp, err = http.Get("http://" + srv.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(line, `{"epoch":`) {
		t.Errorf("after the stalled stream: %s %q", resp.Status, line)
	}
}

// TestBackoff: a follower's waits grow from Backoff to MaxBackoff, each
// drawn in [w/2, w), start over after a healthy stream, and honour a
// busy leader's Retry-After.
func TestBackoff(t *testing.T) {
	b := backoff{base: time.Second, max: 30 * time.Second}
	seen := map[time.Duration]bool{}
	for round := range 3 {
		w := time.Second
		for i := range 8 {
			d := b.next()
			if d < w/2 || d >= w {
				t.Errorf("round %d wait %d: %v, want in [%v, %v)", round, i, d, w/2, w)
			}
			seen[d] = true
			w = min(2*w, 30*time.Second)
		}
		b.reset()
	}
	if len(seen) < 20 {
		t.Errorf("24 waits took %d values: not jittered", len(seen))
	}
	// after a healthy stream: [0, base/2), jittered, and the next failure
	// waits as the first of a row
	soon := map[time.Duration]bool{}
	for range 20 {
		b.reset()
		d := b.soon()
		if d < 0 || d >= 500*time.Millisecond {
			t.Errorf("soon: %v, want in [0, 500ms)", d)
		}
		soon[d] = true
		if d := b.next(); d < 500*time.Millisecond || d >= time.Second {
			t.Errorf("the wait after soon: %v, want in [500ms, 1s)", d)
		}
	}
	if len(soon) < 15 {
		t.Errorf("20 soon waits took %d values: not jittered", len(soon))
	}

	var mu sync.Mutex
	var waits []time.Duration
	sink := &fakeSink{}
	f := startFollower(t, "http://"+closedPort(t), "", sink, func(s *Source) {
		s.Backoff, s.MaxBackoff = 10*time.Millisecond, 80*time.Millisecond
		s.Waits = func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() }
	})
	time.Sleep(400 * time.Millisecond)
	f.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 5 {
		t.Fatalf("waits %v", waits)
	}
	for i, w := range []time.Duration{10, 20, 40, 80, 80} {
		if w *= time.Millisecond; waits[i] < w/2 || waits[i] >= w {
			t.Errorf("wait %d: %v, want in [%v, %v)", i, waits[i], w/2, w)
		}
	}

	// a busy leader: the wait is its Retry-After
	busy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	bbase, _ := serveLeader(t, busy)
	got := make(chan time.Duration, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := NewSource(bbase, "", "")
	if err != nil {
		t.Fatal(err)
	}
	src.Waits = func(d time.Duration) { got <- d; cancel() }
	go src.Run(ctx, &fakeSink{})
	if d := <-got; d != 2*time.Second {
		t.Errorf("after a 503 with Retry-After 2: a wait of %v", d)
	}
}

// TestBackoffReset: after a healthy stream the wait starts over.
func TestBackoffReset(t *testing.T) {
	l := NewLeader("cluster.local.", "")
	l.Rebuilt(k8sdns.Build(&k8sdns.Cluster{Namespaces: []string{"shop"}}))
	base, srv := serveLeader(t, l)
	var mu sync.Mutex
	var waits []time.Duration
	sink := &fakeSink{}
	startFollower(t, base, "", sink, func(s *Source) {
		s.Backoff, s.MaxBackoff, s.Healthy = 40*time.Millisecond, time.Second, 0
		s.Waits = func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() }
	})
	waitGen(t, sink, 1)
	srv.Stop() // ends the healthy stream: the next wait is soon, then they start at Backoff
	kubefix.Eventually(t, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(waits) < 3 {
			return "fewer than 3 waits"
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	if waits[0] >= 20*time.Millisecond || waits[1] < 20*time.Millisecond || waits[1] >= 40*time.Millisecond || waits[2] < 40*time.Millisecond || waits[2] >= 80*time.Millisecond {
		t.Errorf("waits after a healthy stream ended: %v, want [0,20) ms, [20,40) ms, then [40,80) ms", waits)
	}
}

// TestRefusedStreamNewConnection: a follower refused by a leader (a 503,
// a 401) asks again on a new connection, so that behind a Service the
// retry can reach another replica; a kept connection would carry every
// retry to the replica that refused.
func TestRefusedStreamNewConnection(t *testing.T) {
	var mu sync.Mutex
	var remotes []string
	stream := &rawStream{scripts: [][]string{append(smallState("e1", 1, "10.96.0.20"), "WAIT")}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		n := len(remotes)
		mu.Unlock()
		switch {
		case n <= 2:
			http.Error(w, "not serving yet", http.StatusServiceUnavailable)
		case n <= 4:
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		default:
			stream.ServeHTTP(w, r)
		}
	})
	base, _ := serveLeader(t, h)
	sink := &fakeSink{}
	startFollower(t, base, "", sink)
	waitGen(t, sink, 1)
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, r := range remotes {
		if seen[r] {
			t.Errorf("requests from %v: %s asked twice on one connection", remotes, r)
		}
		seen[r] = true
	}
	if len(remotes) < 5 {
		t.Errorf("%d requests, want 5 (4 refused)", len(remotes))
	}
}
