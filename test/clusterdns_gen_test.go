package test

import (
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
)

// genRegressions are seeds that found a difference, named by its shape
// (the question that shows it; the whole seed runs). They run in every run
// besides the default seeds, and each must still ask its question: a
// generator change that loses the shape fails loudly instead of dropping
// the case. Add a seed that a soak run found with soak: true.
var genRegressions = []struct {
	name     string
	seed     int64
	soak     bool   // a seed of the soak size (genSoak), else of genSmall
	question string // as clustergen.Question.String prints it, lowercased
}{
	// endpoints with two or three addresses: the stock plugin serves every address
	{name: "MultiAddressEndpointName", seed: 1, question: "10-244-58-15.svc.svc.svc.cluster.local. a"},
	{name: "MultiAddressEndpointPTR", seed: 1, question: "15.58.244.10.in-addr.arpa. ptr"},
	{name: "MultiAddressHeadlessSRV", seed: 1, question: "svc.svc.svc.cluster.local. srv"},
	// publishNotReadyAddresses: the stock plugin reads only the ready condition
	{name: "NotReadyEndpointOfPublishNotReady", seed: 2, question: "kube-dns-1.kube-dns.node.svc.cluster.local. a"},
	{name: "NotReadyEndpointOfPublishNotReadyPTR", seed: 2, question: "81.13.244.10.in-addr.arpa. ptr"},
	// FQDN endpoints: names and CNAMEs of the stock plugin
	{name: "FQDNEndpointName", seed: 1, question: "ext-example-test.kube-dns.default.svc.cluster.local. a"},
	{name: "FQDNEndpointHostname", seed: 1, question: "svc-2.svc.svc.svc.cluster.local. a"},
	// a port of a headless Service with no ready endpoint: NXDOMAIN in stock
	{name: "HeadlessPortWithoutEndpoints", seed: 3, question: "_a._sctp.long-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyz.default.svc.cluster.local. srv"},
	// an address of two Services' endpoints: a PTR for each
	{name: "SharedAddressPTR", seed: 1, question: "136.23.244.10.in-addr.arpa. ptr"},
	// one address twice in a Service: stock weighs before it removes the duplicate
	{name: "DuplicateAddressSRVWeight", seed: 1, question: "10-244-211-158.svc.node.svc.cluster.local. srv"},
	// several CNAME candidates: the kept difference, meshdns answers one CNAME (genOneCNAME)
	{name: "FQDNBesideIPEndpoints", seed: 1, question: "svc.svc.svc.cluster.local. a"},
	{name: "FQDNSliceWithSeveralPorts", seed: 2, question: "dns-version-shop-svc-cluster-local.a.dns.svc.cluster.local. a"},
	// NS of the apex and the NS name: the server's own addresses (genOwnAddresses)
	{name: "ApexNS", seed: 1, question: "cluster.local. ns"},
	{name: "NSName", seed: 1, question: "ns.dns.cluster.local. a"},
}

// TestClusterDNSGenerated is issue 20's property 3 on generated clusters:
// for each seed, a real kube-apiserver gets a generated cluster; the
// shipped Corefile (endpointsvc, schema kubernetes) and the stock
// kubernetes plugin with kubeadm's options, two processes of the meshdns
// binary, must answer every generated question alike — rcode, AA, answer,
// authority and additional sections with their TTLs. The phases:
//   - live: both servers started after the objects were created;
//   - patched: after a sequence of random valid changes (steps) made on
//     the API server while both were running;
//   - whole: a meshdns started after the steps, its table built whole
//     (tells a patch's difference from the model's);
//   - restart: the API server frozen, meshdns stopped and started again
//     from its snapshot, answering as the stock plugin answered before
//     the freeze.
//
// MESHDNS_GEN_SEED=s runs seed s alone; MESHDNS_SOAK_SEEDS=n runs n seeds
// of a bigger cluster (build/soak.sh), or seed s at that size;
// MESHDNS_GEN_OUT=dir writes every difference to dir/seed-N.txt.
func TestClusterDNSGenerated(t *testing.T) {
	for _, r := range genRunsFromEnv(t) {
		name := fmt.Sprintf("seed%d", r.seed)
		if r.size == genSoak {
			name = "soak-" + name
		}
		t.Run(name, func(t *testing.T) { genRun(t, r.seed, r.size, false) })
	}
}

// TestClusterDNSGeneratedControl runs seed 1 with the stock plugin on both
// sides (live and patched phases): the comparison must find no difference
// beyond genAllowed, or it is unsound — an answer that differs between two
// identical servers, which no plugin could match.
func TestClusterDNSGeneratedControl(t *testing.T) { genRun(t, 1, genSmall, true) }

// genSize is the size of a seed's run: its cluster and its steps.
type genSize struct {
	cfg   clustergen.Config
	steps int // random changes before the patched phase
}

