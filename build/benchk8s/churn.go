package main

// -mix churn: both plugins at once on the spec mix while its endpoints
// churn: what a change costs each (CPU, update-to-answer latency, lost
// queries, memory, snapshot bytes).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	churnFor     = flag.Duration("churn", 60*time.Second, "-mix churn: how long the churn lasts")
	churnRate    = flag.Int("churn-rate", 100, "-mix churn: EndpointSlice updates per second")
	churnQPS     = flag.Int("churn-qps", 5000, "-mix churn: dnsperf's fixed query rate, per plugin")
	nodeInterval = flag.Duration("node-status", time.Minute, "-mix churn: every Node's status is written once per this interval")
	sampleShare  = flag.Int("sample-every", 3, "-mix churn: the update-to-answer latency is sampled on every n-th update that adds an endpoint")
	churnFollow  = flag.Bool("churn-follower", false, "-mix churn: endpointsvc also replicates (replicate) to a node-local follower process, whose programming latency is reported too (its CPU is not in the comparison)")
)

// churnPlugin is one plugin's process during the churn.
type churnPlugin struct {
	name                string
	port, ready, prom   int
	latencyMetric       string             // its DNS programming latency histogram
	prog0               map[string]float64 // that histogram's buckets at the start of the churn
	p                   *proc
	cpu0                float64 // CPU seconds at the start of the churn
	cpu, anonEnd        float64
	lat                 []time.Duration // update-to-answer
	timeouts            int
	qps, lost           int
	rcodes              string
	snapBytes, snapWr   float64
	patches, wholeSyncs float64
}

