package main

// -mix changes: the CPU a change costs each process (issue 32): the
// headless objects of -mix headless (BENCH_SERVICES=1500 BENCH_NODES=100:
// 15,000 endpoints), the stock kubernetes plugin and endpointsvc with
// schema kubernetes and with addresses endpoint (schema orch), each with
// and without its snapshot, every one its own meshdns on core 0, all at
// once; then -flips endpoint readiness flips (real changes), then
// -noop-patches annotation patches (Services and EndpointSlices alike)
// and -heartbeats Node status writes, which change no answer (with
// -idle-secs, a phase without writes first). Prints the CPU ticks (1/100
// s, from the process's CPU clock: cpuSeconds) each process spent in each
// phase, with its ratio to the stock plugin's. The stock plugin runs
// twice, first and last of the processes (the order in which they get a
// watch event, and their place on the core, move a process's figure by
// a few percent): the ratios are to the mean of the two, and the two
// stock rows' own ratios show how far a run's noise goes.

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	flips         = flag.Int("flips", 400, "-mix changes: endpoint readiness flips (real changes) per round")
	noopPatches   = flag.Int("noop-patches", 600, "-mix changes: annotation patches per round (no answer changes)")
	heartbeats    = flag.Int("heartbeats", 100, "-mix changes: Node status writes per round (no answer changes)")
	changeRate    = flag.Int("change-rate", 40, "-mix changes: API writes per second")
	meshdnsBefore = flag.String("meshdns-before", "", "-mix changes: a second meshdns binary (the build before a change), whose endpointsvc variants run in the same run")
	beforeFirst   = flag.Bool("before-first", false, "-mix changes: put each variant's -meshdns-before process before the new one (a pair of runs, one each way, cancels the slot's bias)")
	idleSecs      = flag.Int("idle-secs", 0, "-mix changes: seconds of a phase without writes before each round's changes (0: none), for what a process costs when nothing happens")
	warmup        = flag.Int("warmup", 1, "-mix changes: rounds run before the counted ones and not counted (a process's heap settles after its start: the runtime returns memory it no longer needs, which the first rounds then fault back in, ~40 µs a page in a VM, at a different moment in each process)")
)

// changeProc is one variant's process.
type changeProc struct {
	name, bin, block string
	port, prom, pp   int
	p                *proc
	real, noop, idle []float64 // CPU ticks per round
	realGC, noopGC   float64   // GC cycles over the rounds' phases
	realPF, noopPF   float64   // minor page faults over the rounds' phases
	realMB, noopMB   float64   // MB allocated over the rounds' phases
}