var (
	genSmall = genSize{clustergen.Small(), 40} // make test
	genSoak  = genSize{clustergen.Config{Namespaces: 16, Services: 120, MaxSlices: 4, MaxEndpoints: 8,
		DualStack: true, Zone: "cluster.local"}, 150} // make soak
)

// genSeedRun is one seed to run.
type genSeedRun struct {
	seed int64
	size genSize
}

// genRunsFromEnv lists the seeds of this run: 1-3 and the regression
// seeds, or what the environment asks for.
func genRunsFromEnv(t *testing.T) []genSeedRun {
	soak, one := genEnvInt(t, "MESHDNS_SOAK_SEEDS", 0), genEnvInt(t, "MESHDNS_GEN_SEED", 0)
	switch {
	case one > 0 && soak > 0:
		return []genSeedRun{{int64(one), genSoak}}
	case one > 0:
		return []genSeedRun{{int64(one), genSmall}}
	case soak > 0:
		var runs []genSeedRun
		for i, first := 0, genEnvInt(t, "MESHDNS_SOAK_FIRST", 100); i < soak; i++ {
			runs = append(runs, genSeedRun{int64(first + i), genSoak})
		}
		return runs
	}
	runs := []genSeedRun{{1, genSmall}, {2, genSmall}, {3, genSmall}}
	for _, reg := range genRegressions {
		r := genSeedRun{reg.seed, genSmall}
		if reg.soak {
			r.size = genSoak
		}
		if !slices.Contains(runs, r) {
			runs = append(runs, r)
		}
	}
	return runs
}

// genRun runs the four phases of one seed; a control run has the stock
// plugin on both sides and ends after the patched phase.
func genRun(t *testing.T, seed int64, p genSize, control bool) {
	laps, last := []string{}, time.Now()
	lap := func(name string) { // the time since the last lap, for the log
		laps = append(laps, fmt.Sprintf("%s %v", name, time.Since(last).Round(time.Millisecond)))
		last = time.Now()
	}
	k := startKubeAPI(t)
	mc := p.cfg.Imports > 0 // multicluster (clusterdns_mc_test.go)
	if mc {
		genInstallMCS(t, k)
	}
	c := clustergen.Generate(seed, p.cfg)
	genCreate(t, k, c)
	shipped := genQuickStop(t, shippedClusterCorefile(t, k.Kubeconfig))
	upstream := Options{Ports: map[int]int{5301: genUpstream(t)}} // shippedClusterCorefile's forward
	stockFile := stockCorefile(t, shipped, k.Kubeconfig)
	if mc {
		shipped, stockFile = genMulticluster(t, shipped, "endpointsvc"), genMulticluster(t, stockFile, "kubernetes")
	}
	oursFile := shipped
	if control {
		oursFile = stockFile
	}
	ours, stock := genStart(t, oursFile, upstream), genStart(t, stockFile, upstream)
	zone := c.Config().Zone
	genMark(t, k, 0, zone, ours, stock)
	if mc {
		genMarkImport(t, k, 0, ours, stock)
	}
	lap("setup")

	r := rand.New(rand.NewSource(seed))
	qs := clustergen.Questions(c, p.cfg, r)
	all, _ := genPhase{seed, "live", c, qs, false, control}.compare(t, ours.DNS(), stock.DNS(), nil)
	lap("live")

	for i := 0; i < p.steps; i++ {
		genMust(t, k, c.Step(r))
	}
	laps = append(laps, fmt.Sprintf("both synced %v after the last step", genMark(t, k, 1, zone, ours, stock).Round(time.Millisecond)))
	if mc {
		genMarkImport(t, k, 1, ours, stock)
	}
	qs = genMergeQuestions(clustergen.Questions(c, p.cfg, r), qs)
	if !mc { // the regression seeds are of the sizes without imports
		genCheckRegressions(t, seed, p, qs)
	}
	ms, stockAnswers := genPhase{seed, "patched", c, qs, true, control}.compare(t, ours.DNS(), stock.DNS(), nil)
	all = append(all, ms...)
	lap("steps+patched")
	if control {
		genReport(t, fmt.Sprintf("seed-%d-control", seed), all)
		return
	}
	// a meshdns started now builds the same objects whole: a difference
	// only the patched table has is a patch's, not the model's
	whole := genStart(t, shipped, upstream)
	ms, _ = genPhase{seed, "whole", c, qs, true, false}.compare(t, whole.DNS(), "", stockAnswers)
	all = append(all, ms...)
	whole.Stop()
	lap("whole")

	k.Freeze()
	defer k.Thaw()
	ours.Stop() // SIGTERM: a clean stop writes the last state
	laps = append(laps, "restarted, ready after "+genRestart(t, ours).String())
	ms, _ = genPhase{seed, "restart", c, qs, true, false}.compare(t, ours.DNS(), "", stockAnswers)
	all = append(all, ms...)
	lap("restart")
	if mc {
		genImportsAnswered(t, qs, stockAnswers, ms)
	}

	genReport(t, fmt.Sprintf("seed-%d", seed), all)
	t.Logf("seed %d: %d namespaces, %d Services, %d slices, %d steps, %d questions, %d differences; %s",
		seed, len(c.Namespaces), len(c.Services), len(c.Slices), p.steps, len(qs), len(all), strings.Join(laps, ", "))
}

