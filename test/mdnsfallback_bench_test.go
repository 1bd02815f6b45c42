package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The figures of issue 29 (docs/measurements/mdnsfallback.md), run by
// build/bench-mdnsfallback-lan.sh: each benchmark runs the binary under
// test (MESHDNS_BIN) and, with MESHDNS_BEFORE_BIN, the one before it, in
// the same run, on namespaces and a bridge of its own. They run once
// (-benchtime 1x); the figures are reported as metrics.

// benchBins returns the binaries to compare: "before" (when given) and
// "after".
func benchBins() [][2]string {
	out := [][2]string{}
	if b := os.Getenv("MESHDNS_BEFORE_BIN"); b != "" {
		out = append(out, [2]string{"before", b})
	}
	return append(out, [2]string{"after", meshdnsBin})
}

// BenchmarkMdnsColdLookupBesideAvahi: host A runs Avahi and meshdns side
// by side (port 5353 shared: meshdns asks QM, and the one-shot query
// beside it); hosts B and C hold the same 200 names (a shared name: each
// name answers B's and C's address). Each name is looked up once from A
// (a cold lookup: nothing cached), one at a time; p50 and p99 of the
// latency, and the share of answers holding both hosts' addresses.
func BenchmarkMdnsColdLookupBesideAvahi(b *testing.B) {
	RequireTool(b, "avahi-daemon", "avahi-daemon")
	const names = 200
	for _, bin := range benchBins() {
		b.Run(bin[0], func(b *testing.B) {
			hosts := newBridgeHosts(b, 3)
			var recB, recC [][3]string
			for i := range names {
				n := fmt.Sprintf("s%d.weave.local", i)
				recB = append(recB, [3]string{"b", fmt.Sprintf("10.40.%d.%d", i/200, i%200+1), n})
				recC = append(recC, [3]string{"c", fmt.Sprintf("10.41.%d.%d", i/200, i%200+1), n})
			}
			hosts[1].startMeshdnsWith(b, "", "", recB)
			hosts[2].startMeshdnsWith(b, "", "", recC)
			hosts[0].startAvahi(b, startDBus(b), "")
			a := hosts[0].startMeshdnsWith(b, bin[1], "        cache 8192\n", nil)
			a.proc.waitLog(b, "shared with another mDNS stack: true", 5*time.Second)
			time.Sleep(3 * time.Second) // B's and C's start-up announcements are over
			var lat []time.Duration
			both := 0
			inNetns(b, hosts[0].ns, func() {
				c := &dns.Client{Timeout: 2 * time.Second}
				for i := range names {
					m := new(dns.Msg)
					m.SetQuestion(fmt.Sprintf("s%d.weave.local.", i), dns.TypeA)
					start := time.Now()
					r, _, err := c.Exchange(m, "127.0.0.1:1053")
					lat = append(lat, time.Since(start))
					if err == nil && len(r.Answer) == 2 {
						both++
					}
					time.Sleep(30 * time.Millisecond)
				}
			})
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(100*float64(both)/names, "%both")
		})
	}
}

// BenchmarkMdnsLANPackets: three hosts on a bridge, each meshdns with 500
// local names; on each host a client looks up a name every 100 ms, as a
// browser does (A, AAAA and HTTPS), half of them its own host's names and
// half the other hosts'. After a minute of warm-up, the packets the hosts
// send in one minute (their veths' tx counters: mDNS, and a little ARP),
// and meshdns's mDNS queries and responses by kind.
func BenchmarkMdnsLANPackets(b *testing.B) {
	const perHost = 500
	warm, span := time.Minute, time.Minute
	if d, err := time.ParseDuration(os.Getenv("MESHDNS_BENCH_SPAN")); err == nil {
		warm, span = d, d
	}
	for _, bin := range benchBins() {
		b.Run(bin[0], func(b *testing.B) {
			hosts := newBridgeHosts(b, 3)
			var ms []*nsMeshdns
			for h := range hosts {
				var recs [][3]string
				for i := range perHost {
					recs = append(recs, [3]string{"c" + strconv.Itoa(i), fmt.Sprintf("10.5%d.%d.%d", h, i/200, i%200+1), fmt.Sprintf("h%dn%d.weave.local", h, i)})
				}
				ms = append(ms, hosts[h].startMeshdnsWith(b, bin[1], "", recs))
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for h := range hosts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					inNetns(b, hosts[h].ns, func() { browse(h, len(hosts), perHost, stop) })
				}()
			}
			time.Sleep(warm)
			tx0, m0 := vethTx(b, hosts), mdnsSent(b, ms)
			time.Sleep(span)
			tx1, m1 := vethTx(b, hosts), mdnsSent(b, ms)
			close(stop)
			wg.Wait()
			perMin := float64(time.Minute) / float64(span)
			b.ReportMetric(float64(tx1-tx0)*perMin, "packets/min")
			for k, v := range m1 {
				b.ReportMetric((v-m0[k])*perMin, k+"/min")
			}
		})
	}
}

// browse asks meshdns on 127.0.0.1:1053 for a random name every 100 ms
// (A, AAAA and HTTPS) until stop: its own host's names or another
// host's, half and half.
func browse(host, hosts, perHost int, stop chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(host), 29))
	c := &dns.Client{Timeout: time.Second}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		h := host
		if rng.IntN(2) == 1 {
			h = (host + 1 + rng.IntN(hosts-1)) % hosts
		}
		name := fmt.Sprintf("h%dn%d.weave.local.", h, rng.IntN(perHost))
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeHTTPS} {
			// one after another: sockets must be opened on this thread,
			// the one inside the namespace
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			_, _, _ = c.Exchange(m, "127.0.0.1:1053")
		}
	}
}

// vethTx sums the packets the hosts sent on their veths.
func vethTx(t testing.TB, hosts []*netHost) int64 {
	var sum int64
	for _, h := range hosts {
		out, err := exec.Command("ip", "-n", h.ns, "-s", "link", "show", h.veth).CombinedOutput()
		if err != nil {
			t.Fatalf("ip -s link: %v %s", err, out)
		}
		ls := strings.Split(string(out), "\n")
		for i, l := range ls {
			if strings.Contains(l, "TX:") && i+1 < len(ls) {
				f := strings.Fields(ls[i+1])
				n, _ := strconv.ParseInt(f[1], 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// mdnsSent sums meshdns's mDNS queries and responses by kind over ms.
func mdnsSent(t testing.TB, ms []*nsMeshdns) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		out["queries"] += m.metric(t, "coredns_mdnsfallback_mdns_queries_sent_total")
		for _, k := range []string{"multicast", "unicast", "legacy", "announcement", "goodbye"} {
			out[k] += m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="`+k+`"`)
		}
	}
	return out
}