// runChanges is -mix changes.
func runChanges(dir string, api *apiServer) {
	t0 := time.Now()
	populate(api.client)
	fmt.Printf("objects: %d headless Services, %d EndpointSlices x %d endpoints, %d Nodes; created in %v\n",
		*services, *services, *perSvc, *nodes, time.Since(t0).Round(time.Millisecond))
	ps := changeVariants(dir, api.kubeconfig)
	for _, x := range ps {
		corefile := fmt.Sprintf("cluster.local:%d {\n    bind 127.0.0.1\n    prometheus 127.0.0.1:%d\n    pprof 127.0.0.1:%d\n%s}\n", x.port, x.prom, x.pp, x.block)
		cf := filepath.Join(dir, "Corefile.changes."+strings.NewReplacer(" ", "-", "+", "-").Replace(x.name))
		if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
			fail("%v", err)
		}
		x.p = start(dir, "taskset", "-c", "0", x.bin, "-conf", cf)
	}
	names := make([]specQuery, 0, 50)
	for i := 0; i < *services; i += max(1, *services/50) {
		names = append(names, specQuery{name: fmt.Sprintf("svc-%d.bench.svc.cluster.local.", i), qtype: dns.TypeA})
	}
	last := fmt.Sprintf("svc-%d.bench.svc.cluster.local.", *services-1)
	for _, x := range ps {
		deadline := time.Now().Add(180 * time.Second)
		for answerCount(x.port, last) != *perSvc {
			if time.Now().After(deadline) {
				fail("%s: %s not answered in full after 180 s\n%s", x.name, last, tail(x.p.log.String()))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(5 * time.Second) // the first snapshots written, the start-up's garbage collected
	sls, svcs := changeObjects(api)
	for w := 1; w <= *warmup; w++ { // the writes of a round, not counted
		fmt.Printf("warm-up round %d of %d (not counted)\n", w, *warmup)
		flipEndpoints(api, sls, -w)
		noopWrites(api, sls, svcs, -w)
	}
	if *warmup > 0 {
		time.Sleep(3 * time.Second)
	}
	for r := 1; r <= *rounds; r++ {
		fmt.Printf("round %d: %d readiness flips at %d/s, then %d annotation patches and %d Node heartbeats at %d/s\n", r, *flips, *changeRate, *noopPatches, *heartbeats, *changeRate)
		if *idleSecs > 0 {
			changePhase(ps, r, "idle", func() { time.Sleep(time.Duration(*idleSecs) * time.Second) }, func(x *changeProc, t float64, _ phaseCounts) { x.idle = append(x.idle, t) })
		}
		changePhase(ps, r, "real", func() { flipEndpoints(api, sls, r) }, func(x *changeProc, t float64, n phaseCounts) {
			x.real, x.realGC, x.realPF, x.realMB = append(x.real, t), x.realGC+n.gcs, x.realPF+n.faults, x.realMB+n.mb
		})
		changePhase(ps, r, "noop", func() { noopWrites(api, sls, svcs, r) }, func(x *changeProc, t float64, n phaseCounts) {
			x.noop, x.noopGC, x.noopPF, x.noopMB = append(x.noop, t), x.noopGC+n.gcs, x.noopPF+n.faults, x.noopMB+n.mb
		})
	}
	agreeWithStock(ps, names)
	printChanges(ps)
	for _, x := range ps {
		if *logs != "" {
			_ = os.WriteFile(filepath.Join(*logs, strings.ReplaceAll(x.name, " ", "-")+"-changes.log"), x.p.log.Bytes(), 0o644)
		}
		x.p.stop()
	}
}

// changeVariants are the processes: the stock plugin, then endpointsvc's
// models with and without a snapshot (and those of -meshdns-before).
func changeVariants(dir, kc string) []*changeProc {
	dnsBlock := func(snap string) string {
		return "    endpointsvc cluster.local {\n        source kubernetes " + kc + "\n        schema kubernetes\n" + snap + "    }\n"
	}
	orchBlock := func(snap string) string {
		return "    endpointsvc svc.cluster.local {\n        source kubernetes " + kc + "\n        addresses endpoint\n" + snap + "    }\n"
	}
	ps := []*changeProc{{name: "kubernetes", bin: *meshdns, block: "    kubernetes cluster.local {\n        kubeconfig " + kc + "\n    }\n"}}
	bins := [][2]string{{"", *meshdns}}
	if *meshdnsBefore != "" {
		bins = append(bins, [2]string{"before ", *meshdnsBefore})
		if *beforeFirst {
			bins[0], bins[1] = bins[1], bins[0]
		}
	}
	// each variant's binaries side by side (new, before; -before-first:
	// before, new): a process's place in the order moves its figure (two
	// identical stock processes, first and last, differ by up to 0.1, one
	// binary's variants in an early and a late block by as much, and the
	// same code in a variant's two places by up to 0.11), so the two
	// binaries of a variant sit next to each other rather than in two
	// blocks, and a comparison takes a run each way
	for _, m := range []struct {
		name  string
		block func(string) string
	}{{"schema kubernetes", dnsBlock}, {"addresses endpoint", orchBlock}} {
		for _, withSnap := range []bool{true, false} {
			for _, b := range bins {
				x := &changeProc{name: b[0] + m.name, bin: b[1], block: m.block("")}
				if withSnap {
					tag := strings.NewReplacer(" ", "-").Replace(b[0] + m.name)
					x.name += " +snapshot"
					x.block = m.block("        snapshot " + filepath.Join(dir, tag+".snapshot") + "\n")
				}
				ps = append(ps, x)
			}
		}
	}
	ps = append(ps, &changeProc{name: "kubernetes (last)", bin: *meshdns, block: ps[0].block})
	for _, x := range ps {
		x.port, x.prom, x.pp = freePort(), freePort(), freePort()
	}
	return ps
}

// changeObjects lists the slices and Services the phases write.
func changeObjects(api *apiServer) ([]*discoveryv1.EndpointSlice, []string) {
	list, err := api.client.DiscoveryV1().EndpointSlices("bench").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		fail("listing slices: %v", err)
	}
	sls := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		sls[i] = &list.Items[i]
	}
	svcs := make([]string, *services)
	for i := range svcs {
		svcs[i] = fmt.Sprintf("svc-%d", i)
	}
	return sls, svcs
}

