package test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
)

// TestDistroServerBlocksAgainstStock is issue 32's differential of whole
// server blocks: the Corefiles the distributions ship
// (plugin/endpointsvc/testdata/distros, each with its source in its
// header) and the ones operators build from them by turning neighbours on
// (testdata/distros/operator: cache with its options, autopath, rewrite,
// template, k8s_external, transfer, view, hosts, metadata), every line
// kept, run as two real processes against one real kube-apiserver holding
// a generated cluster: stock CoreDNS v1.15.0 (build/peer-tools.sh
// coredns) with the Corefile as written, and meshdns with its kubernetes
// block renamed endpointsvc (plus `source kubernetes` and `schema
// kubernetes`). Only what a test on loopback needs is changed, on both
// sides alike (distroLocal): listeners on loopback ports, forward to a
// loopback stub that answers SERVFAIL, hosts files from the test's
// directory, lameduck short.
//
// One API server serves every seed (a seed's objects are deleted before
// the next one's are created). Per seed, the processes of every block
// start at once over the cluster as it is; every generated question (a
// share of them per block in make test) and the block's own (rewritten
// names, search-list names, k8s_external names, autopath from client
// Pods, an AXFR) are asked of both over UDP; then the cluster takes
// random changes while all run, and all is asked again (with the CD bit:
// fresh cache keys).
//
// Answers must be the same: rcode, AA and TC, and every section with its
// TTLs, sorted (loadbalance shuffles; order is not part of an RRset). The
// differences accepted are genAllowed's and distroAllowed's, each with its
// reason (docs/cluster-dns.md).
//
// make test runs seeds 1-3 of distroTestSize; MESHDNS_DISTRO_SEEDS=n runs
// n seeds of distroSoakSize from MESHDNS_DISTRO_FIRST (default 100)
// instead (build/soak.sh, part distros); MESHDNS_DISTRO=name runs the
// blocks whose name contains name.
func TestDistroServerBlocksAgainstStock(t *testing.T) {
	start := time.Now()
	blocks := distroBlocks(t)
	size, seeds := distroTestSize, []int64{1, 2, 3}
	if n := genEnvInt(t, "MESHDNS_DISTRO_SEEDS", 0); n > 0 {
		size, seeds = distroSoakSize, nil
		for i, first := 0, genEnvInt(t, "MESHDNS_DISTRO_FIRST", 100); i < n; i++ {
			seeds = append(seeds, int64(first+i))
		}
	}
	env := &distroEnv{coredns: peerTool(t, "coredns"), k: startKubeAPI(t), upstream: genUpstream(t)}
	t.Logf("API server ready after %v", time.Since(start).Round(time.Millisecond))
	var total distroCount
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { total.add(distroSeed(t, env, seed, size, blocks)) })
	}
	t.Logf("%d seeds, %d blocks: %s; %v", len(seeds), len(blocks), total, time.Since(start).Round(time.Millisecond))
}

// distroSize is how much a seed asks.
type distroSize struct {
	cfg   clustergen.Config
	steps int     // random changes between the two phases
	share float64 // of the generated questions each block asks (a seeded draw per block)
}

var (
	// distroTestSize keeps make test's three seeds within ~40 s: a smaller
	// cluster (still every Service kind, Pods, and the namespaces the
	// client Pods live in: default, shop, svc, team-a), each block a
	// third of its questions.
	distroTestSize = distroSize{
		cfg:   clustergen.Config{Namespaces: 9, Services: 18, MaxSlices: 2, MaxEndpoints: 3, DualStack: true, Zone: "cluster.local", Pods: 16, External: true},
		steps: 20, share: 1.0 / 3,
	}
	// distroSoakSize: clustergen.Small with Pods, every question to every block.
	distroSoakSize = distroSize{cfg: func() clustergen.Config {
		cfg := clustergen.Small()
		cfg.Pods, cfg.External = 40, true
		return cfg
	}(), steps: 60, share: 1}
)

// distroParallel is how many blocks are asked at a time (each by
// distroCompare's six askers): the blocks' processes are apart, and the
// cluster holds still while a phase is asked.
const distroParallel = 4

// distroEnv is what the seeds share: the API server with the client Pods
// (made with the first seed's namespaces), the upstream stub, the stock
// binary, the last seed's cluster (deleted before the next is created)
// and the marker count.
type distroEnv struct {
	coredns  string
	k        *kubeAPI
	upstream int
	clients  []podsClient
	last     *clustergen.Cluster
	mark     int
}

// distroRun is one block's pair of processes in a seed.
type distroRun struct {
	b           distroBlock
	ours, stock *Server
	n           distroCount
}

