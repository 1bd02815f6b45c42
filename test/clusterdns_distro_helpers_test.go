package test

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What TestDistroServerBlocksAgainstStock changes in a Corefile, compares,
// and accepts.

// distroHostsFile is the file every hosts line with a path reads (k3s's
// NodeHosts, kops's /rootfs/etc/hosts, kubespray's dns_etchosts): the
// nodes' names and the one outside name the ExternalName Services point at.
const (
	distroHostsFile = "hosts.test"
	distroHosts     = "192.0.2.99 ext.example.test\n10.0.0.10 node-0 node-0.internal.kops.test\n10.0.0.11 node-1 node-1.internal.kops.test\n"
)

// distroRules are distroLocal's rewrites, each of whole lines: what a
// test on loopback needs, the same on both sides.
var distroRules = []struct {
	re   *regexp.Regexp
	repl string
}{
	// serve on loopback only
	{regexp.MustCompile(`(?m)^(\s*)(\.:53 \{)$`), "$1$2\n$1    bind 127.0.0.1"},
	// the process-wide listeners on loopback ports (Start maps each to a free one)
	{regexp.MustCompile(`(?m)^(\s*)health( \{)?$`), "${1}health 127.0.0.1:8080$2"},
	{regexp.MustCompile(`(?m)^(\s*)ready$`), "${1}ready 127.0.0.1:8181"},
	{regexp.MustCompile(`(?m)^(\s*)prometheus \S*:9153$`), "${1}prometheus 127.0.0.1:9153"},
	// every stop of a test waits out lameduck; what it does is no part of the comparison
	{regexp.MustCompile(`(?m)^(\s*)lameduck \S+$`), "${1}lameduck 100ms"},
	// the outside world: a loopback stub that answers SERVFAIL (genUpstream), never the machine's resolver
	{regexp.MustCompile(`(?m)^(\s*)forward \. [^{\n]*?( \{)?$`), "${1}forward . 127.0.0.1:5301$2"},
	// hosts files from the test's directory
	{regexp.MustCompile(`(?m)^(\s*)hosts /\S+`), "${1}hosts " + distroHostsFile},
}

// distroLocal is corefile as a test on loopback runs it (distroRules),
// with the kubernetes blocks' API server at kubeconfig ("" leaves the
// blocks alone). Every line is trimmed: indentation means nothing.
func distroLocal(t *testing.T, corefile, kubeconfig string) string {
	t.Helper()
	cf := corefile
	for _, r := range distroRules {
		cf = r.re.ReplaceAllString(cf, r.repl)
	}
	if !strings.Contains(cf, "forward . 127.0.0.1:5301") || !strings.Contains(cf, "bind 127.0.0.1") {
		t.Fatalf("a Corefile without forward or .:53:\n%s", corefile)
	}
	var out []string
	for _, l := range strings.Split(cf, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	cf = strings.Join(out, "\n") + "\n"
	if kubeconfig != "" && !distroKubeLine.MatchString(cf) {
		t.Fatalf("no kubernetes block:\n%s", corefile)
	}
	return cf
}

// distroKubeLine is the first line of a kubernetes block.
var distroKubeLine = regexp.MustCompile(`(?m)^kubernetes ([^{\n]+) \{$`)

// distroStock is the Corefile for stock CoreDNS: its kubernetes blocks
// read the test's API server.
func distroStock(t *testing.T, corefile, kubeconfig string) string {
	t.Helper()
	return distroKubeLine.ReplaceAllString(distroLocal(t, corefile, kubeconfig), "kubernetes $1 {\nkubeconfig "+kubeconfig)
}

// distroOurs is the Corefile for meshdns: each kubernetes block renamed
// endpointsvc, with the source and schema it implies written out (the
// migration of docs/cluster-dns.md); autopath @kubernetes and
// k8s_external stay as written (the name kubernetes finds endpointsvc).
func distroOurs(t *testing.T, corefile, kubeconfig string) string {
	t.Helper()
	return distroKubeLine.ReplaceAllString(distroLocal(t, corefile, kubeconfig),
		"endpointsvc $1 {\nsource kubernetes "+kubeconfig+"\nschema kubernetes")
}

// distroLBStatus writes the LoadBalancer ingresses of the generated
// Services (a create drops status: a controller writes it).
func distroLBStatus(t *testing.T, k *kubeAPI, c *clustergen.Cluster) {
	t.Helper()
	for _, s := range c.Services {
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			continue
		}
		api := k.Client.CoreV1().Services(s.Namespace)
		cur, err := api.Get(ctxT(t), s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.LoadBalancer = s.Status.LoadBalancer
		if _, err := api.UpdateStatus(ctxT(t), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of %s/%s: %v", s.Namespace, s.Name, err)
		}
	}
}

// distroCount counts a block's comparisons.
type distroCount struct {
	answers, alike, allowed, failed int // questions over UDP, autopath's among them
	autopath, autopathCNAMEs        int // autopath's questions, answered through a search name
	axfr, axfrRecords, axfrAllowed  int // zone transfers, their records (stock's), stock records accepted missing
}

func (n *distroCount) add(m distroCount) {
	n.answers += m.answers
	n.alike += m.alike
	n.allowed += m.allowed
	n.failed += m.failed
	n.autopath += m.autopath
	n.autopathCNAMEs += m.autopathCNAMEs
	n.axfr += m.axfr
	n.axfrRecords += m.axfrRecords
	n.axfrAllowed += m.axfrAllowed
}

func (n distroCount) String() string {
	return fmt.Sprintf("%d answers compared, %d alike, %d allowed differences, %d differences; "+
		"%d autopath questions (%d through a search name); %d AXFRs (%d records, %d accepted missing)",
		n.answers, n.alike, n.allowed, n.failed, n.autopath, n.autopathCNAMEs, n.axfr, n.axfrRecords, n.axfrAllowed)
}

// distroPhase is one comparison of a block.
type distroPhase struct {
	b    distroBlock
	seed int64
	name string
	c    *clustergen.Cluster
	qs   []clustergen.Question
	cd   bool
}

// distroCompare asks every question of both servers (a few at a time: the
// questions are independent, and each is asked once per server) and
// reports each difference neither genAllowed nor distroAllowed accepts.
func distroCompare(t *testing.T, p distroPhase, ours, stock string) distroCount {
	t.Helper()
	qs := genMergeQuestions(p.qs, nil) // each name and type once: a cache never answers one of them
	a, b := make([]genReply, len(qs)), make([]genReply, len(qs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				a[i], b[i] = genAsk(ours, qs[i], p.cd), genAsk(stock, qs[i], p.cd)
			}
		}()
	}
	for i := range qs {
		next <- i
	}
	close(next)
	wg.Wait()
	n := distroCount{answers: len(qs)}
	d := genDiff{c: p.c, cnames: p.c.CNAMEConflicts()}
	var ms []genMismatch
	for i, q := range qs {
		if a[i].text == b[i].text {
			n.alike++
			continue
		}
		d.q, d.ours, d.stock = q, a[i], b[i]
		reason := d.allowed()
		if reason == "" {
			reason = distroAllowed(p.b, d)
		}
		ms = append(ms, genMismatch{Seed: p.seed, Phase: p.b.name + "/" + p.name, Q: q, Ours: a[i].text, Stock: b[i].text, Reason: reason})
		if reason != "" {
			n.allowed++
			continue
		}
		if n.failed++; n.failed <= 20 {
			t.Errorf("%s, seed %d, %s: %s\n  meshdns: %s\n  stock:   %s", p.b.name, p.seed, p.name, q, a[i].text, b[i].text)
		}
	}
	if n.failed > 0 {
		t.Errorf("%s, seed %d, %s: %d of %d questions answered differently", p.b.name, p.seed, p.name, n.failed, len(qs))
	}
	genReport(t, fmt.Sprintf("distro-seed-%d-%s-%s", p.seed, p.b.name, p.name), ms)
	return n
}

