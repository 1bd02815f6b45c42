package replica

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"slices"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
)

// mcModel is a generated cluster with ServiceImports, as the kubernetes
// source maps it with multicluster.
func mcModel(c *clustergen.Cluster) *k8sdns.Cluster {
	m := kubesource.DNSCluster(c.Namespaces, c.Services, append(slices.Clone(c.Slices), c.ImportSlices...))
	m.Imports = kubesource.DNSImports(c.Imports)
	return m
}

// TestApplyImports: a whole state and changes with ServiceImports' names
// ({"import":{…}} lines, slices labelled with both a Service and an
// import once each) make the follower's table the leader's.
func TestApplyImports(t *testing.T) {
	cfg := clustergen.Small()
	cfg.Imports = 12
	c := clustergen.Generate(1, cfg)
	leader := k8sdns.Build(mcModel(c))
	sink := &fakeSink{}
	a := &applier{sink: sink, served: servedTable(sink), stats: &FollowerStats{}, zone: "test."}
	epoch := "00000000000000aa"
	send := func(lines ...[]byte) {
		t.Helper()
		for _, l := range lines {
			if err := a.line(l); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
		}
	}
	nss, _ := json.Marshal(map[string][]string{"namespaces": leader.Namespaces()})
	send(bytes.TrimSuffix(appendHeader(nil, epoch, 1, true, Version, 0, 0), []byte("\n")), nss)
	for ch := range leader.All() {
		send(k8sdns.AppendChange(nil, ch))
	}
	synced := appendSynced(nil, 1, Version, wholeDigest(leader), nil)
	send(synced[:len(synced)-1])
	if got, want := sink.tbl.Load().Describe(), leader.Describe(); got != want {
		t.Fatalf("the follower's whole table:\n%s\nwant:\n%s", got, want)
	}
	if leader.Imports() == 0 {
		t.Fatal("no imports generated")
	}
	r := rand.New(rand.NewSource(1))
	for gen := uint64(2); gen < 40; gen++ {
		c.Step(r)
		next := k8sdns.Build(mcModel(c))
		keys, _ := next.Changed(leader)
		for _, k := range keys {
			send(k8sdns.AppendChange(nil, next.Name(k)))
		}
		synced := appendSynced(nil, gen, Version, wholeDigest(next), nil)
		send(synced[:len(synced)-1])
		if got, want := sink.tbl.Load().Describe(), next.Describe(); got != want {
			t.Fatalf("generation %d: the follower's patched table:\n%s\nwant:\n%s", gen, got, want)
		}
		leader = next
	}
}