// runChurn is -mix churn.
func runChurn(dir string, api *apiServer) {
	t0 := time.Now()
	o := populateSpec(api.client)
	fmt.Printf("objects: %d namespaces, %d Services (%d ClusterIP, %d headless, %d ExternalName), %d EndpointSlices with %d ready endpoints, %d Nodes; created in %v\n",
		*namespacesN, *services, len(o.clusterIP), len(o.headless), len(o.external), o.slices, o.endpoints, *nodes, time.Since(t0).Round(time.Millisecond))
	load, checks := specQueries(o, 20000)
	queries := filepath.Join(dir, "queries-spec.txt")
	writeQueries(queries, load)

	variants := specVariants(api.kubeconfig)
	var ps []*churnPlugin
	rp := freePort() // -churn-follower: the leader's stream
	if *churnFollow {
		variants["endpointsvc"] = strings.Replace(variants["endpointsvc"], "        ttl 30\n", fmt.Sprintf("        ttl 30\n        replicate 127.0.0.1:%d\n", rp), 1)
	}
	for _, name := range []string{"endpointsvc", "kubernetes"} {
		x := &churnPlugin{name: name, port: freePort(), ready: freePort(), prom: freePort(), latencyMetric: "coredns_" + name + "_dns_programming_duration_seconds"}
		corefile := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n%s}\n", x.port, x.ready, x.prom, variants[name])
		cf := filepath.Join(dir, "Corefile.churn."+name)
		if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
			fail("%v", err)
		}
		x.p = start(dir, "taskset", "-c", "0", *meshdns, "-conf", cf)
		ps = append(ps, x)
	}
	for _, x := range ps {
		waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", x.ready), x.p, 180*time.Second)
	}
	var follower *proc
	followerProm := 0
	if *churnFollow {
		follower, followerProm, _ = startReplicaNode(dir, "churn-follower", "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source replica http://127.0.0.1:"+fmt.Sprint(rp)+
			"\n        schema kubernetes\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n")
	}
	time.Sleep(3 * time.Second)
	a, _ := answers(ps[0].port, checks)
	b, _ := answers(ps[1].port, checks)
	differ := 0
	for _, q := range checks {
		if a[q] != b[q] {
			differ++
		}
	}
	fmt.Printf("both synced; %d of %d checked names answer differently before the churn\n", differ, len(checks))

	ctx := context.Background()
	list, err := api.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("listing slices: %v", err)
	}
	var sls []*discoveryv1.EndpointSlice
	for i := range list.Items {
		if len(list.Items[i].Endpoints) > 0 {
			sls = append(sls, &list.Items[i])
		}
	}
	for _, x := range ps {
		x.cpu0 = cpuSeconds(x.p.cmd.Process.Pid)
		x.snapBytes = -metric(x.prom, "coredns_endpointsvc_snapshot_written_bytes_total")
		x.snapWr = -metric(x.prom, "coredns_endpointsvc_snapshot_writes_total")
		x.patches = -metric(x.prom, "coredns_endpointsvc_syncs_total", `result="patched"`)
		x.wholeSyncs = -metric(x.prom, "coredns_endpointsvc_syncs_total", `result="updated"`)
		x.prog0 = buckets(x.prom, x.latencyMetric)
	}
	var followerProg0 map[string]float64
	if follower != nil {
		followerProg0 = buckets(followerProm, "coredns_endpointsvc_dns_programming_duration_seconds")
	}
	fmt.Printf("churn: %v of %d EndpointSlice updates/s over %d slices (an endpoint turns ready/unready, is added or removed), every Node's status written once per %v, dnsperf at %d qps on each plugin\n",
		*churnFor, *churnRate, len(sls), *nodeInterval, *churnQPS)

	var wg sync.WaitGroup
	for _, x := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.qps, x.lost, x.rcodes = fixedLoad(x.port, queries, int(churnFor.Seconds()))
		}()
	}
	stop := time.Now().Add(*churnFor)
	wg.Add(1)
	go func() { defer wg.Done(); nodeStatus(api, stop) }()
	updates, samples := driveSlices(api, sls, ps, stop)
	wg.Wait()
	samples.Wait()
	for _, x := range ps {
		pid := x.p.cmd.Process.Pid
		x.cpu = cpuSeconds(pid) - x.cpu0
		x.anonEnd = statusMiB(pid, "RssAnon")
		x.snapBytes += metric(x.prom, "coredns_endpointsvc_snapshot_written_bytes_total")
		x.snapWr += metric(x.prom, "coredns_endpointsvc_snapshot_writes_total")
		x.patches += metric(x.prom, "coredns_endpointsvc_syncs_total", `result="patched"`)
		x.wholeSyncs += metric(x.prom, "coredns_endpointsvc_syncs_total", `result="updated"`)
	}
	// do they still agree? (a moment for the last updates)
	time.Sleep(2 * time.Second)
	a, _ = answers(ps[0].port, checks)
	b, _ = answers(ps[1].port, checks)
	differ = 0
	for _, q := range checks {
		if a[q] != b[q] {
			if differ < 3 {
				fmt.Printf("after the churn %s %s: endpointsvc %q, kubernetes %q\n", q.name, dns.TypeToString[q.qtype], a[q], b[q])
			}
			differ++
		}
	}
	fmt.Printf("%d slice updates in %v; after the churn %d of %d checked names answer differently\n", updates, churnFor.String(), differ, len(checks))
	for _, x := range ps {
		fmt.Printf("%-12s CPU %.2f s; update-to-answer p50 %v p99 %v max %v (%d samples, %d not answered within 10 s); dnsperf %d qps, %d lost, %s; anonymous RSS at the end %.1f MiB",
			x.name, x.cpu, pct(x.lat, 50), pct(x.lat, 99), pct(x.lat, 100), len(x.lat), x.timeouts, x.qps, x.lost, x.rcodes, x.anonEnd)
		if x.name == "endpointsvc" {
			fmt.Printf("; %v patches, %v whole builds; snapshot %d writes, %.1f MiB written (%.0f KiB/s)", x.patches, x.wholeSyncs, int(x.snapWr), x.snapBytes/(1<<20), x.snapBytes/1024/churnFor.Seconds())
		}
		fmt.Println()
		if *logs != "" {
			_ = os.WriteFile(filepath.Join(*logs, x.name+"-churn.log"), x.p.log.Bytes(), 0o644)
		}
	}
	// DNS programming latency: each plugin's own histogram, the churn's
	// observations only (the stock plugin's first list is in +Inf)
	progs := map[string]map[string]float64{}
	for _, x := range ps {
		progs[x.name] = bucketsSince(x.prog0, buckets(x.prom, x.latencyMetric))
	}
	if follower != nil {
		progs["follower"] = bucketsSince(followerProg0, buckets(followerProm, "coredns_endpointsvc_dns_programming_duration_seconds"))
		follower.stop()
	}
	for _, name := range []string{"endpointsvc", "follower", "kubernetes"} {
		if b, ok := progs[name]; ok {
			fmt.Printf("%-12s DNS programming latency (its histogram, all kinds): %d observations, p50 %v, p99 %v\n", name, int(b["+Inf"]), histQuantile(b, 0.5), histQuantile(b, 0.99))
		}
	}
	e, k := ps[0], ps[1]
	fmt.Printf("\n| figure | goal | endpointsvc | kubernetes | ratio |\n|---|---|---:|---:|---:|\n")
	fmt.Printf("| CPU seconds of the server process | ≤ 1 | %.2f | %.2f | **%.2f** |\n", e.cpu, k.cpu, e.cpu/k.cpu)
	fmt.Printf("| update-to-answer p50 | | %v | %v | |\n", pct(e.lat, 50), pct(k.lat, 50))
	fmt.Printf("| update-to-answer p99 | ≤ 1 s | %v | %v | |\n", pct(e.lat, 99), pct(k.lat, 99))
	fmt.Printf("| DNS programming latency p50 (own histogram) | | %v | %v | |\n", histQuantile(progs["endpointsvc"], 0.5), histQuantile(progs["kubernetes"], 0.5))
	fmt.Printf("| DNS programming latency p99 (own histogram) | | %v | %v | |\n", histQuantile(progs["endpointsvc"], 0.99), histQuantile(progs["kubernetes"], 0.99))
	fmt.Printf("| lost queries (dnsperf) | 0 | %d | %d | |\n", e.lost, k.lost)
	fmt.Printf("| response codes | no SERVFAIL | %s | %s | |\n", e.rcodes, k.rcodes)
	fmt.Printf("| anonymous RSS at the end | | %.1f MiB | %.1f MiB | %.2f |\n", e.anonEnd, k.anonEnd, e.anonEnd/k.anonEnd)
	fmt.Printf("| snapshot written | ≤ 1 write/s | %d writes, %.1f MiB (%.0f KiB/s) | none | |\n", int(e.snapWr), e.snapBytes/(1<<20), e.snapBytes/1024/churnFor.Seconds())
	for _, x := range ps {
		x.p.stop()
	}
}

