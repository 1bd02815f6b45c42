package main

// -mix fleet: a simulated node-local fleet (issue 31 item 6). A real
// kube-apiserver under churn (EndpointSlice flips and a probe Service
// whose port is set every second), -leaders cluster-DNS processes with
// `replicate`, behind an in-process TCP balancer that stands for the
// cluster DNS Service (each connection to a random live leader), two real
// node-local followers answering DNS under a bounded query loop, and
// -followers light followers in this process: each the real follower
// (plugin/endpointsvc/replica's Source: the protocol, the back-off, the
// resume by digest) decoding every state, with a sink that keeps only
// the table's origin (a table per follower would not fit in memory at a
// thousand). -slow-share of them read through a throttled port of the
// balancer, -v1-share are version-1 clients (no v: what a follower
// before version 2 asks). Drills, one after the other: a rolling restart
// of the leaders, one leader killed (SIGKILL) and started again, an API
// outage, a leader a version ahead (aheadfield.go). Figures: what each follower receives per drill (beyond the
// churn's own changes) against a whole state, the leaders' heap against
// the number of streams, change-to-follower propagation (the probe's
// write to the light followers' applied state), answers lost on the real
// followers. Every loop is bounded by the run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/replica"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	fleetN        = flag.Int("followers", 100, "-mix fleet: light followers (stream clients in this process)")
	fleetLeaders  = flag.Int("leaders", 3, "-mix fleet: leader processes (cluster DNS replicas)")
	fleetSlow     = flag.Float64("slow-share", 0.10, "-mix fleet: share of light followers that read slowly")
	fleetSlowRate = flag.Int("slow-rate", 128<<10, "-mix fleet: bytes per second a slow follower reads")
	fleetV1       = flag.Float64("v1-share", 0.05, "-mix fleet: share of light followers that speak version 1 only")
	fleetChurn    = flag.Int("fleet-churn", 10, "-mix fleet: EndpointSlice updates per second during the run")
	fleetSteady   = flag.Duration("steady", 20*time.Second, "-mix fleet: the steady phase (churn, no drill) the baseline is measured in")
	fleetQPS      = flag.Int("fleet-qps", 50, "-mix fleet: queries per second to each real follower")
)

// fleetOptions are the light followers' options (the shipped node-local
// stanza's: pods insecure, endpoints).
const fleetOptions = "pods=false,noendpoints=false"

// paused holds the churn and the probe (while the leaders' digests are
// compared).
var paused atomic.Bool

// phase names the part of the run the figures are counted in.
var phase atomic.Pointer[string]

func setPhase(s string) { phase.Store(&s) }

// fleetNode is one meshdns process of the fleet.
type fleetNode struct {
	name, dir, conf             string
	dns, ready, prom, replicate int
	p                           *proc
}

func newFleetNode(dir, name, block string, replicate int) *fleetNode {
	n := &fleetNode{name: name, dir: dir, dns: freePort(), ready: freePort(), prom: freePort(), replicate: replicate}
	corefile := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n%s}\n", n.dns, n.ready, n.prom, block)
	n.conf = filepath.Join(dir, "Corefile.fleet."+name)
	if err := os.WriteFile(n.conf, []byte(corefile), 0o644); err != nil {
		fail("%v", err)
	}
	return n
}

func (n *fleetNode) start() {
	n.p = start(n.dir, *meshdns, "-conf", n.conf)
	waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", n.ready), n.p, 120*time.Second)
}

func (n *fleetNode) kill() {
	_ = n.p.cmd.Process.Signal(syscall.SIGKILL)
	<-n.p.done
}

func (n *fleetNode) heapMiB() float64 {
	return metric(n.prom, "go_memstats_heap_inuse_bytes") / (1 << 20)
}

// balancer is the cluster DNS Service in front of the leaders: each
// connection goes to a random leader that accepts it; on its slow port
// the leader's bytes are passed on at -slow-rate.
type balancer struct {
	fast, slow net.Listener
	targets    []string
	// ahead makes the leaders behind it look a protocol version ahead to
	// the connections made while it is set (the drill "a leader a version
	// ahead"): every line of a version-2+ stream carries a field this
	// version does not know (aheadfield.go).
	ahead atomic.Bool
}

