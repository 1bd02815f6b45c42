package test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
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
// Per block: both servers start over the cluster as it is, every
// generated question (and the block's own: rewritten names, k8s_external
// names, autopath from client Pods, an AXFR) is asked of both over UDP;
// then 10 random changes are made while both run, and all is asked again
// (with the CD bit: fresh cache keys). The cluster keeps changing from
// block to block, so each block also meets another state of it.
//
// Answers must be the same: rcode, AA and TC, and every section with its
// TTLs, sorted (loadbalance shuffles; order is not part of an RRset). The
// differences accepted are genAllowed's and distroAllowed's, each with its
// reason (docs/cluster-dns.md).
//
// MESHDNS_DISTRO_SEEDS=n runs n seeds from MESHDNS_DISTRO_FIRST (default
// 100) instead of seed 1 (build/soak.sh, part distros); MESHDNS_DISTRO=name
// runs the blocks whose name contains name.
func TestDistroServerBlocksAgainstStock(t *testing.T) {
	blocks := distroBlocks(t)
	seeds := []int64{1}
	if n := genEnvInt(t, "MESHDNS_DISTRO_SEEDS", 0); n > 0 {
		seeds = nil
		for i, first := 0, genEnvInt(t, "MESHDNS_DISTRO_FIRST", 100); i < n; i++ {
			seeds = append(seeds, int64(first+i))
		}
	}
	coredns := peerTool(t, "coredns")
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { distroSeed(t, seed, blocks, coredns) })
	}
}

// distroSeed runs every block on one generated cluster of seed.
func distroSeed(t *testing.T, seed int64, blocks []distroBlock, coredns string) {
	start := time.Now()
	k := startKubeAPI(t)
	cfg := clustergen.Small()
	cfg.Pods, cfg.External = 40, true
	c := clustergen.Generate(seed, cfg)
	genCreate(t, k, c)
	distroLBStatus(t, k, c)
	for _, p := range c.Pods {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: p.DeepCopy()})
	}
	clients := podsClients(t, k)
	upstream := genUpstream(t)
	r := rand.New(rand.NewSource(seed))
	mark := 0
	var total distroCount
	t.Logf("seed %d: cluster and API server ready after %v", seed, time.Since(start).Round(time.Millisecond))
	for _, b := range blocks {
		t.Run(b.name, func(t *testing.T) {
			bstart := time.Now()
			dir := t.TempDir()
			files := map[string]string{distroHostsFile: distroHosts}
			oursO := Options{Dir: filepath.Join(dir, "meshdns"), Files: files, Ports: map[int]int{5301: upstream}}
			stockO := Options{Dir: filepath.Join(dir, "coredns"), Files: files, Ports: map[int]int{5301: upstream}, Bin: coredns}
			ours := genStart(t, distroOurs(t, b.corefile, k.Kubeconfig), oursO)
			stock := genStart(t, distroStock(t, b.corefile, k.Kubeconfig), stockO)
			var n distroCount
			for phase, cd := range []bool{false, true} {
				if phase == 1 {
					for range 10 {
						genMust(t, k, c.Step(r))
					}
				}
				genMark(t, k, mark, "cluster.local", ours, stock)
				mark++
				time.Sleep(300 * time.Millisecond) // the Pod watch's last events (another watch than the marker's)
				name := []string{"live", "patched"}[phase]
				// the generated questions, then each group of the block's own
				// apart: a rewritten name and its original share a cache key,
				// and which of them the cache saw first must not depend on
				// the order the askers ran in
				for g, qs := range append([][]clustergen.Question{clustergen.Questions(c, cfg, r)}, b.questions(c, r)...) {
					pname := name
					if g > 0 {
						pname = fmt.Sprintf("%s-own%d", name, g)
					}
					n.add(distroCompare(t, distroPhase{b, seed, pname, c, qs, cd}, ours.DNS(), stock.DNS()))
				}
				if b.autopath {
					n.add(distroCompareAutopath(t, distroPhase{b: b, seed: seed, name: name, c: c}, clients, ours.DNS(), stock.DNS()))
				}
				if b.axfr != "" {
					n.add(distroCompareAXFR(t, b.axfr, ours.DNS(), stock.DNS()))
				}
			}
			ours.Stop()
			stock.Stop()
			total.add(n)
			t.Logf("%s, seed %d: %s; %v", b.name, seed, n, time.Since(bstart).Round(time.Millisecond))
		})
	}
	t.Logf("seed %d, %d blocks: %s; %v", seed, len(blocks), total, time.Since(start).Round(time.Millisecond))
}

// distroBlock is one Corefile to compare.
type distroBlock struct {
	name     string
	corefile string // as the distribution or operator writes it (the kubernetes plugin)
	autopath bool   // has autopath @kubernetes for the Pod network's clients
	axfr     string // a zone to transfer (AXFR over TCP), "" none
	rewrite  bool   // asks names under cluster.old and alias.example.test too
	external string // a k8s_external zone to ask, "" none
	template bool   // asks the names a search list makes of full cluster names
}

// questions are the block's own questions beside the generated ones, in
// groups asked one after another: names rewritten to cluster.local from
// cluster.old, from alias.example.test, search-list names for the
// template, k8s_external names.
func (b distroBlock) questions(c *clustergen.Cluster, r *rand.Rand) [][]clustergen.Question {
	var old, alias, tmpl []clustergen.Question
	gen := clustergen.Questions(c, c.Config(), rand.New(rand.NewSource(r.Int63())))
	for i, q := range gen {
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
	var out [][]clustergen.Question
	for _, g := range [][]clustergen.Question{old, alias, tmpl} {
		if len(g) > 0 {
			out = append(out, g)
		}
	}
	if b.external != "" {
		out = append(out, clustergen.ExternalQuestions(c, b.external, r))
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
