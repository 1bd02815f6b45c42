//go:build nodedrill

package test

// Issue 24's last figure on the one-node cluster: what a client pod with the
// default dnsPolicy (the kubelet's ndots:5 and three search names) pays for
// a lookup, with the shipped Corefile and with the same Corefile switched
// to `pods verified` and `autopath @endpointsvc`. A real glibc resolver
// (the client image's getent ahosts) and Go's resolver (test/nodeclient)
// each look up an outside name (answered through `forward` by the
// harness's outside-world server) and a cluster name given short
// (`web-svc.drill`), autopathN times each, timed in the pod; the queries
// meshdns received are coredns_dns_requests_total summed over the replicas
// (scraped from their pods' metrics ports before and after). A glibc
// lookup's time includes starting getent (a lookup of localhost, answered
// from /etc/hosts, shows that cost). `make drill` runs it (~1 min).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// autopathN is the number of timed lookups of each cell (after
// autopathWarm untimed ones).
const (
	autopathN    = 200
	autopathWarm = 5
)

// autopathCell is one measured (client × name × autopath) combination.
type autopathCell struct {
	resolver, name string
	autopath       bool
	lookups        int
	failed         int
	answers        string // the sorted answer set of the first lookup
	p50, p99, max  time.Duration
	queries        map[string]float64 // requests meshdns received, by type ("" = all)
	autopathed     float64            // coredns_autopath_success_total's increase
}

func (x autopathCell) perLookup(qtype string) float64 {
	return x.queries[qtype] / float64(x.lookups)
}

func (x autopathCell) String() string {
	mode := "off"
	if x.autopath {
		mode = "on"
	}
	return fmt.Sprintf("autopath %-3s %-5s %-16s %d lookups (%d failed): p50 %v, p99 %v, max %v; %.2f queries/lookup (A %.2f, AAAA %.2f), %.0f autopath answers; answers %s",
		mode, x.resolver, x.name, x.lookups, x.failed, x.p50.Round(10*time.Microsecond), x.p99.Round(10*time.Microsecond),
		x.max.Round(100*time.Microsecond), x.perLookup(""), x.perLookup("A"), x.perLookup("AAAA"), x.autopathed, x.answers)
}

// autopathQuestion is one lookup the test measures and what it must cost
// meshdns per lookup without and with autopath.
type autopathQuestion struct {
	resolver, name string
	answers        string // every lookup's answer ("" = any, but one)
	off, on        float64
}