func startBalancer(targets []string) *balancer {
	b := &balancer{targets: targets}
	for _, ln := range []*net.Listener{&b.fast, &b.slow} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail("%v", err)
		}
		*ln = l
	}
	go b.serve(b.fast, 0)
	go b.serve(b.slow, *fleetSlowRate)
	return b
}

func (b *balancer) serve(ln net.Listener, rate int) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go b.pass(c, rate)
	}
}

func (b *balancer) pass(c net.Conn, rate int) {
	defer c.Close()
	// the request line says which protocol version the follower speaks
	br := bufio.NewReader(c)
	reqLine, err := br.ReadString('\n')
	if err != nil {
		return
	}
	ahead := b.ahead.Load() && speaksV2(reqLine)
	var up net.Conn
	for _, i := range rand.Perm(len(b.targets)) {
		u, err := net.DialTimeout("tcp", b.targets[i], 500*time.Millisecond)
		if err == nil {
			up = u
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	go func() {
		if _, err := io.WriteString(up, reqLine); err == nil {
			_, _ = io.Copy(up, br)
		}
		_ = up.Close()
	}()
	var from io.Reader = up
	if ahead {
		from = newAheadReader(up)
	}
	if rate <= 0 {
		_, _ = io.Copy(c, from)
		return
	}
	buf := make([]byte, 4096)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
		}
		if err != nil {
			return
		}
	}
}

// probe is the Service whose port the run sets every second: its port
// says which write a follower's state holds.
const (
	probeNS, probeName = "fleet", "probe"
	probeBase          = 10000
)

// stamps are the probe writes' times, by sequence number.
type stamps struct {
	mu sync.Mutex
	at map[int32]time.Time
}

func (s *stamps) set(seq int32, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[seq] = t
}

func (s *stamps) get(seq int32) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[seq]
	return t, ok
}

// latencies are propagation samples by phase.
type latencies struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (l *latencies) add(d time.Duration) {
	p := *phase.Load()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by[p] = append(l.by[p], d)
}

func (l *latencies) of(p string) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.by[p])
}

// lightSink is a light follower's sink: it keeps a table of the state's
// origin only (what the follower resumes from) and times the probe.
type lightSink struct {
	tbl     atomic.Pointer[k8sdns.Table]
	last    int32 // the last probe write seen
	st      *stamps
	lat     *latencies
	failed  atomic.Int64
	applied atomic.Int64
}

var (
	_ feed.Sink   = (*lightSink)(nil)
	_ feed.Served = (*lightSink)(nil)
)

func (s *lightSink) Update(st feed.State) {
	c := st.(*k8sdns.Cluster)
	for _, svc := range c.Services {
		if svc.Namespace == probeNS && svc.Name == probeName {
			s.observe(svc)
		}
	}
	s.tbl.Store(k8sdns.Build(&k8sdns.Cluster{Origin: c.Origin}))
	s.applied.Add(1)
}

func (s *lightSink) Patch(p feed.Patch) {
	kp := p.(*k8sdns.Patch)
	for _, c := range kp.Changes {
		if c.Key.Namespace == probeNS && c.Key.Name == probeName && c.Service != nil {
			s.observe(c.Service)
		}
	}
	s.tbl.Store(k8sdns.Build(&k8sdns.Cluster{Origin: kp.Origin}))
	s.applied.Add(1)
}

func (s *lightSink) observe(svc *k8sdns.Service) {
	if len(svc.Ports) == 0 {
		return
	}
	seq := svc.Ports[0].Port - probeBase
	if seq <= s.last {
		return
	}
	s.last = seq
	if at, ok := s.st.get(seq); ok {
		s.lat.add(time.Since(at))
	}
}

func (s *lightSink) Unchanged()       {}
func (s *lightSink) Failed(err error) { s.failed.Add(1) }
func (s *lightSink) Served() any {
	if t := s.tbl.Load(); t != nil {
		return t
	}
	return nil
}

// lightFollower is one follower in this process: the real Source, or
// (v1) a version-1 client.
type lightFollower struct {
	src  *replica.Source // nil: v1
	sink *lightSink
	slow bool
	v1   *v1Client
}

func (f *lightFollower) bytes() int64 {
	if f.v1 != nil {
		return f.v1.bytes.Load()
	}
	return f.src.Stats.Bytes.Load()
}

func (f *lightFollower) wholes() int64 {
	if f.v1 != nil {
		return f.v1.full.Load()
	}
	return f.src.Stats.Full.Load()
}

