package k8sdns_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// seeds is the number of generated clusters a property tries: a few in a
// normal run, more with MESHDNS_GEN_SEEDS.
func seeds(normal int) []int64 {
	n := normal
	if v, err := strconv.Atoi(os.Getenv("MESHDNS_GEN_SEEDS")); err == nil && v > 0 {
		n = v
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

func model(c *clustergen.Cluster) *k8sdns.Cluster {
	m := kubesource.DNSCluster(c.Namespaces, c.Services, append(slices.Clone(c.Slices), c.ImportSlices...))
	if len(c.Pods) > 0 {
		m.Pods = kubesource.DNSPods(c.Pods)
	}
	if len(c.Imports) > 0 {
		m.Imports = kubesource.DNSImports(c.Imports)
	}
	return m
}

// configs are the generator's configurations the properties run with:
// without Pods, and with Pods (pods verified's index), some terminating.
func configs() map[string]clustergen.Config {
	withPods := clustergen.Small()
	withPods.Pods, withPods.Terminating = 40, true
	withImports := clustergen.Small()
	withImports.Imports = 12
	withExternal := clustergen.Small()
	withExternal.External = true
	return map[string]clustergen.Config{"": clustergen.Small(), "pods": withPods, "multicluster": withImports, "external": withExternal}
}

// patchOf is the patch a source sends for change ch of c (after it):
// the names ch touched, each with its whole new content, and the
// namespaces when one came. labels are the slices' Service labels before
// the change (a slice may move to another Service).
func patchOf(c *clustergen.Cluster, ch clustergen.Change, labels map[string]string) *k8sdns.Patch {
	touched := map[k8sdns.Key]bool{}
	p := &k8sdns.Patch{}
	switch o := ch.Obj.(type) {
	case *corev1.Namespace:
		p.Namespaces, p.SetNamespaces = model(c).Namespaces, true
	case *corev1.Service:
		touched[k8sdns.Key{Namespace: o.Namespace, Name: o.Name}] = true
	case *mcsapi.ServiceImport:
		touched[k8sdns.Key{Namespace: o.Namespace, Name: o.Name, Import: true}] = true
	case *discoveryv1.EndpointSlice:
		if imp := o.Labels[mcsapi.LabelServiceName]; imp != "" { // an import's (steps keep the label)
			touched[k8sdns.Key{Namespace: o.Namespace, Name: imp, Import: true}] = true
			break
		}
		touched[k8sdns.Key{Namespace: o.Namespace, Name: o.Labels[discoveryv1.LabelServiceName]}] = true
		if old, ok := labels[o.Namespace+"/"+o.Name]; ok {
			touched[k8sdns.Key{Namespace: o.Namespace, Name: old}] = true
		}
	case *corev1.Pod:
		p.Pods = podsAt(model(c), o) // a Pod's addresses are set once: the change's are all it touched
	}
	m := model(c)
	for k := range touched {
		ch := k8sdns.Change{Key: k}
		if k.Import {
			for _, s := range m.Imports {
				if s.Namespace == k.Namespace && s.Name == k.Name {
					ch.Service = s
				}
			}
			for _, sl := range m.Slices {
				if sl.Namespace == k.Namespace && sl.Import == k.Name {
					ch.Slices = append(ch.Slices, sl)
				}
			}
			p.Changes = append(p.Changes, ch)
			continue
		}
		for _, s := range m.Services {
			if s.Namespace == k.Namespace && s.Name == k.Name {
				ch.Service = s
			}
		}
		for _, sl := range m.Slices {
			if sl.Namespace == k.Namespace && sl.Service == k.Name {
				ch.Slices = append(ch.Slices, sl)
			}
		}
		p.Changes = append(p.Changes, ch)
	}
	return p
}

// podsAt are the pod index entries of o's addresses in m (none: gone).
func podsAt(m *k8sdns.Cluster, o *corev1.Pod) []k8sdns.PodAddr {
	var out []k8sdns.PodAddr
	for _, ip := range o.Status.PodIPs {
		a := netip.MustParseAddr(ip.IP)
		e := k8sdns.PodAddr{Addr: a}
		for _, p := range m.Pods {
			if p.Addr == a {
				e.Namespaces = p.Namespaces
			}
		}
		out = append(out, e)
	}
	return out
}

func sliceLabels(c *clustergen.Cluster) map[string]string {
	m := map[string]string{}
	for _, sl := range c.Slices {
		m[sl.Namespace+"/"+sl.Name] = sl.Labels[discoveryv1.LabelServiceName]
	}
	return m
}

// TestPatchedEqualsBuilt: after every random step of a generated cluster
// (Services, slices and Pods added, changed, moved and deleted, namespaces
// added), the table patched with that step's names equals the table built
// whole from the cluster.
func TestPatchedEqualsBuilt(t *testing.T) {
	for name, cfg := range configs() {
		for _, seed := range seeds(4) {
			t.Run(fmt.Sprint(name, seed), func(t *testing.T) { patchedEqualsBuilt(t, seed, cfg) })
		}
	}
}

// patchedEqualsBuilt runs 200 steps of seed's cluster.
func patchedEqualsBuilt(t *testing.T, seed int64, cfg clustergen.Config) {
	c := clustergen.Generate(seed, cfg)
	r := rand.New(rand.NewSource(seed))
	tbl := k8sdns.Build(model(c))
	for step := range 200 {
		labels := sliceLabels(c)
		ch := c.Step(r)
		tbl = tbl.Patched(patchOf(c, ch, labels))
		if got, want := tbl.Describe(), k8sdns.Build(model(c)).Describe(); got != want {
			t.Fatalf("step %d (%v %T): patched table differs from the whole build:\n%s\nwant:\n%s", step, ch.Op, ch.Obj, got, want)
		}
	}
}

// TestSnapshotRoundTrip: the snapshot of any generated cluster decodes to
// a cluster whose table equals the live one.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, seed := range seeds(4) {
		cfg := configs()[[]string{"", "pods", "multicluster", "external"}[seed%4]]
		c := model(clustergen.Generate(seed, cfg))
		var buf bytes.Buffer
		if err := c.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		d, err := k8sdns.DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, buf.String())
		}
		if got, want := k8sdns.Build(d).Describe(), k8sdns.Build(c).Describe(); got != want {
			t.Fatalf("seed %d: the snapshot's table differs:\n%s\nwant:\n%s", seed, got, want)
		}
	}
}