func TestNodeDrillAutopath(t *testing.T) {
	c, _ := drillCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	svc, err := c.Client.CoreV1().Services(drillNS).Get(ctx, "web-svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	short := "web-svc." + drillNS
	questions := []autopathQuestion{
		// /etc/hosts, no DNS: the cost of starting getent, and a check that
		// nothing else asks meshdns while a cell is counted
		{"glibc", "localhost", "", 0, 0},
		// the three search names and the name itself, A and AAAA each
		{"glibc", extName, extAddress, 8, 2},
		{"go", extName, extAddress, 8, 2},
		// the first search name (drill.drill.svc…) fails, the second answers
		{"glibc", short, svc.Spec.ClusterIP, 4, 2},
		{"go", short, svc.Spec.ClusterIP, 4, 2},
	}
	for _, on := range []bool{false, true} {
		if on {
			switchToAutopath(ctx, t, c)
		}
		note(t, c, "autopath", "autopath %v: load average %s before", on, loadAvg())
		for _, q := range questions {
			x := measureAutopathCell(ctx, t, c, q.resolver, q.name, on)
			note(t, c, "autopath", "%s", x)
			checkAutopathCell(t, q, x)
		}
		note(t, c, "autopath", "autopath %v: load average %s after", on, loadAvg())
	}
}

// checkAutopathCell asserts what must hold: every lookup answers the same
// addresses with autopath as without, at the queries q says - with
// autopath one A and one AAAA, each answered by autopath on the first
// search name.
func checkAutopathCell(t *testing.T, q autopathQuestion, x autopathCell) {
	t.Helper()
	if x.failed > 0 || x.answers == "" || (q.answers != "" && x.answers != q.answers) {
		t.Errorf("%s: want every lookup to answer %q", x, q.answers)
	}
	want := q.off
	if x.autopath {
		want = q.on
	}
	if got := x.perLookup(""); got != want {
		t.Errorf("%s: %.3f queries per lookup, want %.0f", x, got, want)
	}
	if x.autopath && want == 2 {
		if x.queries["A"] != float64(x.lookups) || x.queries["AAAA"] != float64(x.lookups) {
			t.Errorf("%s: want one A and one AAAA query per lookup", x)
		}
		if x.autopathed != 2*float64(x.lookups) {
			t.Errorf("%s: want every query answered by autopath", x)
		}
	}
}

// switchToAutopath changes the shipped ConfigMap's Corefile to `pods
// verified` and `autopath @endpointsvc` and rolls the Deployment; cleanup
// puts the shipped Corefile back and rolls it again, so later tests see the
// shipped DNS.
func switchToAutopath(ctx context.Context, t *testing.T, c *nodeCluster) {
	t.Helper()
	cms := c.Client.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(ctx, "meshdns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := cm.Data["Corefile"]
	changed := strings.Replace(orig, "pods insecure", "pods verified", 1)
	changed = strings.Replace(changed, "\n    endpointsvc cluster.local", "\n    autopath @endpointsvc\n    endpointsvc cluster.local", 1)
	if strings.Count(changed, "pods verified") != 1 || strings.Count(changed, "autopath @endpointsvc") != 1 {
		t.Fatalf("the shipped Corefile has no `pods insecure` or endpointsvc line to change:\n%s", orig)
	}
	t.Cleanup(func() { rollCorefile(t, c, orig) })
	start := time.Now()
	rollCorefile(t, c, changed)
	note(t, c, "autopath", "pods verified and autopath @endpointsvc rolled out in %v", time.Since(start).Round(time.Millisecond))
}

// rollCorefile sets the ConfigMap's Corefile, restarts the Deployment and
// waits until the rollout is complete.
func rollCorefile(t *testing.T, c *nodeCluster, corefile string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cms := c.Client.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(ctx, "meshdns", metav1.GetOptions{})
	if err == nil {
		cm.Data["Corefile"] = corefile
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err == nil {
		_, err = c.kubectl(ctx, "rollout", "restart", "-n", "kube-system", "deployment/meshdns")
	}
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the Deployment's status lags the restart
	err = c.waitDeployment(ctx, "kube-system", "meshdns", 5*time.Minute)
	if err == nil {
		// the old replicas' lameduck: queries they took would be missing
		// from the count of the running ones
		err = waitFor(time.Minute, nil, "no terminating meshdns pod", func() error {
			pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					return fmt.Errorf("%s is terminating", p.Name)
				}
			}
			return nil
		})
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, c.meshdnsLogs(15))
	}
}

// measureAutopathCell runs autopathWarm then autopathN lookups of name with
// resolver in the drill's client pod, counting meshdns's requests around
// the timed ones.
func measureAutopathCell(ctx context.Context, t *testing.T, c *nodeCluster, resolver, name string, on bool) autopathCell {
	t.Helper()
	q := resolver + ":A:" + name
	c.resolveIn(t, drillNS, "client", repeat(q, autopathWarm)...)
	before := meshdnsCounters(ctx, t, c)
	res := c.resolveIn(t, drillNS, "client", repeat(q, autopathN)...)
	after := meshdnsCounters(ctx, t, c)
	x := autopathCell{resolver: resolver, name: name, autopath: on, lookups: len(res), queries: map[string]float64{}}
	for k, v := range after {
		x.queries[k] = v - before[k]
	}
	x.autopathed = x.queries["autopath"]
	delete(x.queries, "autopath")
	var lat []time.Duration
	for i, r := range res {
		if r.Error != "" {
			x.failed++
		}
		if i == 0 {
			x.answers = strings.Join(r.Answers, " ")
		} else if a := strings.Join(r.Answers, " "); a != x.answers && r.Error == "" {
			x.failed++
		}
		lat = append(lat, time.Duration(r.Millis*float64(time.Millisecond)))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	x.p50, x.p99, x.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	return x
}

// meshdnsCounters sums, over the running meshdns pods, the requests they
// received ("" all, and by type A and AAAA) and their autopath answers
// ("autopath"). Every replica must answer its metrics: a missing one would
// lose its queries from the count.
func meshdnsCounters(ctx context.Context, t *testing.T, c *nodeCluster) map[string]float64 {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	hc := http.Client{Timeout: 5 * time.Second}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		resp, err := hc.Get("http://" + net.JoinHostPort(p.Status.PodIP, "9153") + "/metrics")
		if err != nil {
			t.Fatalf("metrics of %s: %v", p.Name, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("metrics of %s: %v", p.Name, err)
		}
		text := string(b)
		out[""] += metricValue(text, "coredns_dns_requests_total")
		out["A"] += metricValue(text, "coredns_dns_requests_total", `type="A"`)
		out["AAAA"] += metricValue(text, "coredns_dns_requests_total", `type="AAAA"`)
		out["autopath"] += metricValue(text, "coredns_autopath_success_total")
	}
	return out
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// loadAvg is the machine's 1, 5 and 15 minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
