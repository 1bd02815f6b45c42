package endpointsvc

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// The properties of schema kubernetes on generated clusters, through the
// kubernetes source (over a fake clientset) and the plugin: the snapshot
// a live instance writes answers every question as the live table did,
// after a restart without API server; and the table the source patches
// step by step answers as the table built whole from the cluster.

// fakeCluster is a fake clientset holding a generated cluster's objects.
type fakeCluster struct {
	client *fake.Clientset
	rv     int             // the resourceVersion of the next write, as an API server counts
	listed map[string]bool // the Pods (namespace/name) the API server lists for the phase field selector
	nsSel  labels.Selector // namespace_labels: the Namespaces the API server lists and watches (nil: all)
}

func newFakeCluster(t *testing.T, c *clustergen.Cluster) *fakeCluster {
	return newFakeClusterSelecting(t, c, nil)
}

// newFakeClusterSelecting is newFakeCluster for a source with a
// namespace_labels selector (nil: none): the fake clientset's list
// filters by labels, but its watch does not, so the Namespaces added
// later that the selector leaves out are not added (as the API server's
// watch would not send them; Namespaces are never relabelled).
func newFakeClusterSelecting(t *testing.T, c *clustergen.Cluster, nsSel labels.Selector) *fakeCluster {
	f := &fakeCluster{client: fake.NewClientset(), listed: map[string]bool{}}
	for _, o := range c.Namespaces {
		f.apply(t, clustergen.Change{Op: clustergen.Add, Obj: o.DeepCopy()})
	}
	f.nsSel = nsSel
	for _, o := range c.Services {
		f.apply(t, clustergen.Change{Op: clustergen.Add, Obj: o.DeepCopy()})
	}
	for _, o := range c.Slices {
		f.apply(t, clustergen.Change{Op: clustergen.Add, Obj: o.DeepCopy()})
	}
	for _, o := range c.Pods {
		f.apply(t, clustergen.Change{Op: clustergen.Add, Obj: o.DeepCopy()})
	}
	return f
}

// applyPod makes a Pod change as the source's watch sees it: the fake
// clientset has no field selectors, so a Pod the phase selector leaves out
// is not created, and one that an update takes out of it is deleted (the
// API server's watch sends it as deleted).
func (f *fakeCluster) applyPod(ctx context.Context, op clustergen.Op, o *corev1.Pod) error {
	key, api := o.Namespace+"/"+o.Name, f.client.CoreV1().Pods(o.Namespace)
	in := op != clustergen.Delete && podListed(o)
	switch {
	case in && f.listed[key]:
		_, err := api.Update(ctx, o, metav1.UpdateOptions{})
		return err
	case in:
		f.listed[key] = true
		_, err := api.Create(ctx, o, metav1.CreateOptions{})
		return err
	case f.listed[key]:
		delete(f.listed, key)
		return api.Delete(ctx, o.Name, metav1.DeleteOptions{})
	}
	return nil
}

// apply makes change ch in the fake cluster, with a new resourceVersion.
func (f *fakeCluster) apply(t *testing.T, ch clustergen.Change) {
	t.Helper()
	f.rv++
	obj := ch.Obj.(metav1.Object)
	obj.SetResourceVersion(fmt.Sprint(f.rv))
	ctx := context.Background()
	var err error
	switch o := ch.Obj.(type) {
	case *corev1.Namespace:
		if f.nsSel != nil && !f.nsSel.Matches(labels.Set(o.Labels)) {
			return
		}
		err = write(ch.Op, o, f.client.CoreV1().Namespaces(), ctx)
	case *corev1.Service:
		err = write(ch.Op, o, f.client.CoreV1().Services(o.Namespace), ctx)
	case *discoveryv1.EndpointSlice:
		err = write(ch.Op, o, f.client.DiscoveryV1().EndpointSlices(o.Namespace), ctx)
	case *corev1.Pod:
		err = f.applyPod(ctx, ch.Op, o)
	}
	if err != nil {
		t.Fatalf("%v %T: %v", ch.Op, ch.Obj, err)
	}
}

