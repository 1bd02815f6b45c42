package main

// -mix axfr: AXFR of the cluster zone (issue 32's figure) from endpointsvc
// (schema kubernetes) and from the stock kubernetes plugin, each with the
// cluster DNS stanza of -mix spec and `transfer cluster.local { to * }`
// beside it, on the spec mix of objects. Both processes run at once (each
// its own meshdns on core 0, idle but for the transfers); per round, each
// plugin in turn (the order alternates) gets -axfrs transfers over TCP,
// one at a time, from this process. Per plugin: the records transferred
// (and whether both transfer the same records), the time per AXFR, the
// process's anonymous RSS before the round's transfers and its peak during
// them, and its CPU ticks per AXFR.

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/zonexfr"
)

var axfrs = flag.Int("axfrs", 5, "-mix axfr: AXFRs of cluster.local per plugin per round")

// axfrStanza is the transfer plugin beside the cluster DNS stanza: the
// cluster zone only, to any client (the form both plugins' docs show).
const axfrStanza = "    transfer cluster.local {\n        to *\n    }\n"

// axfrProc is one plugin's process and its figures.
type axfrProc struct {
	name           string
	port, prom, pp int
	p              *proc
	times          []time.Duration // every AXFR of every round
	records        []int           // records of every AXFR
	before, peak   []float64       // anonymous RSS in MiB, per round
	ticks          []float64       // CPU ticks per AXFR, per round
	first          []dns.RR        // the first transfer, for the comparison
}

// runAXFR is -mix axfr.
func runAXFR(dir string, api *apiServer) {
	t0 := time.Now()
	o := populateSpec(api.client)
	fmt.Printf("objects: %d namespaces, %d Services (%d ClusterIP, %d headless with endpoint hostnames, %d ExternalName), %d EndpointSlices with %d ready endpoints, %d Nodes; created in %v\n",
		*namespacesN, *services, len(o.clusterIP), len(o.headless), len(o.external), o.slices, o.endpoints, *nodes, time.Since(t0).Round(time.Millisecond))
	_, checks := specQueries(o, 2000)
	variants := specVariantsInsecure(api.kubeconfig)
	ps := map[string]*axfrProc{}
	for _, name := range []string{"endpointsvc", "kubernetes"} {
		x := &axfrProc{name: name, port: freePort(), prom: freePort(), pp: freePort()}
		ready := freePort()
		corefile := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n    pprof 127.0.0.1:%d\n%s%s}\n",
			x.port, ready, x.prom, x.pp, variants[name], axfrStanza)
		cf := filepath.Join(dir, "Corefile.axfr."+name)
		if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
			fail("%v", err)
		}
		t := time.Now()
		x.p = start(dir, "taskset", "-c", "0", *meshdns, "-conf", cf) // taskset execs meshdns: same PID
		waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", ready), x.p, 180*time.Second)
		// /ready may answer before the DNS listener is up (the stock
		// plugin holds the server's start until it has synced)
		for {
			ans, bad := answers(x.port, checks)
			if bad <= len(checks)/10 {
				break
			}
			if time.Since(t) > 180*time.Second {
				fail("%s: %d of %d checked names failed or answered nothing (%s: %q)\n%s", name, bad, len(checks), checks[0].name, ans[checks[0]], tail(x.p.log.String()))
			}
			time.Sleep(500 * time.Millisecond)
		}
		fmt.Printf("%-12s synced in %v; anonymous RSS %.1f MiB\n", name, time.Since(t).Round(time.Millisecond), statusMiB(x.p.cmd.Process.Pid, "RssAnon"))
		ps[name] = x
	}
	time.Sleep(3 * time.Second) // settle: the first snapshot written, the sync's garbage collected
	for r := 1; r <= *rounds; r++ {
		order := []string{"endpointsvc", "kubernetes"}
		if r%2 == 0 {
			order = []string{"kubernetes", "endpointsvc"}
		}
		for _, name := range order {
			axfrRound(ps[name], r)
		}
	}
	e, k := ps["endpointsvc"], ps["kubernetes"]
	axfrCompare(e.first, k.first)
	if *profile != "" {
		for _, x := range []*axfrProc{e, k} {
			axfrProfile(x)
		}
	}
	printAXFRTable(e, k)
}

// axfrRound runs -axfrs transfers from x, one after the other, sampling
// its RssAnon meanwhile, and keeps the figures. The CPU window and the
// samples end 1 s after the last transfer (the garbage collection it
// leaves behind).
func axfrRound(x *axfrProc, round int) {
	pid := x.p.cmd.Process.Pid
	before := statusMiB(pid, "RssAnon")
	smp := sampleAnon(pid)
	cpu0 := cpuSeconds(pid)
	var ts []time.Duration
	for i := 0; i < *axfrs; i++ {
		t := time.Now()
		rrs, err := zonexfr.AXFR("cluster.local.", fmt.Sprintf("127.0.0.1:%d", x.port), 30*time.Second)
		if err != nil {
			fail("%s: AXFR %d of round %d: %v (%d records)\n%s", x.name, i+1, round, err, len(rrs), tail(x.p.log.String()))
		}
		ts = append(ts, time.Since(t))
		if len(rrs) < 3 || rrs[0].Header().Rrtype != dns.TypeSOA || rrs[len(rrs)-1].Header().Rrtype != dns.TypeSOA {
			fail("%s: AXFR %d of round %d: not framed by the SOA (%d records)", x.name, i+1, round, len(rrs))
		}
		if x.first == nil {
			x.first = rrs
		}
		x.records = append(x.records, len(rrs))
	}
	time.Sleep(time.Second)
	ticks := (cpuSeconds(pid) - cpu0) * 100 / float64(*axfrs)
	peak, n := smp.end()
	x.times = append(x.times, ts...)
	x.before, x.peak, x.ticks = append(x.before, before), append(x.peak, peak), append(x.ticks, ticks)
	sorted := slices.Sorted(slices.Values(ts))
	fmt.Printf("round %d: %-12s %d AXFRs of %d records: median %v, max %v; %.1f CPU ticks per AXFR; anonymous RSS %.1f MiB before, peak %.1f MiB (%d samples)\n",
		round, x.name, len(ts), x.records[len(x.records)-1], sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond),
		ticks, before, peak, n)
}