// driveSlices updates slices at -churn-rate until stop, on 4 workers each
// owning a quarter of the slices (so that no two updates of one slice race),
// and samples the update-to-answer latency of added endpoints on every
// plugin. A slice with a sample outstanding is left alone until it is
// answered, so that no later update hides the change being timed.
func driveSlices(api *apiServer, sls []*discoveryv1.EndpointSlice, ps []*churnPlugin, stop time.Time) (int, *sync.WaitGroup) {
	const workers = 4
	tokens := make(chan struct{}, *churnRate)
	go func() {
		t := time.NewTicker(time.Second / time.Duration(*churnRate))
		defer t.Stop()
		for time.Now().Before(stop) {
			<-t.C
			select {
			case tokens <- struct{}{}:
			default: // the workers are behind: the rate is what they manage
			}
		}
		close(tokens)
	}()
	var mu sync.Mutex
	busy := map[*discoveryv1.EndpointSlice]bool{}
	samples := &sync.WaitGroup{}
	var done sync.WaitGroup
	count := 0
	fresh := 0
	for w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var mine []*discoveryv1.EndpointSlice
			for i := w; i < len(sls); i += workers {
				mine = append(mine, sls[i])
			}
			adds := 0
			for range tokens {
				var sl *discoveryv1.EndpointSlice
				for range 10 {
					c := mine[rng.IntN(len(mine))]
					mu.Lock()
					b := busy[c]
					mu.Unlock()
					if !b {
						sl = c
						break
					}
				}
				if sl == nil {
					continue
				}
				added := ""
				switch op := rng.IntN(3); {
				case op == 0 || (op == 2 && len(sl.Endpoints) <= 1):
					e := &sl.Endpoints[rng.IntN(len(sl.Endpoints))]
					r := e.Conditions.Ready == nil || *e.Conditions.Ready
					e.Conditions.Ready, e.Conditions.Serving = ptrTo(!r), ptrTo(!r)
				case op == 1:
					mu.Lock()
					fresh++
					n := fresh
					mu.Unlock()
					added = fmt.Sprintf("10.%d.%d.%d", 200+n/65536, n/256%256, n%256)
					e := sl.Endpoints[0]
					e.Addresses = []string{added}
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(true)}
					if e.Hostname != nil {
						e.Hostname = ptrTo(fmt.Sprintf("fresh-%d", n))
					}
					sl.Endpoints = append(sl.Endpoints, e)
				default:
					i := rng.IntN(len(sl.Endpoints))
					sl.Endpoints = slices.Delete(sl.Endpoints, i, i+1)
				}
				at := time.Now()
				if sl.Annotations == nil {
					sl.Annotations = map[string]string{}
				}
				sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = at.UTC().Format(time.RFC3339Nano) // as the endpoint slice controller writes it
				up, err := api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Update(context.Background(), sl, metav1.UpdateOptions{})
				if apierrors.IsConflict(err) {
					if cur, gerr := api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Get(context.Background(), sl.Name, metav1.GetOptions{}); gerr == nil {
						*sl = *cur
					}
					continue
				}
				if err != nil {
					fail("updating slice %s/%s: %v", sl.Namespace, sl.Name, err)
				}
				*sl = *up
				mu.Lock()
				count++
				mu.Unlock()
				if added == "" {
					continue
				}
				if adds++; adds%*sampleShare != 0 {
					continue
				}
				mu.Lock()
				busy[sl] = true
				mu.Unlock()
				var left sync.WaitGroup
				for _, x := range ps {
					left.Add(1)
					samples.Add(1)
					go func() {
						defer samples.Done()
						defer left.Done()
						d, ok := untilAnswered(x.port, added, at)
						mu.Lock()
						if ok {
							x.lat = append(x.lat, d)
						} else {
							x.timeouts++
						}
						mu.Unlock()
					}()
				}
				go func() {
					left.Wait()
					mu.Lock()
					delete(busy, sl)
					mu.Unlock()
				}()
			}
		}()
	}
	done.Wait()
	return count, samples
}