// v1Client follows a stream as a follower of version 1 does: no v in the
// request, the epoch and generation of its last state to resume from, and
// every control line decoded with unknown fields refused.
type v1Client struct {
	url         string
	bytes, full atomic.Int64
	synced      atomic.Int64
	refused     atomic.Int64 // lines a version-1 follower would refuse
}

func (c *v1Client) run(ctx context.Context) {
	var epoch string
	var gen uint64
	for ctx.Err() == nil {
		epoch, gen = c.follow(ctx, epoch, gen)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second + rand.N(time.Second)):
		}
	}
}

func (c *v1Client) follow(ctx context.Context, epoch string, gen uint64) (string, uint64) {
	u := c.url
	if epoch != "" {
		u += fmt.Sprintf("?epoch=%s&gen=%d", epoch, gen)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return epoch, gen
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return epoch, gen
	}
	br := bufio.NewReaderSize(resp.Body, 1<<16)
	next := epoch
	for {
		line, err := br.ReadBytes('\n')
		c.bytes.Add(int64(len(line)))
		if err != nil {
			return epoch, gen
		}
		if bytes.HasPrefix(line, []byte(`{"namespace":`)) {
			continue
		}
		var l struct {
			Epoch      *string              `json:"epoch"`
			Gen        *uint64              `json:"gen"`
			Full       *bool                `json:"full"`
			Synced     bool                 `json:"synced"`
			Namespaces *[]string            `json:"namespaces"`
			Pods       *map[string][]string `json:"pods"`
		}
		d := json.NewDecoder(bytes.NewReader(line))
		d.DisallowUnknownFields()
		if d.Decode(&l) != nil {
			c.refused.Add(1)
			return epoch, gen
		}
		switch {
		case l.Epoch != nil:
			next = *l.Epoch
			if l.Full != nil && *l.Full {
				c.full.Add(1)
			}
		case l.Synced && l.Gen != nil:
			epoch, gen = next, *l.Gen
			c.synced.Add(1)
		}
	}
}

// queries asks a real follower a few names, -fleet-qps a second, and
// counts by phase the answers lost (a timeout, an error, no address).
type queries struct {
	mu         sync.Mutex
	sent, lost map[string]int
}

func (q *queries) count(lost bool) {
	p := *phase.Load()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sent[p]++
	if lost {
		q.lost[p]++
	}
}

func (q *queries) run(ctx context.Context, port int, names []string) {
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	tick := time.NewTicker(time.Second / time.Duration(max(*fleetQPS, 1)))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m := new(dns.Msg).SetQuestion(names[i%len(names)], dns.TypeA)
		r, _, err := c.Exchange(m, fmt.Sprintf("127.0.0.1:%d", port))
		q.count(err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0)
	}
}

// churn flips an endpoint of a random slice -fleet-churn times a second
// until ctx ends; writes that fail (an API outage) are skipped.
func churn(ctx context.Context, api *apiServer, sls []*discoveryv1.EndpointSlice, done *atomic.Int64) {
	tick := time.NewTicker(time.Second / time.Duration(max(*fleetChurn, 1)))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if paused.Load() {
			continue
		}
		i := rand.N(len(sls))
		sl := sls[i]
		ready := sl.Endpoints[0].Conditions.Ready == nil || *sl.Endpoints[0].Conditions.Ready
		sl.Endpoints[0].Conditions.Ready = ptrTo(!ready)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Update(wctx, sl, metav1.UpdateOptions{})
		if err != nil {
			if fresh, gerr := api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Get(wctx, sl.Name, metav1.GetOptions{}); gerr == nil {
				sls[i] = fresh
			} else {
				sl.Endpoints[0].Conditions.Ready = ptrTo(ready)
			}
			cancel()
			continue
		}
		cancel()
		sls[i] = got
		done.Add(1)
	}
}

// probeLoop sets the probe's port every second, stamping each write.
func probeLoop(ctx context.Context, api *apiServer, svc *corev1.Service, st *stamps) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for seq := int32(1); ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if paused.Load() {
			continue
		}
		svc.Spec.Ports[0].Port = probeBase + seq
		st.set(seq, time.Now())
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := api.client.CoreV1().Services(probeNS).Update(wctx, svc, metav1.UpdateOptions{})
		if err != nil {
			if fresh, gerr := api.client.CoreV1().Services(probeNS).Get(wctx, probeName, metav1.GetOptions{}); gerr == nil {
				svc = fresh
			}
			cancel()
			continue
		}
		cancel()
		svc = got
		seq++
	}
}