// distroSeed runs every block on one generated cluster of seed.
func distroSeed(t *testing.T, env *distroEnv, seed int64, size distroSize, blocks []distroBlock) distroCount {
	start := time.Now()
	if env.last != nil {
		distroReset(t, env.k, env.last)
	}
	c := clustergen.Generate(seed, size.cfg)
	env.last = c
	genCreate(t, env.k, c)
	distroLBStatus(t, env.k, c)
	for _, p := range c.Pods {
		genMust(t, env.k, clustergen.Change{Op: clustergen.Add, Obj: p.DeepCopy()})
	}
	if env.clients == nil {
		env.clients = podsClients(t, env.k)
	}
	created := time.Since(start)
	runs := distroStartAll(t, env, blocks)
	t.Logf("seed %d: cluster created in %v, %d processes ready after %v", seed, created.Round(time.Millisecond),
		2*len(runs), (time.Since(start) - created).Round(time.Millisecond))
	r := rand.New(rand.NewSource(seed))
	for phase, name := range []string{"live", "patched"} {
		if phase == 1 {
			for range size.steps {
				genMust(t, env.k, c.Step(r))
			}
		}
		distroMark(t, env, runs)
		p := distroPhase{seed: seed, name: name, c: c, cd: phase == 1}
		qs := clustergen.Questions(c, size.cfg, r)
		var wg sync.WaitGroup
		slots := make(chan struct{}, distroParallel)
		for _, run := range runs {
			// every draw made here, in block order: the goroutines draw nothing
			rb := rand.New(rand.NewSource(r.Int63()))
			groups := append([][]clustergen.Question{distroSample(qs, size.share, rb)}, run.b.questions(c, qs, size.share, rb)...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				distroAskBlock(t, env, run, p, groups)
			}()
		}
		wg.Wait()
	}
	var total distroCount
	var wg sync.WaitGroup
	for _, run := range runs {
		total.add(run.n)
		t.Logf("%s, seed %d: %s", run.b.name, seed, run.n)
		wg.Add(2)
		go func() { defer wg.Done(); run.ours.Stop() }()
		go func() { defer wg.Done(); run.stock.Stop() }()
	}
	wg.Wait()
	t.Logf("seed %d, %d blocks: %s; %v", seed, len(runs), total, time.Since(start).Round(time.Millisecond))
	return total
}

// distroAskBlock asks one block's pair everything of a phase: the
// generated questions, then each group of the block's own apart (rewrite
// runs before cache, so a rewritten name and its target share a cache
// entry, whose names are those of whichever was asked first: that must
// not depend on the order the askers ran in), then autopath from the
// client Pods, then the AXFR.
func distroAskBlock(t *testing.T, env *distroEnv, run *distroRun, p distroPhase, groups [][]clustergen.Question) {
	p.b = run.b
	ours, stock := run.ours.DNS(), run.stock.DNS()
	for g, qs := range groups {
		pg := p
		pg.qs = qs
		if g > 0 {
			pg.name = fmt.Sprintf("%s-own%d", p.name, g)
		}
		run.n.add(distroCompare(t, pg, ours, stock))
	}
	if run.b.autopath {
		run.n.add(distroCompareAutopath(t, p, env.clients, ours, stock))
	}
	if run.b.axfr != "" {
		run.n.add(distroCompareAXFR(t, p, ours, stock))
	}
}

// distroStartAll starts both processes of every block at once and waits
// until all answer.
func distroStartAll(t *testing.T, env *distroEnv, blocks []distroBlock) []*distroRun {
	t.Helper()
	files := map[string]string{distroHostsFile: distroHosts}
	var runs []*distroRun
	for _, b := range blocks {
		dir := t.TempDir()
		o := Options{Dir: filepath.Join(dir, "meshdns"), Files: files, Ports: map[int]int{5301: env.upstream}, NoWait: true}
		run := &distroRun{b: b, ours: Start(t, distroOurs(t, b.corefile, env.k.Kubeconfig), o)}
		o.Dir, o.Bin = filepath.Join(dir, "coredns"), env.coredns
		run.stock = Start(t, distroStock(t, b.corefile, env.k.Kubeconfig), o)
		runs = append(runs, run)
	}
	for _, run := range runs {
		for _, s := range []*Server{run.ours, run.stock} {
			s.waitReady()
			genWaitDNS(t, s)
		}
	}
	return runs
}

// distroReset deletes the objects of a seed's cluster (its namespaces
// stay: the next seed's are the same ones, the schema words first).
func distroReset(t *testing.T, k *kubeAPI, c *clustergen.Cluster) {
	t.Helper()
	for _, sl := range c.Slices {
		genMust(t, k, clustergen.Change{Op: clustergen.Delete, Obj: sl})
	}
	for _, s := range c.Services {
		genMust(t, k, clustergen.Change{Op: clustergen.Delete, Obj: s})
	}
	for _, p := range c.Pods {
		genMust(t, k, clustergen.Change{Op: clustergen.Delete, Obj: p})
	}
}