// untilAnswered asks for the PTR record of ip every 5 ms until it is
// answered (NOERROR with a record), at most 10 s after at.
func untilAnswered(port int, ip string, at time.Time) (time.Duration, bool) {
	name, _ := dns.ReverseAddr(ip)
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypePTR)
	for time.Since(at) < 10*time.Second {
		r, _, err := c.Exchange(m, fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return time.Since(at), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, false
}

// nodeStatus writes every Node's status (a heartbeat) once per
// -node-status interval, spread evenly, until stop.
func nodeStatus(api *apiServer, stop time.Time) {
	every := *nodeInterval / time.Duration(max(1, *nodes))
	for i := 0; time.Now().Before(stop); i++ {
		name := fmt.Sprintf("node-%d", i%*nodes)
		n, err := api.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			for j := range n.Status.Conditions {
				if n.Status.Conditions[j].Type == corev1.NodeReady {
					n.Status.Conditions[j].LastHeartbeatTime = metav1.Now()
				}
			}
			_, err = api.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		}
		if err != nil && !apierrors.IsConflict(err) {
			fail("node status %s: %v", name, err)
		}
		time.Sleep(every)
	}
}

// fixedLoad runs dnsload at -churn-qps for secs and returns the QPS, the
// lost queries and dnsperf's response codes.
func fixedLoad(port int, queries string, secs int) (qps, lost int, codes string) {
	cmd := exec.Command(*dnsload, "127.0.0.1", strconv.Itoa(port), queries, strconv.Itoa(secs))
	cmd.Env = append(os.Environ(), "DNSLOAD_QPS="+strconv.Itoa(*churnQPS), "DNSLOAD_Q=100")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		fail("dnsload: %v\n%s%s", err, out, stderr.String())
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Response codes:"); ok {
			codes = strings.Join(strings.Fields(v), " ")
		}
	}
	ls := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, f := range strings.Fields(ls[len(ls)-1]) {
		if v, ok := strings.CutPrefix(f, "qps="); ok {
			qps, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(f, "lost="); ok {
			lost, _ = strconv.Atoi(v)
		}
	}
	return qps, lost, codes
}