// fleetTotals are the light followers' counters at one moment.
type fleetTotals struct {
	at     time.Time
	bytes  []int64
	wholes []int64
}

func totals(fs []*lightFollower) fleetTotals {
	t := fleetTotals{at: time.Now(), bytes: make([]int64, len(fs)), wholes: make([]int64, len(fs))}
	for i, f := range fs {
		t.bytes[i], t.wholes[i] = f.bytes(), f.wholes()
	}
	return t
}

// runFleet is -mix fleet.
func runFleet(dir string, api *apiServer) {
	t0 := time.Now()
	o := populateSpec(api.client)
	ctx0 := context.Background()
	if _, err := api.client.CoreV1().Namespaces().Create(ctx0, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNS}}, metav1.CreateOptions{}); err != nil {
		fail("%v", err)
	}
	probe, err := api.client.CoreV1().Services(probeNS).Create(ctx0, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: probeName},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: probeBase}}},
	}, metav1.CreateOptions{})
	if err != nil {
		fail("%v", err)
	}
	fmt.Printf("objects: %d namespaces, %d Services, %d EndpointSlices with %d ready endpoints, %d Nodes; created in %v\n",
		*namespacesN, *services, o.slices, o.endpoints, *nodes, time.Since(t0).Round(time.Millisecond))
	list, err := api.client.DiscoveryV1().EndpointSlices("").List(ctx0, metav1.ListOptions{})
	if err != nil {
		fail("%v", err)
	}
	var sls []*discoveryv1.EndpointSlice
	for i := range list.Items {
		if len(list.Items[i].Endpoints) > 0 && list.Items[i].Namespace != "default" {
			sls = append(sls, &list.Items[i])
		}
	}

	// the leaders, and the balancer in front of them
	setPhase("start")
	leaders := make([]*fleetNode, *fleetLeaders)
	var targets []string
	for i := range leaders {
		rp := freePort()
		leaders[i] = newFleetNode(dir, fmt.Sprintf("leader%d", i), "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source kubernetes "+api.kubeconfig+
			"\n        schema kubernetes\n        pods insecure\n        snapshot "+fmt.Sprintf("leader%d.json", i)+"\n        replicate 127.0.0.1:"+fmt.Sprint(rp)+
			"\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n", rp)
		leaders[i].start()
		targets = append(targets, fmt.Sprintf("127.0.0.1:%d", rp))
	}
	lb := startBalancer(targets)
	url := "http://" + lb.fast.Addr().String()
	time.Sleep(2 * time.Second)
	heap0 := make([]float64, len(leaders))
	for i, l := range leaders {
		heap0[i] = l.heapMiB()
	}
	whole := wholeState(url + replica.Path + "?v=3")
	fmt.Printf("%d leaders (the cluster DNS stanza with replicate) behind a balancer; a whole state: %d bytes (%.2f MiB)\n", len(leaders), whole, float64(whole)/(1<<20))

	// two real followers (the node-local stanza)
	var reals []*fleetNode
	for i := range 2 {
		n := newFleetNode(dir, fmt.Sprintf("follower%d", i), "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source replica "+url+
			"\n        schema kubernetes\n        pods insecure\n        snapshot "+fmt.Sprintf("follower%d.json", i)+"\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n", 0)
		n.start()
		reals = append(reals, n)
	}

	// the light followers, started in batches
	ctx, cancel := context.WithCancel(ctx0)
	defer cancel()
	st := &stamps{at: map[int32]time.Time{}}
	lat := &latencies{by: map[string][]time.Duration{}}
	fs := make([]*lightFollower, *fleetN)
	nv1 := int(float64(*fleetN)**fleetV1 + 0.5)
	nslow := int(float64(*fleetN)**fleetSlow + 0.5)
	fill := time.Now()
	for i := range fs {
		f := &lightFollower{sink: &lightSink{st: st, lat: lat}, slow: i >= nv1 && i < nv1+nslow}
		base := url
		if f.slow {
			base = "http://" + lb.slow.Addr().String()
		}
		if i < nv1 {
			f.v1 = &v1Client{url: base + replica.Path}
			go f.v1.run(ctx)
		} else {
			src, err := replica.NewSource(base, "", "fleet")
			if err != nil {
				fail("%v", err)
			}
			src.Options = fleetOptions
			f.src = src
			go src.Run(ctx, f.sink)
		}
		fs[i] = f
		if i%50 == 49 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		n := 0
		for _, f := range fs {
			if f.wholes() > 0 {
				n++
			}
		}
		if n == len(fs) {
			break
		}
		if time.Now().After(deadline) {
			fail("%d of %d light followers have a state after 5 minutes", n, len(fs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("%d light followers (%d slow at %d KiB/s, %d of version 1) have the whole state %v after the first started\n",
		len(fs), nslow, *fleetSlowRate>>10, nv1, time.Since(fill).Round(time.Millisecond))

	// churn, the probe, the query loops: until the run ends
	var churned atomic.Int64
	go churn(ctx, api, sls, &churned)
	go probeLoop(ctx, api, probe, st)
	q := &queries{sent: map[string]int{}, lost: map[string]int{}}
	names := []string{}
	for _, s := range o.clusterIP[:min(8, len(o.clusterIP))] {
		names = append(names, s.fqdn())
	}
	for _, r := range reals {
		go q.run(ctx, r.dns, names)
	}

	// steady: the baseline of bytes per follower, propagation, heap
	setPhase("steady")
	time.Sleep(3 * time.Second)
	before := totals(fs)
	time.Sleep(*fleetSteady)
	after := totals(fs)
	rate := perSecond(fs, before, after, false)
	fmt.Printf("steady (%v, %d slice flips/s + the probe each second): %.0f bytes/s per follower (the changes); propagation p50 %v p99 %v (%d samples)\n",
		*fleetSteady, *fleetChurn, rate, pct(lat.of("steady"), 50), pct(lat.of("steady"), 99), len(lat.of("steady")))
	fmt.Printf("leader heap in use (MiB), without followers → with %d streams in all:", len(fs)+2)
	for i, l := range leaders {
		fmt.Printf(" leader%d %.1f → %.1f (%v streams)", i, heap0[i], l.heapMiB(), metric(l.prom, "coredns_endpointsvc_replicate_streams"))
	}
	fmt.Println()

	fmt.Printf("the leaders hold the same content (digests, churn paused 2 s): %s\n", agree(api, leaders))
	drill := func(name string, f func()) {
		setPhase(name)
		b := totals(fs)
		f()
		time.Sleep(5 * time.Second) // the followers settle
		a := totals(fs)
		reportDrill(name, fs, b, a, rate, whole, lat.of(name))
		fmt.Printf("%-16s the leaders hold the same content: %s\n", name, agree(api, leaders))
	}
	drill("rolling restart", func() {
		for _, l := range leaders {
			l.p.stop()
			l.start()
			time.Sleep(3 * time.Second)
		}
	})
	drill("one killed", func() {
		leaders[0].kill()
		time.Sleep(10 * time.Second)
		leaders[0].start()
	})
	// a leader a version ahead: the leaders restarted one by one (every
	// follower reconnects) while the balancer makes each new stream look
	// like a newer leader's, every line with a field this version does not
	// know; the followers must follow as before (nothing refused, no
	// whole state beyond a rollout's, no answer lost)
	drill("version ahead", func() {
		lb.ahead.Store(true)
		for _, l := range leaders {
			l.p.stop()
			l.start()
			time.Sleep(3 * time.Second)
		}
		time.Sleep(5 * time.Second)
	})
	lb.ahead.Store(false)
	drill("API outage", func() {
		api.proc.stop()
		time.Sleep(15 * time.Second)
		api.start()
		time.Sleep(5 * time.Second)
	})
	cancel()
	setPhase("end")

	fmt.Printf("answers lost on the 2 real followers (%d queries/s each):", *fleetQPS)
	q.mu.Lock()
	for _, p := range []string{"steady", "rolling restart", "one killed", "version ahead", "API outage"} {
		fmt.Printf(" %s %d/%d;", p, q.lost[p], q.sent[p])
	}
	q.mu.Unlock()
	fmt.Println()
	var refused, failed int64
	for _, f := range fs {
		if f.v1 != nil {
			refused += f.v1.refused.Load()
		}
		failed += f.sink.failed.Load()
	}
	fmt.Printf("slice flips written: %d; lines a version-1 follower refused: %d; stream failures reported by the light followers: %d\n", churned.Load(), refused, failed)
}

// agree pauses the churn, waits for the leaders to settle, and reports
// whether they hold the same content (the digest of their latest state).
func agree(api *apiServer, leaders []*fleetNode) string {
	paused.Store(true)
	defer paused.Store(false)
	time.Sleep(2 * time.Second)
	// a difference is either one still in flight (a leader that started
	// seconds ago, a write the API has not delivered yet) or a leader that
	// missed a change: looked at again with the churn held, the first goes
	// and the second stays
	start := time.Now()
	first := ""
	for {
		var ds []string
		for _, l := range leaders {
			d, _ := leaderView(l)
			ds = append(ds, d)
		}
		differ := -1
		for i, d := range ds[1:] {
			if d != ds[0] {
				differ = i + 1
				break
			}
		}
		switch {
		case differ < 0 && first == "":
			return "yes"
		case differ < 0:
			return fmt.Sprintf("yes after %v more with the churn held; at first no: %s", time.Since(start).Round(time.Second), first)
		case first == "":
			first = strings.Join(ds, " ") + "\n" + recordDiff(leaders[0], leaders[differ])
		case time.Since(start) > 20*time.Second:
			return "no, not after 20 s more with the churn held: " + strings.Join(ds, " ") + "\n" + recordDiff(leaders[0], leaders[differ]) +
				"\n" + staleness(api, leaders)
		}
		time.Sleep(time.Second)
	}
}

// staleness tells, for each record some leader holds unlike the API
// (the ready conditions of its slices' endpoints, read from the API now),
// which leaders hold it as the API does (a few records).
func staleness(api *apiServer, leaders []*fleetNode) string {
	recs := make([]map[string]string, len(leaders))
	for i, l := range leaders {
		_, recs[i] = leaderView(l)
	}
	var out []string
	for k := range recs[0] {
		var r struct{ Namespace, Name string }
		if json.Unmarshal([]byte(k+"}"), &r) != nil || r.Name == "" {
			continue
		}
		differ := false
		for _, m := range recs[1:] {
			differ = differ || m[k] != recs[0][k]
		}
		if !differ || len(out) >= 5 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := api.client.DiscoveryV1().EndpointSlices(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + r.Name})
		cancel()
		if err != nil {
			out = append(out, fmt.Sprintf("  %s/%s: the API: %v", r.Namespace, r.Name, err))
			continue
		}
		var truth []string
		for _, sl := range list.Items {
			c := make([]byte, 0, len(sl.Endpoints))
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					c = append(c, 'y')
				} else {
					c = append(c, 'n')
				}
			}
			truth = append(truth, fmt.Sprintf("%s rv %s ready %s", sl.Name, sl.ResourceVersion, c))
		}
		var holders []string
		for i, m := range recs {
			held := "?"
			if line := m[k]; line != "" {
				held = readyOf(line)
			}
			holders = append(holders, fmt.Sprintf("%s %s", leaders[i].name, held))
		}
		out = append(out, fmt.Sprintf("  %s/%s: the API: %s; the leaders: %s", r.Namespace, r.Name, strings.Join(truth, ", "), strings.Join(holders, ", ")))
	}
	return strings.Join(out, "\n")
}