// distroAllowed is the reason a difference of a block is accepted, or "".
func distroAllowed(b distroBlock, d genDiff) string {
	if distroCacheTTL(b, d) {
		return "cache: the same answer with TTLs one second apart - the cache counts a TTL down from " +
			"when the entry went in, and the two servers answered at different moments"
	}
	if distroRewrittenCNAME(b, d) {
		return "rewrite: " + distroCNAMEReason
	}
	return ""
}

// distroCacheTTL: a block whose cache holds cluster answers (no disable
// success/denial of cluster.local), and the two replies are the same but
// for TTLs at most one second apart, record by record.
func distroCacheTTL(b distroBlock, d genDiff) bool {
	if !strings.Contains(b.corefile, "cache") || d.ours.msg == nil || d.stock.msg == nil {
		return false
	}
	strip := func(m *dns.Msg) (string, []uint32) {
		c := m.Copy()
		var ttls []uint32
		for _, sec := range [][]dns.RR{c.Answer, c.Ns, c.Extra} {
			for _, rr := range sec {
				if rr.Header().Rrtype != dns.TypeOPT {
					ttls = append(ttls, rr.Header().Ttl)
					rr.Header().Ttl = 0
				}
			}
		}
		return genAnswer(c), ttls
	}
	a, at := strip(d.ours.msg)
	s, st := strip(d.stock.msg)
	if a != s || len(at) != len(st) {
		return false
	}
	// genAnswer sorts each section; the TTLs of one RRset are one value
	// after the cache, so comparing them in message order is enough when
	// every record's TTL is within a second of some record of the other
	for i := range at {
		if diff := int64(at[i]) - int64(st[i]); diff > 1 || diff < -1 {
			return false
		}
	}
	return true
}

// distroMark makes the sync marker of the next round and waits until every
// process answers it (genMark); a block with a view for the Pod network
// holds a second kubernetes block there, asked from a client Pod's
// address. Then a pause for the Pod watch's last events (another watch
// than the marker's).
func distroMark(t *testing.T, env *distroEnv, runs []*distroRun) {
	t.Helper()
	n := env.mark
	env.mark++
	var all []*Server
	for _, run := range runs {
		all = append(all, run.ours, run.stock)
	}
	genMark(t, env.k, n, "cluster.local", all...)
	qname := fmt.Sprintf("h.m.mark-%d.svc.cluster.local.", n)
	for _, run := range runs {
		if !run.b.view {
			continue
		}
		for _, s := range []*Server{run.ours, run.stock} {
			Eventually(t, 20*time.Second, func() string {
				genPoll++ // a type no earlier poll used: no cached denial hides the marker
				q := clustergen.Question{Name: qname, Type: 65280 + uint16(genPoll%250)}
				if r := podsAskFrom(t, s.DNS(), env.clients[0].addr, q); r.msg == nil || r.msg.Rcode != dns.RcodeSuccess {
					return "marker from the Pod network: " + r.text
				}
				return ""
			})
		}
	}
	time.Sleep(300 * time.Millisecond)
}
