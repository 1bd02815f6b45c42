package replica

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	"github.com/miekg/dns"
)

// fakeSink is the plugin as the follower sees it: it builds tables as the
// syncer does (a whole state: Build; a patch: Patched) and serves them.
type fakeSink struct {
	tbl       atomic.Pointer[k8sdns.Table]
	updates   atomic.Int64
	patches   atomic.Int64
	unchanged atomic.Int64

	mu   sync.Mutex
	errs []error
	ages []time.Duration // SetAge's arguments, in order
	// programmed are the patches' trigger times, in order
	programmed []feed.Trigger
}

func (s *fakeSink) SetAge(age time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ages = append(s.ages, age)
}

// lastAge is the last SetAge's argument (-1: none).
func (s *fakeSink) lastAge() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ages) == 0 {
		return -1
	}
	return s.ages[len(s.ages)-1]
}

var (
	_ feed.Sink   = (*fakeSink)(nil)
	_ feed.Served = (*fakeSink)(nil)
	_ feed.Aged   = (*fakeSink)(nil)
)

func (s *fakeSink) Update(st feed.State) {
	s.tbl.Store(k8sdns.Build(st.(*k8sdns.Cluster)))
	s.updates.Add(1)
}

func (s *fakeSink) Patch(p feed.Patch) {
	s.tbl.Store(s.tbl.Load().Patched(p.(*k8sdns.Patch)))
	s.mu.Lock()
	s.programmed = append(s.programmed, p.(*k8sdns.Patch).Programmed...)
	s.mu.Unlock()
	s.patches.Add(1)
}

// triggers are the trigger times the patches carried, in order.
func (s *fakeSink) triggers() []feed.Trigger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]feed.Trigger(nil), s.programmed...)
}

func (s *fakeSink) Unchanged() { s.unchanged.Add(1) }

func (s *fakeSink) Failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *fakeSink) Served() any {
	if t := s.tbl.Load(); t != nil {
		return t
	}
	return nil
}

// errors are the failures reported so far.
func (s *fakeSink) errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// gen is the generation of the served table's origin (0: none).
func (s *fakeSink) gen() uint64 {
	t := s.tbl.Load()
	if t == nil {
		return 0
	}
	_, g, _ := parseOrigin(t.Origin())
	return g
}

// model is a generated cluster's Kubernetes DNS model, as the kubernetes
// source maps it.
func model(c *clustergen.Cluster) *k8sdns.Cluster {
	m := kubesource.DNSCluster(c.Namespaces, c.Services, c.Slices)
	if len(c.Pods) > 0 {
		m.Pods = kubesource.DNSPods(c.Pods)
	}
	return m
}

// serveLeader serves l on a loopback port until the test ends; it
// returns the stream's base URL.
func serveLeader(t testing.TB, h http.Handler) (string, *Server) {
	t.Helper()
	s := NewServer("127.0.0.1:0", h)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return "http://" + s.Addr(), s
}

// follower runs a follower of base into sink until stop (or the test's
// end), with a short backoff.
type follower struct {
	*Source
	cancel context.CancelFunc
	done   chan struct{}
}

func startFollower(t testing.TB, base, tokenFile string, sink feed.Sink, opts ...func(*Source)) *follower {
	t.Helper()
	src, err := NewSource(base, tokenFile, "cluster.local.")
	if err != nil {
		t.Fatal(err)
	}
	src.Backoff, src.MaxBackoff, src.Silence = 20*time.Millisecond, 100*time.Millisecond, 5*time.Second
	for _, o := range opts {
		o(src)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{Source: src, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		src.Run(ctx, sink)
	}()
	t.Cleanup(f.stop)
	return f
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// waitGen waits until the sink serves generation gen.
func waitGen(t testing.TB, s *fakeSink, gen uint64) {
	t.Helper()
	kubefix.Eventually(t, func() string {
		if g := s.gen(); g != gen {
			return fmt.Sprintf("the follower is at generation %d, want %d (errors %v)", g, gen, s.errors())
		}
		return ""
	})
}

// answers are the replies of the spec server to qs from tbl, as text.
func answers(tbl *k8sdns.Table, qs []clustergen.Question) []string {
	s := &k8sdns.Server{Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}, TTL: 5, PodsInsecure: true}
	out := make([]string, len(qs))
	for i, q := range qs {
		m := new(dns.Msg).SetQuestion(q.Name, q.Type)
		state := request.Request{W: &test.ResponseWriter{}, Req: m}
		zi := -1
		for j, z := range s.Zones {
			if dns.IsSubDomain(z, state.Name()) && (zi < 0 || len(z) > len(s.Zones[zi])) {
				zi = j
			}
		}
		if zi < 0 {
			continue
		}
		rp := s.Serve(context.Background(), state, zi, tbl, 0)
		out[i] = fmt.Sprintf("nx=%v refused=%v %v %v", rp.NameError, rp.Refused, rp.Answer, rp.Extra)
	}
	return out
}

// rawStream serves, for each connection in turn, the lines of the next
// script (the last one again once they run out); a script line "WAIT"
// holds the stream open until the client goes.
type rawStream struct {
	mu      sync.Mutex
	scripts [][]string
	conns   int
}

func (r *rawStream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	script := r.scripts[min(r.conns, len(r.scripts)-1)]
	r.conns++
	r.mu.Unlock()
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(http.StatusOK)
	for _, l := range script {
		if l == "WAIT" {
			w.(http.Flusher).Flush()
			<-req.Context().Done()
			return
		}
		_, _ = w.Write([]byte(l))
	}
}

func (r *rawStream) connections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns
}

// smallState is a whole state of one Service, generation gen of epoch.
func smallState(epoch string, gen uint64, ip string) []string {
	return []string{
		string(appendHeader(nil, epoch, gen, true, 1, 0, 0)),
		`{"namespaces":["shop"]}` + "\n",
		`{"namespace":"shop","name":"web","service":{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["` + ip + `"]}}` + "\n",
		string(appendSynced(nil, gen, 1, zeroDigest, nil)),
	}
}

// writeToken writes a token file and returns its path.
func writeToken(t testing.TB, token string) string {
	t.Helper()
	p := t.TempDir() + "/token"
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// closedPort is a loopback address where nothing listens.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// clusterIP is the cluster IP of shop/web in a table, or "".
func clusterIP(tbl *k8sdns.Table) string {
	if tbl == nil {
		return ""
	}
	s := tbl.Name(k8sdns.Key{Namespace: "shop", Name: "web"}).Service
	if s == nil || len(s.ClusterIPs) == 0 {
		return ""
	}
	return s.ClusterIPs[0].String()
}

// itoa is strconv.Itoa for uint64 generations in scripts.
func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// timing sets a follower's silence and backoff.
func timing(silence, backoff time.Duration) func(*Source) {
	return func(s *Source) { s.Silence, s.Backoff, s.MaxBackoff = silence, backoff, backoff }
}