// readyOf is the first letter of each endpoint's conditions in a record's
// line ("conditions":["yy-",...]: ready, serving, terminating).
func readyOf(line string) string {
	i := strings.Index(line, `"conditions":[`)
	if i < 0 {
		return "?"
	}
	var conds []string
	if json.NewDecoder(strings.NewReader(line[i+len(`"conditions":`):])).Decode(&conds) != nil {
		return "?"
	}
	b := make([]byte, 0, len(conds))
	for _, c := range conds {
		if c != "" {
			b = append(b, c[0])
		}
	}
	return string(b)
}

// recordDiff names the records two leaders hold differently (a few).
func recordDiff(a, b *fleetNode) string {
	_, ra := leaderView(a)
	_, rb := leaderView(b)
	var out []string
	for k, x := range ra {
		if y := rb[k]; x != y && len(out) < 3 {
			// from a little before the first byte that differs
			i := 0
			for i < len(x) && i < len(y) && x[i] == y[i] {
				i++
			}
			i = max(0, i-80)
			out = append(out, fmt.Sprintf("  %s (from byte %d):\n    %s: %.300s\n    %s: %.300s", k, i, a.name, x[min(i, len(x)):], b.name, y[min(i, len(y)):]))
		}
	}
	for k, y := range rb {
		if _, ok := ra[k]; !ok && len(out) < 6 {
			out = append(out, fmt.Sprintf("  %s only on %s: %.300s", k, b.name, y))
		}
	}
	return strings.Join(out, "\n")
}