// genPhase is one comparison of a seed's run.
type genPhase struct {
	seed    int64
	name    string
	c       *clustergen.Cluster // the cluster as both servers have it now
	qs      []clustergen.Question
	cd      bool // ask with the CD bit: fresh cache keys for a later phase
	control bool // the stock plugin on both sides
}

// compare asks every question of ours and of the stock server (or, with
// stockAddr "", takes the stock answers given) and reports each difference
// that genAllowed does not accept. It returns the differences and the
// stock answers.
func (p genPhase) compare(t *testing.T, oursAddr, stockAddr string, stockAnswers []genReply) ([]genMismatch, []genReply) {
	t.Helper()
	if stockAddr != "" {
		stockAnswers = make([]genReply, len(p.qs))
	}
	d := genDiff{c: p.c, cnames: p.c.CNAMEConflicts(), control: p.control}
	var ms []genMismatch
	failed := 0
	for i, q := range p.qs {
		a := genAsk(oursAddr, q, p.cd)
		if stockAddr != "" {
			stockAnswers[i] = genAsk(stockAddr, q, p.cd)
		}
		b := stockAnswers[i]
		if a.text == b.text {
			continue
		}
		d.q, d.ours, d.stock = q, a, b
		m := genMismatch{Seed: p.seed, Phase: p.name, Q: q, Ours: a.text, Stock: b.text, Reason: d.allowed()}
		ms = append(ms, m)
		if m.Reason != "" {
			continue
		}
		if failed++; failed <= 20 {
			t.Errorf("seed %d, %s: %s\n  meshdns: %s\n  stock:   %s", p.seed, p.name, q, a.text, b.text)
		}
	}
	if failed > 0 {
		t.Errorf("seed %d, %s: %d of %d questions answered differently", p.seed, p.name, failed, len(p.qs))
	}
	t.Logf("seed %d, %s: %d of %d questions answered alike (%d allowed differences)", p.seed, p.name, len(p.qs)-len(ms), len(p.qs), len(ms)-failed)
	return ms, stockAnswers
}

// genRestart starts meshdns again while the API server is frozen and waits
// for it to be ready from its snapshot; a meshdns that is not ready after
// 5 s is a failure, but its answers are still compared.
func genRestart(t *testing.T, s *Server) time.Duration {
	t.Helper()
	s.opts.NoWait = true
	start := time.Now()
	s.start()
	addr := s.directiveAddr("ready")
	for time.Since(start) < 5*time.Second {
		if resp, err := http.Get("http://" + addr + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				genWaitDNS(t, s)
				return time.Since(start).Round(time.Millisecond)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("restarted while the API server is frozen: not ready after 5s (no snapshot loaded?)\n%s", tail(s.Log(), 20))
	return time.Since(start).Round(time.Millisecond)
}

// genQuickStop shortens the lameduck of the shipped Corefile's health
// block: each seed stops meshdns twice (the whole phase's server, and the
// restart), and what lameduck does is no part of this test.
func genQuickStop(t *testing.T, corefile string) string {
	t.Helper()
	if !strings.Contains(corefile, "lameduck 5s") {
		t.Fatalf("the shipped Corefile has no %q:\n%s", "lameduck 5s", corefile)
	}
	return strings.Replace(corefile, "lameduck 5s", "lameduck 100ms", 1)
}

// genStart starts meshdns with corefile and waits until it is ready and
// answers on its DNS port.
func genStart(t *testing.T, corefile string, o Options) *Server {
	t.Helper()
	s := Start(t, corefile, o)
	genWaitDNS(t, s)
	return s
}

// genCheckRegressions fails when a regression seed no longer asks the
// question it is named for.
func genCheckRegressions(t *testing.T, seed int64, size genSize, qs []clustergen.Question) {
	t.Helper()
	for _, reg := range genRegressions {
		if reg.seed != seed || reg.soak != (size == genSoak) {
			continue
		}
		found := false
		for _, q := range qs {
			if strings.ToLower(q.String()) == reg.question {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("regression case %s: seed %d no longer asks %q (the generator changed: pick the seed anew)", reg.name, seed, reg.question)
		}
	}
}