// cpuSeconds is the CPU time pid has used, user and system, in every
// thread it ran: its process CPU clock (clock_gettime of the clock of
// another process, in nanoseconds), so that a phase of a dozen ticks is
// not rounded to whole ticks twice. /proc/PID/stat's clock ticks of
// 1/100 s when the clock cannot be read.
func cpuSeconds(pid int) float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^pid)<<3|2, &ts); err == nil { // CPUCLOCK_SCHED of the whole process
		return float64(ts.Sec) + float64(ts.Nsec)/1e9
	}
	f := procStat(pid)
	ut, _ := strconv.ParseFloat(f[11], 64) // field 14 of the whole line
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// metric is the sum of the samples of a metric with every one of labels.
func metric(port int, name string, labels ...string) float64 {
	b := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	var sum float64
	for _, l := range strings.Split(b, "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		all := true
		for _, x := range labels {
			all = all && strings.Contains(rest, x)
		}
		if f := strings.Fields(rest); all && len(f) > 0 {
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// pct is the p-th percentile of ds (p 100: the largest).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, len(s)*p/100)
	return s[i].Round(time.Millisecond)
}

func ptrTo[T any](v T) *T { return &v }

// httpGet returns the body at url, or "" when it cannot be fetched.
func httpGet(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// buckets are a histogram's cumulative bucket counts by le ("+Inf"
// too), every label set summed.
func buckets(port int, name string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)), "\n") {
		rest, ok := strings.CutPrefix(l, name+"_bucket{")
		if !ok {
			continue
		}
		_, le, ok := strings.Cut(rest, `le="`)
		if !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		f := strings.Fields(rest)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[le] += v
	}
	return out
}

// bucketsSince is end's counts less start's.
func bucketsSince(start, end map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(end))
	for le, v := range end {
		out[le] = v - start[le]
	}
	return out
}

// histQuantile is the q-quantile of cumulative buckets, interpolated
// linearly inside its bucket as PromQL's histogram_quantile does; 0 with
// no observation, the last finite bound when it falls in +Inf.
func histQuantile(b map[string]float64, q float64) time.Duration {
	total := b["+Inf"]
	if total <= 0 {
		return 0
	}
	type bucket struct{ le, n float64 }
	var bs []bucket
	for le, n := range b {
		if v, err := strconv.ParseFloat(le, 64); err == nil && le != "+Inf" {
			bs = append(bs, bucket{v, n})
		}
	}
	slices.SortFunc(bs, func(x, y bucket) int { return cmpFloat(x.le, y.le) })
	rank, lo, below := q*total, 0.0, 0.0
	for _, x := range bs {
		if x.n >= rank {
			frac := 0.0
			if x.n > below {
				frac = (rank - below) / (x.n - below)
			}
			return time.Duration((lo + (x.le-lo)*frac) * float64(time.Second)).Round(time.Millisecond)
		}
		lo, below = x.le, x.n
	}
	return time.Duration(lo * float64(time.Second))
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// minorFaults is the minor page faults pid took so far (/proc's field 10).
func minorFaults(pid int) float64 {
	n, _ := strconv.ParseFloat(procStat(pid)[7], 64) // field 10 of the whole line
	return n
}

// procStat is pid's /proc stat line from its state on (field 3): the
// fields after the command, which may hold spaces.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fail("%v", err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}