// leaderView reads a leader's stream (version 3) up to its latest state:
// the opening state, which may be an older whole state the leader reuses
// (replica/leader.go's reusable), then the change batches since, until the
// stream is quiet for quietFor after a synced line. It returns the digest
// of the last synced line and the records then held, by their name
// ({"namespace":…,"name":… of a record; the line itself else). Reading
// only up to the first synced line compared the leaders' reused whole
// encodings, which differ by the generation each happened to encode while
// their current states agree: every look renewed the reuse, and the fleet
// reported leaders apart for good after the rolling restart.
func leaderView(l *fleetNode) (string, map[string]string) {
	const quietFor = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s?v=3", l.replicate, replica.Path), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "error", nil
	}
	defer resp.Body.Close()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(resp.Body, 1<<16)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	m := map[string]string{}
	digest := "error"
	synced := false
	quiet := time.NewTimer(time.Hour)
	defer quiet.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return digest, m
			}
			switch {
			case strings.HasPrefix(line, `{"epoch"`):
				if strings.Contains(line, `"full":true`) {
					clear(m)
				}
			case strings.Contains(line, `"synced":true`):
				if _, d, ok := strings.Cut(line, `"digest":"`); ok {
					digest = d[:min(32, len(d))]
				}
				synced = true
				quiet.Reset(quietFor)
			case strings.HasPrefix(line, `{"namespace"`):
				if i := strings.Index(line, `,"service"`); i > 0 {
					m[line[:i]] = line
				} else if i := strings.Index(line, `,"slices"`); i > 0 {
					m[line[:i]] = line
				} else {
					delete(m, strings.TrimSuffix(strings.TrimSpace(line), "}")) // the name is gone
				}
			}
		case <-quiet.C:
			if synced {
				return digest, m
			}
		}
	}
}