// distroSample is each question of qs with probability share.
func distroSample(qs []clustergen.Question, share float64, r *rand.Rand) []clustergen.Question {
	if share >= 1 {
		return qs
	}
	var out []clustergen.Question
	for _, q := range qs {
		if r.Float64() < share {
			out = append(out, q)
		}
	}
	return out
}

// distroBlock is one Corefile to compare.
type distroBlock struct {
	name     string
	corefile string // as the distribution or operator writes it (the kubernetes plugin)
	autopath bool   // has autopath @kubernetes for the Pod network's clients
	view     bool   // has a view for the Pod network (127.77.0.0/16): its own kubernetes block
	axfr     string // a zone to transfer (AXFR over TCP), "" none
	rewrite  bool   // asks names under cluster.old and alias.example.test too
	external string // a k8s_external zone to ask, "" none
	template bool   // asks the names a search list makes of full cluster names
}

// questions are the block's own questions beside the generated ones qs, in
// groups asked one after another: names rewritten to cluster.local from
// cluster.old, from alias.example.test, search-list names for the
// template, k8s_external names; each a share of what it could be.
func (b distroBlock) questions(c *clustergen.Cluster, qs []clustergen.Question, share float64, r *rand.Rand) [][]clustergen.Question {
	var old, alias, tmpl []clustergen.Question
	for i, q := range qs {
		name := strings.ToLower(q.Name)
		switch {
		case b.rewrite && i%3 == 0 && strings.HasSuffix(name, ".cluster.local."):
			old = append(old, clustergen.Question{Name: strings.TrimSuffix(name, "cluster.local.") + "cluster.old.", Type: q.Type})
			if strings.HasSuffix(name, ".svc.cluster.local.") {
				alias = append(alias, clustergen.Question{Name: strings.TrimSuffix(name, "svc.cluster.local.") + "alias.example.test.", Type: q.Type})
			}
		case b.template && i%4 == 0 && strings.HasSuffix(name, ".svc.cluster.local."):
			ns := c.Namespaces[r.Intn(len(c.Namespaces))].Name
			tmpl = append(tmpl, clustergen.Question{Name: name + ns + ".svc.cluster.local.", Type: q.Type})
		}
	}
	var ext []clustergen.Question
	if b.external != "" {
		ext = clustergen.ExternalQuestions(c, b.external, r)
	}
	var out [][]clustergen.Question
	for _, g := range [][]clustergen.Question{old, alias, tmpl, ext} {
		if g = distroSample(g, share, r); len(g) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// distroBlocks reads the distributions' Corefiles and the operators',
// dropping a distribution whose Corefile is another's once made local.
func distroBlocks(t *testing.T) []distroBlock {
	t.Helper()
	dir := filepath.Join(repoRoot, "plugin", "endpointsvc", "testdata", "distros")
	files, _ := filepath.Glob(filepath.Join(dir, "*.Corefile"))
	ops, _ := filepath.Glob(filepath.Join(dir, "operator", "*.Corefile"))
	if len(files) < 6 || len(ops) < 5 {
		t.Fatalf("distribution Corefiles in %s: %d, operators': %d", dir, len(files), len(ops))
	}
	only := os.Getenv("MESHDNS_DISTRO")
	var out []distroBlock
	seen := map[string]string{}
	for _, f := range append(files, ops...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".Corefile")
		if filepath.Base(filepath.Dir(f)) == "operator" {
			name = "operator-" + name
		}
		cf := string(b)
		key := distroLocal(t, distroStrip(cf), "")
		if first, ok := seen[key]; ok {
			t.Logf("%s: the Corefile of %s once local (compared there)", name, first)
			continue
		}
		seen[key] = name
		if only != "" && !strings.Contains(name, only) {
			continue
		}
		d := distroBlock{name: name, corefile: cf}
		d.autopath = strings.Contains(cf, "autopath @kubernetes")
		d.view = strings.Contains(cf, "incidr(client_ip(), '127.77.0.0/16')")
		if strings.Contains(cf, "\n    transfer cluster.local") {
			d.axfr = "cluster.local."
		}
		d.rewrite = strings.Contains(cf, "rewrite ")
		d.template = strings.Contains(cf, "template ")
		if strings.Contains(cf, "k8s_external k8s_external.local") {
			d.external = "k8s_external.local"
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		t.Fatalf("MESHDNS_DISTRO=%q matches no block", only)
	}
	return out
}

// distroStrip is a Corefile without its comment lines.
func distroStrip(cf string) string {
	var out []string
	for _, l := range strings.Split(cf, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
