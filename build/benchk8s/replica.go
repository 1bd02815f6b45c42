package main

// -mix replica: the replication stream (endpointsvc `replicate`, `source
// replica`) on the spec mix: a leader (the cluster DNS stanza with
// replicate, on core 0) over the real API server, the bytes of a whole
// state, a node-local follower's memory, and what a change costs the
// leader when it fans out to many streams.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	replicaStreams = flag.Int("streams", 200, "-mix replica: streams opened on the leader by readers that only count (in-process followers)")
	replicaChanges = flag.Int("changes", 40, "-mix replica: changes of each kind (a Service edit, an endpoint flip) per measurement")
)

// stream is one raw reader of the leader's stream.
type stream struct {
	bytes  atomic.Int64
	synced atomic.Int64 // synced lines seen
}

// openStream reads url's stream into s until ctx ends.
func openStream(ctx context.Context, url string, s *stream) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	go func() {
		defer resp.Body.Close()
		br := bufio.NewReaderSize(resp.Body, 1<<16)
		for {
			line, err := br.ReadSlice('\n')
			s.bytes.Add(int64(len(line)))
			if strings.Contains(string(line), `"synced":true`) {
				s.synced.Add(1)
			}
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}()
	return nil
}

// waitSynced waits until every stream has seen at least n synced lines.
func waitSynced(ss []*stream, n int64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, s := range ss {
		for s.synced.Load() < n {
			if time.Now().After(deadline) {
				fail("a stream saw %d synced lines after %v, want %d", s.synced.Load(), timeout, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// replicaRun is one measurement of changes fanned out to streams.
type replicaRun struct {
	cpu      float64         // leader CPU seconds per change
	bytes    float64         // bytes per stream per change
	edit     float64         // bytes of a Service edit on one stream
	flip     float64         // bytes of an endpoint flip on one stream
	latency  []time.Duration // API write to the last stream's synced line
	anonDiff float64         // leader's anonymous RSS growth while the streams are open, MiB
}

// runReplica is -mix replica.
func runReplica(dir string, api *apiServer) {
	t0 := time.Now()
	o := populateSpec(api.client)
	fmt.Printf("objects: %d namespaces, %d Services (%d ClusterIP, %d headless, %d ExternalName), %d EndpointSlices with %d ready endpoints, %d Nodes; created in %v\n",
		*namespacesN, *services, len(o.clusterIP), len(o.headless), len(o.external), o.slices, o.endpoints, *nodes, time.Since(t0).Round(time.Millisecond))

	rp := freePort()
	leader, lprom, lpp := startReplicaNode(dir, "leader", "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source kubernetes "+api.kubeconfig+
		"\n        schema kubernetes\n        pods insecure\n        snapshot leader.snapshot.json\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n        replicate 127.0.0.1:"+fmt.Sprint(rp)+"\n    }\n")
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/replicate", rp)
	lpid := leader.cmd.Process.Pid
	time.Sleep(2 * time.Second)
	lm := measure(lpid)
	fmt.Printf("leader (cluster DNS stanza + replicate): anonymous RSS %.1f MiB after sync, live heap %.1f MiB\n", lm.anon, heapMiB(lprom))

	// a whole state, as a follower without a table receives it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	one := &stream{}
	start0 := time.Now()
	if err := openStream(ctx, url, one); err != nil {
		fail("%v", err)
	}
	waitSynced([]*stream{one}, 1, time.Minute)
	fmt.Printf("whole state: %d bytes (%.1f MiB), received in %v\n", one.bytes.Load(), float64(one.bytes.Load())/(1<<20), time.Since(start0).Round(time.Millisecond))

	// a node-local follower: its memory at this size
	follower, fprom, fpp := startReplicaNode(dir, "follower", "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source replica http://127.0.0.1:"+fmt.Sprint(rp)+
		"\n        schema kubernetes\n        pods insecure\n        snapshot follower.snapshot.json\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n")
	time.Sleep(3 * time.Second)
	fm := measure(follower.cmd.Process.Pid)
	fheap := heapMiB(fprom)
	gc(fpp)
	fmt.Printf("follower (node-local stanza, source replica): anonymous RSS %.1f MiB (RSS %.1f) 3 s after /ready, live heap %.1f MiB (%.1f after a GC); snapshot %d bytes\n",
		fm.anon, fm.rss, fheap, heapMiB(fprom), fileSize(filepath.Join(dir, "follower.snapshot.json")))

	replicaFanOut(ctx, api, url, leader, lprom, lpp, pickService(o), one)
}

// replicaFanOut measures the changes with the one stream open, then opens
// -streams more at once (each gets the whole state) and measures them
// again: the leader's cost per stream.
func replicaFanOut(ctx context.Context, api *apiServer, url string, leader *proc, lprom, lpp int, svc *specService, one *stream) {
	lpid := leader.cmd.Process.Pid
	streams := []*stream{one}
	base := replicaMeasure(api, lpid, svc, streams)
	printReplicaRun("1 stream", 1, base)

	// many followers at once, each asking for the whole state (as after
	// the replica they followed went away)
	time.Sleep(2 * time.Second)
	gc(lpp)
	heap0, anon0, cpu0 := heapMiB(lprom), statusMiB(lpid, "RssAnon"), cpuSeconds(lpid)
	more := make([]*stream, *replicaStreams)
	at := time.Now()
	for i := range more {
		more[i] = &stream{}
		if err := openStream(ctx, url, more[i]); err != nil {
			fail("%v", err)
		}
	}
	waitSynced(more, 1, 5*time.Minute)
	fmt.Printf("%d followers asking for the whole state at once: all received in %v, %.2f s of leader CPU (%.1f ms each)\n",
		len(more), time.Since(at).Round(time.Millisecond), cpuSeconds(lpid)-cpu0, (cpuSeconds(lpid)-cpu0)*1e3/float64(len(more)))
	streams = append(streams, more...)
	time.Sleep(2 * time.Second)
	gc(lpp)
	heap1, anon1 := heapMiB(lprom), statusMiB(lpid, "RssAnon")
	fan := replicaMeasure(api, lpid, svc, streams)
	fan.anonDiff = anon1 - anon0
	printReplicaRun(fmt.Sprintf("%d streams", len(streams)), len(streams), fan)
	per := (fan.cpu - base.cpu) / float64(len(more))
	perHeap := (heap1 - heap0) * 1024 / float64(len(more))
	fmt.Printf("per stream and change: %.1f µs of leader CPU, %.0f bytes; per open stream: %.1f KiB of live heap (after a GC; anonymous RSS grew %.1f MiB for the %d)\n",
		per*1e6, fan.bytes, perHeap, fan.anonDiff, len(more))
	fmt.Printf("extrapolated to 1,000 followers (one leader; with 3 replicas each serves a third): %.1f ms of CPU and %.0f KiB sent per change, %.1f MiB of live heap for the streams; heartbeats %d B/s\n",
		(base.cpu+1000*per)*1e3, 1000*fan.bytes/1024, 1000*perHeap/1024, 1000*len(`{"gen":12345}`+"\n")/10)
	fmt.Printf("leader after the run: sent %v bytes in all, streams %v\n", metric(lprom, "coredns_endpointsvc_replicate_sent_bytes_total"), metric(lprom, "coredns_endpointsvc_replicate_streams"))
}

// startReplicaNode runs meshdns with block in a server block of its own
// (on core 0), waits until it is ready, and returns it with its
// prometheus and pprof ports.
func startReplicaNode(dir, name, block string) (*proc, int, int) {
	port, ready, prom, pp := freePort(), freePort(), freePort(), freePort()
	corefile := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n    pprof 127.0.0.1:%d\n%s}\n", port, ready, prom, pp, block)
	cf := filepath.Join(dir, "Corefile.replica."+name)
	if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
		fail("%v", err)
	}
	p := start(dir, "taskset", "-c", "0", *meshdns, "-conf", cf)
	waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", ready), p, 180*time.Second)
	return p, prom, pp
}

// pickService is a ClusterIP Service with ten endpoints (the mix's mean),
// or the first one.
func pickService(o *specObjects) *specService {
	for _, s := range o.clusterIP {
		if s.eps == 10 {
			return s
		}
	}
	return o.clusterIP[0]
}

// replicaMeasure makes -changes Service edits (its first port's number)
// and as many endpoint flips (its first endpoint's ready condition), one
// at a time, each waited for on every stream.
func replicaMeasure(api *apiServer, lpid int, s *specService, ss []*stream) (r replicaRun) {
	ctx := context.Background()
	var bytes0 int64
	for _, x := range ss {
		bytes0 += x.bytes.Load()
	}
	cpu0 := cpuSeconds(lpid)
	var edit, flip int64
	for i := range 2 * *replicaChanges {
		b0 := ss[0].bytes.Load()
		want := ss[0].synced.Load() + 1
		for _, x := range ss[1:] {
			want = min(want, x.synced.Load()+1)
		}
		at := time.Now()
		if i%2 == 0 {
			svc, err := api.client.CoreV1().Services(s.ns).Get(ctx, s.name, metav1.GetOptions{})
			if err != nil {
				fail("%v", err)
			}
			svc.Spec.Ports[0].Port = 8000 + int32(i%1000)
			if _, err := api.client.CoreV1().Services(s.ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
				fail("%v", err)
			}
		} else {
			sls, err := api.client.DiscoveryV1().EndpointSlices(s.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.name})
			if err != nil || len(sls.Items) == 0 {
				fail("slices of %s: %v", s.name, err)
			}
			sl := &sls.Items[0]
			ready := sl.Endpoints[0].Conditions.Ready == nil || *sl.Endpoints[0].Conditions.Ready
			sl.Endpoints[0].Conditions.Ready = ptrTo(!ready)
			if _, err := api.client.DiscoveryV1().EndpointSlices(s.ns).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
				fail("%v", err)
			}
		}
		waitSynced(ss, want, 30*time.Second)
		r.latency = append(r.latency, time.Since(at))
		if i%2 == 0 {
			edit += ss[0].bytes.Load() - b0
		} else {
			flip += ss[0].bytes.Load() - b0
		}
	}
	n := float64(2 * *replicaChanges)
	r.edit, r.flip = float64(edit)/float64(*replicaChanges), float64(flip)/float64(*replicaChanges)
	r.cpu = (cpuSeconds(lpid) - cpu0) / n
	var bytes1 int64
	for _, x := range ss {
		bytes1 += x.bytes.Load()
	}
	r.bytes = float64(bytes1-bytes0) / float64(len(ss)) / n
	return r
}

func printReplicaRun(what string, n int, r replicaRun) {
	fmt.Printf("%-12s %d changes (Service edits and endpoint flips of a 10-endpoint Service, one at a time): leader CPU %.2f ms per change, %.0f bytes per stream per change (a Service edit %.0f, an endpoint flip %.0f), API write to the last of %d streams p50 %v p99 %v\n",
		what, len(r.latency), r.cpu*1e3, r.bytes, r.edit, r.flip, n, pct(r.latency, 50), pct(r.latency, 99))
}