// wholeState is the bytes of the whole state a new follower receives.
func wholeState(url string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &stream{}
	for range 20 {
		if err := openStream(ctx, url, s); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	waitSynced([]*stream{s}, 1, time.Minute)
	cancel()
	return s.bytes.Load()
}

// perSecond is the mean bytes per second of the light followers that
// speak the current protocol (replica.Version; or, v1, of the version-1
// ones) between two totals.
func perSecond(fs []*lightFollower, b, a fleetTotals, v1 bool) float64 {
	var sum float64
	n := 0
	for i, f := range fs {
		if (f.v1 != nil) == v1 {
			sum += float64(a.bytes[i] - b.bytes[i])
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n) / a.at.Sub(b.at).Seconds()
}

// reportDrill prints what the drill cost each follower: the bytes beyond
// the churn's own (the steady rate over the drill's length), as a share
// of a whole state, and the whole states received.
func reportDrill(name string, fs []*lightFollower, b, a fleetTotals, rate float64, whole int64, lat []time.Duration) {
	secs := a.at.Sub(b.at).Seconds()
	for _, v1 := range []bool{false, true} {
		var extra []float64
		var got float64
		wholes, n := 0, 0
		for i, f := range fs {
			if (f.v1 != nil) != v1 {
				continue
			}
			n++
			extra = append(extra, float64(a.bytes[i]-b.bytes[i])-rate*secs)
			got += float64(a.bytes[i] - b.bytes[i])
			if a.wholes[i] > b.wholes[i] {
				wholes++
			}
		}
		if n == 0 {
			continue
		}
		slices.Sort(extra)
		var sum float64
		for _, x := range extra {
			sum += x
		}
		mean := sum / float64(n)
		who := fmt.Sprintf("version-%d followers", replica.Version)
		if v1 {
			who = "version-1 followers"
		}
		fmt.Printf("%-16s (%.0f s) %s: received %.0f bytes each on average, the churn's baseline %.0f; beyond it %.0f (%.2f %% of a whole state), p99 %.0f; %d of %d received a whole state\n",
			name, secs, who, got/float64(n), rate*secs, mean, 100*mean/float64(whole), extra[min(len(extra)-1, len(extra)*99/100)], wholes, n)
	}
	fmt.Printf("%-16s propagation p50 %v p99 %v (%d samples)\n", name, pct(lat, 50), pct(lat, 99), len(lat))
}