// changePhase runs work and hands each process the CPU ticks it spent from
// just before until 3 s after (the last patch, its snapshot write and the
// garbage it made), and the GC cycles it ran meanwhile: a cycle costs a
// tick or more, so one more or less in a round moves its figure (the
// scrapes that count them are outside the CPU's window), and the minor
// page faults it took (memory the runtime had returned to the kernel and
// touched again: each costs a kernel entry and a zeroed page) and the
// bytes it allocated (what makes GC cycles and faults). With -profile, a
// CPU profile of each endpointsvc process covers the work.
func changePhase(ps []*changeProc, round int, what string, work func(), keep func(x *changeProc, ticks float64, n phaseCounts)) {
	cpu0, gc0, pf0, mb0 := make([]float64, len(ps)), make([]float64, len(ps)), make([]float64, len(ps)), make([]float64, len(ps))
	for i, x := range ps {
		gc0[i] = metric(x.prom, "go_gc_duration_seconds_count")
		mb0[i] = metric(x.prom, "go_memstats_alloc_bytes_total") / 1e6
	}
	for i, x := range ps {
		cpu0[i] = cpuSeconds(x.p.cmd.Process.Pid)
		pf0[i] = minorFaults(x.p.cmd.Process.Pid)
	}
	var prof sync.WaitGroup
	if *profile != "" && round == 1 {
		secs := 3 + (*flips)/max(1, *changeRate)
		switch what {
		case "noop":
			secs = 3 + (*noopPatches+*heartbeats)/max(1, *changeRate)
		case "idle":
			secs = 3 + *idleSecs
		}
		for _, x := range ps {
			prof.Add(1)
			go func() {
				defer prof.Done()
				cpuProfile(x.pp, secs, filepath.Join(*profile, strings.NewReplacer(" ", "-", "+", "").Replace(x.name)+"-"+what+".pprof"))
			}()
		}
	}
	t := time.Now()
	work()
	fmt.Printf("  %s writes in %v\n", what, time.Since(t).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	ticks, faults := make([]float64, len(ps)), make([]float64, len(ps))
	for i, x := range ps {
		ticks[i] = (cpuSeconds(x.p.cmd.Process.Pid) - cpu0[i]) * 100
		faults[i] = minorFaults(x.p.cmd.Process.Pid) - pf0[i]
	}
	for i, x := range ps {
		keep(x, ticks[i], phaseCounts{gcs: metric(x.prom, "go_gc_duration_seconds_count") - gc0[i], faults: faults[i],
			mb: metric(x.prom, "go_memstats_alloc_bytes_total")/1e6 - mb0[i]})
	}
	prof.Wait()
}

// phaseCounts are a process's counts over a phase, beside its CPU.
type phaseCounts struct{ gcs, faults, mb float64 }

// cpuProfile saves a CPU profile of secs seconds from pprof at port.
func cpuProfile(port, secs int, path string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, secs))
	if err != nil {
		fmt.Printf("profile %s: %v\n", path, err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()
	_, _ = f.ReadFrom(resp.Body)
}

// paced runs n writes at -change-rate.
func paced(n int, write func(i int)) {
	t := time.NewTicker(time.Second / time.Duration(max(1, *changeRate)))
	defer t.Stop()
	for i := range n {
		<-t.C
		write(i)
	}
}

// flipEndpoints turns one endpoint of -flips distinct slices unready (or
// ready again, in even rounds).
func flipEndpoints(api *apiServer, sls []*discoveryv1.EndpointSlice, round int) {
	ctx := context.Background()
	paced(*flips, func(i int) {
		sl := sls[(i*7)%len(sls)]
		for try := 0; ; try++ {
			e := &sl.Endpoints[i%len(sl.Endpoints)]
			r := e.Conditions.Ready == nil || *e.Conditions.Ready
			e.Conditions.Ready, e.Conditions.Serving = ptrTo(!r), ptrTo(!r)
			up, err := api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Update(ctx, sl, metav1.UpdateOptions{})
			if err == nil {
				*sl = *up
				return
			}
			if !apierrors.IsConflict(err) || try > 2 {
				fail("round %d: updating slice %s: %v", round, sl.Name, err)
			}
			cur, gerr := api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Get(ctx, sl.Name, metav1.GetOptions{})
			if gerr != nil {
				fail("%v", gerr)
			}
			*sl = *cur
		}
	})
}

// noopWrites patches an annotation of Services and slices in turn, with a
// Node heartbeat spread among them: nothing an answer reads changes.
func noopWrites(api *apiServer, sls []*discoveryv1.EndpointSlice, svcs []string, round int) {
	ctx := context.Background()
	n := *noopPatches + *heartbeats
	every := max(1, n/max(1, *heartbeats))
	beats, patches := 0, 0
	paced(n, func(i int) {
		if (i%every == every-1 && beats < *heartbeats) || patches >= *noopPatches {
			heartbeat(ctx, api, fmt.Sprintf("node-%d", beats%*nodes))
			beats++
			return
		}
		body := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"benchk8s/touched":"%d-%d"}}}`, round, patches))
		var err error
		if patches%2 == 0 {
			_, err = api.client.CoreV1().Services("bench").Patch(ctx, svcs[(patches*11)%len(svcs)], types.MergePatchType, body, metav1.PatchOptions{})
		} else {
			sl := sls[(patches*13)%len(sls)]
			var up *discoveryv1.EndpointSlice
			if up, err = api.client.DiscoveryV1().EndpointSlices(sl.Namespace).Patch(ctx, sl.Name, types.MergePatchType, body, metav1.PatchOptions{}); err == nil {
				*sl = *up
			}
		}
		if err != nil {
			fail("round %d: annotation patch %d: %v", round, patches, err)
		}
		patches++
	})
}

// heartbeat writes a Node's status with a new heartbeat time only.
func heartbeat(ctx context.Context, api *apiServer, name string) {
	n, err := api.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		for j := range n.Status.Conditions {
			if n.Status.Conditions[j].Type == corev1.NodeReady {
				n.Status.Conditions[j].LastHeartbeatTime = metav1.Now()
			}
		}
		_, err = api.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsConflict(err) {
		fail("node status %s: %v", name, err)
	}
}

// agreeWithStock checks, after a moment for the last patches, that every variant
// answers the sampled names as the stock plugin does.
func agreeWithStock(ps []*changeProc, names []specQuery) {
	time.Sleep(2 * time.Second)
	want, _ := answers(ps[0].port, names)
	for _, x := range ps[1:] {
		got, _ := answers(x.port, names)
		differ := 0
		for _, q := range names {
			if got[q] != want[q] {
				if differ == 0 {
					fmt.Printf("%s: %s answers\n%s\nwant (kubernetes)\n%s\n", x.name, q.name, got[q], want[q])
				}
				differ++
			}
		}
		fmt.Printf("%-36s %d of %d sampled names answer unlike the stock plugin\n", x.name, differ, len(names))
	}
}

// printChanges prints the table: ticks per phase and round, the ratio of
// their sums to the stock plugin's (the mean of its two processes), and
// each snapshot's writes.
func printChanges(ps []*changeProc) {
	sum := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s
	}
	join := func(v []float64) string {
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = fmt.Sprintf("%.1f", x)
		}
		return strings.Join(out, " / ")
	}
	var stock []*changeProc
	for _, x := range ps {
		if strings.HasPrefix(x.name, "kubernetes") {
			stock = append(stock, x)
		}
	}
	ref := func(phase func(*changeProc) []float64) float64 { // the stock processes' mean sum
		t := 0.0
		for _, x := range stock {
			t += sum(phase(x))
		}
		return t / float64(len(stock))
	}
	kIdle := ref(func(x *changeProc) []float64 { return x.idle })
	kReal := ref(func(x *changeProc) []float64 { return x.real })
	kNoop := ref(func(x *changeProc) []float64 { return x.noop })
	// the idle phase's columns, with -idle-secs
	idle, idleHead, idleSep := func(*changeProc) string { return "" }, "", ""
	if len(ps[0].idle) > 0 {
		idle = func(x *changeProc) string {
			return fmt.Sprintf(" %s | %.2f |", join(x.idle), sum(x.idle)/max(kIdle, 1))
		}
		idleHead, idleSep = fmt.Sprintf(" idle %d s, ticks | × stock |", *idleSecs), "---:|---:|"
	}
	fmt.Printf("\n| process |%s real changes, ticks | × stock | no-op updates, ticks | × stock | GC cycles, real / no-op | minor faults, real / no-op | MB allocated, real / no-op | snapshot: whole writes, log appends, KiB |\n|---|%s---:|---:|---:|---:|---:|---:|---:|---|\n",
		idleHead, idleSep)
	for _, x := range ps {
		snap := ""
		if strings.HasSuffix(x.name, "+snapshot") {
			snap = fmt.Sprintf("%.0f, %.0f, %.0f", metric(x.prom, "coredns_endpointsvc_snapshot_writes_total"),
				metric(x.prom, "coredns_endpointsvc_snapshot_log_appends_total"), metric(x.prom, "coredns_endpointsvc_snapshot_written_bytes_total")/1024)
		}
		fmt.Printf("| %s |%s %s | **%.2f** | %s | **%.2f** | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %s |\n", x.name, idle(x), join(x.real), sum(x.real)/kReal,
			join(x.noop), sum(x.noop)/kNoop, x.realGC, x.noopGC, x.realPF, x.noopPF, x.realMB, x.noopMB, snap)
	}
}