// axfrCompare compares two transfers as a zone (a multiset of records: the
// stock plugin leaves the order of ties to its informer) and prints the
// first differences either way.
func axfrCompare(e, k []dns.RR) {
	count := map[string]int{}
	for _, rr := range e {
		count[zonexfr.Key(rr)]++
	}
	for _, rr := range k {
		count[zonexfr.Key(rr)]--
	}
	var only [2][]string // only endpointsvc's, only the stock plugin's
	for key, n := range count {
		for ; n > 0; n-- {
			only[0] = append(only[0], key)
		}
		for ; n < 0; n++ {
			only[1] = append(only[1], key)
		}
	}
	if len(only[0])+len(only[1]) == 0 {
		fmt.Printf("the transfers hold the same %d records (as a multiset, SOA serials left out)\n", len(e))
		return
	}
	fmt.Printf("the transfers differ: %d records from endpointsvc, %d from the stock plugin; %d only in endpointsvc's, %d only in the stock plugin's\n",
		len(e), len(k), len(only[0]), len(only[1]))
	for i, who := range []string{"endpointsvc", "kubernetes"} {
		slices.Sort(only[i])
		for j, key := range only[i] {
			if j == 20 {
				fmt.Printf("  only %s: … and %d more\n", who, len(only[i])-j)
				break
			}
			fmt.Printf("  only %s: %s\n", who, key)
		}
	}
}

// axfrProfile saves a CPU profile of x over 10 s of back-to-back
// transfers, and its allocation profile before and after them (compare
// with go tool pprof -sample_index=alloc_space -base BEFORE AFTER).
func axfrProfile(x *axfrProc) {
	base := filepath.Join(*profile, x.name+"-axfr")
	saveAllocs(x.pp, base+"-allocs-before.pprof")
	const secs = 10
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); cpuProfile(x.pp, secs, base+"-cpu.pprof") }()
	n := 0
	for end := time.Now().Add(secs * time.Second); time.Now().Before(end); n++ {
		if _, err := zonexfr.AXFR("cluster.local.", fmt.Sprintf("127.0.0.1:%d", x.port), 30*time.Second); err != nil {
			fail("%s: profiled AXFR: %v", x.name, err)
		}
	}
	wg.Wait()
	saveAllocs(x.pp, base+"-allocs-after.pprof")
	fmt.Printf("%-12s profiles of %d AXFRs in %s-{cpu,allocs-before,allocs-after}.pprof\n", x.name, n, base)
}

func saveAllocs(port int, path string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/allocs", port))
	if err != nil {
		fail("%v", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()
	_, _ = f.ReadFrom(resp.Body)
}

// printAXFRTable prints the figures per round and the ratios
// endpointsvc/kubernetes as a Markdown table.
func printAXFRTable(e, k *axfrProc) {
	per := func(v []float64, unit string) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprintf("%.1f", x)
		}
		return strings.Join(s, " / ") + unit
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	ms := func(ts []time.Duration) (med, mx float64) {
		s := slices.Sorted(slices.Values(ts))
		return float64(s[len(s)/2].Microseconds()) / 1000, float64(s[len(s)-1].Microseconds()) / 1000
	}
	grow := func(x *axfrProc) []float64 {
		g := make([]float64, len(x.peak))
		for i := range g {
			g[i] = x.peak[i] - x.before[i]
		}
		return g
	}
	em, ex := ms(e.times)
	km, kx := ms(k.times)
	fmt.Printf("\n| per plugin, %d rounds x %d AXFRs | endpointsvc | kubernetes | ratio |\n|---|---:|---:|---:|\n", len(e.ticks), *axfrs)
	fmt.Printf("| records per AXFR | %d | %d | %.3f |\n", e.records[0], k.records[0], float64(e.records[0])/float64(k.records[0]))
	fmt.Printf("| time per AXFR, median | %.0f ms | %.0f ms | **%.2f** |\n", em, km, em/km)
	fmt.Printf("| time per AXFR, max | %.0f ms | %.0f ms | %.2f |\n", ex, kx, ex/kx)
	fmt.Printf("| CPU ticks per AXFR (1/100 s) | %s | %s | **%.2f** |\n", per(e.ticks, ""), per(k.ticks, ""), mean(e.ticks)/mean(k.ticks))
	fmt.Printf("| anonymous RSS before the transfers | %s | %s | %.2f |\n", per(e.before, " MiB"), per(k.before, " MiB"), mean(e.before)/mean(k.before))
	fmt.Printf("| peak anonymous RSS during the transfers | %s | %s | **%.2f** |\n", per(e.peak, " MiB"), per(k.peak, " MiB"), mean(e.peak)/mean(k.peak))
	fmt.Printf("| peak minus before | %s | %s | %.2f |\n", per(grow(e), " MiB"), per(grow(k), " MiB"), mean(grow(e))/mean(grow(k)))
	for _, x := range []*axfrProc{e, k} {
		for _, n := range x.records {
			if n != x.records[0] {
				fmt.Printf("%s: the transfers' sizes vary: %v\n", x.name, x.records)
				break
			}
		}
	}
}