// writer is a typed client's create, update and delete.
type writer[T runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

func write[T interface {
	runtime.Object
	GetName() string
}](op clustergen.Op, o T, c writer[T], ctx context.Context) error {
	var err error
	switch op {
	case clustergen.Add:
		_, err = c.Create(ctx, o, metav1.CreateOptions{})
	case clustergen.Update:
		_, err = c.Update(ctx, o, metav1.UpdateOptions{})
	case clustergen.Delete:
		err = c.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
	}
	return err
}

// kubePlugin is the shipped stanza's instance over the fake cluster, with a
// snapshot at snap ("" none) and the fake upstream.
func kubePlugin(t *testing.T, client kubernetes.Interface, snap string) *Endpointsvc {
	t.Helper()
	return kubePluginWith(t, client, snap, ourCorefile)
}

// kubePluginWith is kubePlugin with another Corefile block.
func kubePluginWith(t *testing.T, client kubernetes.Interface, snap, corefile string) *Endpointsvc {
	t.Helper()
	e, err := parse(caddy.NewTestController("dns", corefile))
	if err != nil {
		t.Fatal(err)
	}
	e.schema.(*dnsSchema).srv.Upstream = outside{}
	e.Next = test.NextHandler(dns.RcodeRefused, nil)
	src := e.source.(*kubesource.Source)
	src.NewClient = func() (kubernetes.Interface, error) {
		if client == nil {
			return nil, errors.New("API server unreachable")
		}
		return client, nil
	}
	src.Debounce = 2e6
	e.snapshotPath = snap
	e.start(e.source)
	t.Cleanup(e.stop)
	if !e.Ready() {
		t.Fatal("not ready")
	}
	return e
}

// answers are e's canonical replies to qs.
func answers(e *Endpointsvc, qs []clustergen.Question) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i], _ = serve(e, q)
	}
	return out
}

// firstDiff describes the first question two lists of answers differ on.
func firstDiff(qs []clustergen.Question, got, want []string) string {
	for i := range qs {
		if got[i] != want[i] {
			return fmt.Sprintf("%s:\n  got:  %s\n  want: %s", qs[i], got[i], want[i])
		}
	}
	return ""
}

// TestGeneratedSnapshotRestart: a live instance over a generated cluster
// writes its snapshot; an instance started from it while the API server
// is unreachable answers every generated question as the live one did.
func TestGeneratedSnapshotRestart(t *testing.T) {
	for _, seed := range genSeeds(t, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := clustergen.Small()
			c := clustergen.Generate(seed, cfg)
			qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(seed)))
			snap := filepath.Join(t.TempDir(), "snap.json")
			live := kubePlugin(t, newFakeCluster(t, c).client, snap)
			want := answers(live, qs)
			live.stop()
			restarted := kubePlugin(t, nil, snap)
			if d := firstDiff(qs, answers(restarted, qs), want); d != "" {
				t.Fatalf("after the restart from the snapshot, %s", d)
			}
		})
	}
}

// TestGeneratedPatchesEqualWhole: after every one of 40 random steps
// applied to the API, the source's patched table answers every generated
// question as a table built whole from the cluster.
func TestGeneratedPatchesEqualWhole(t *testing.T) {
	for _, seed := range genSeeds(t, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := clustergen.Small()
			c := clustergen.Generate(seed, cfg)
			f := newFakeCluster(t, c)
			e := kubePlugin(t, f.client, "")
			r := rand.New(rand.NewSource(seed))
			for step := range 40 {
				ch := c.Step(r)
				f.apply(t, ch)
				qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(int64(step))))
				want := answers(ourPlugin(t, clusterModel(c)), qs)
				kubefix.Eventually(t, func() string {
					if d := firstDiff(qs, answers(e, qs), want); d != "" {
						return fmt.Sprintf("step %d (%v %T): %s", step, ch.Op, ch.Obj, d)
					}
					return ""
				})
			}
			if b := e.source.(*kubesource.Source).Stats.Builds.Load(); b != 1 {
				t.Errorf("%d whole builds, want 1: every step is a patch", b)
			}
		})
	}
}
