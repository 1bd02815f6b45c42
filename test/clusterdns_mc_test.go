package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/typed/apis/v1alpha1"
	"sigs.k8s.io/yaml"
)

// TestClusterDNSGeneratedMulticluster is the generated-cluster
// differential (clusterdns_gen_test.go) with the kubernetes plugin's
// `multicluster clusterset.local` in both Corefiles (the zone added to
// both blocks) on an API server with the MCS API's ServiceImport CRD:
// ServiceImports and the EndpointSlices an MCS implementation writes for
// them, created, changed and deleted, and every question of the
// multicluster zone asked besides the cluster zone's - live, patched,
// built whole, and restarted from the snapshot while the API server is
// stopped (where imported names must still answer).
func TestClusterDNSGeneratedMulticluster(t *testing.T) {
	seeds := []int64{1, 2}
	if s := genEnvInt(t, "MESHDNS_GEN_SEED", 0); s > 0 {
		seeds = []int64{int64(s)}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { genRun(t, seed, genMulticlusterSize(), false) })
	}
}

// genMulticlusterSize is genSmall with a dozen ServiceImports.
func genMulticlusterSize() genSize {
	p := genSmall
	p.cfg.Imports = 12
	return p
}

// genInstallMCS installs the MCS API's ServiceImport CRD - the manifest
// of sigs.k8s.io/mcs-api v0.5.2 (config/crd, the module the stock
// plugin's client comes from: v1alpha1 served, v1beta1 stored) - and
// waits until the API server serves ServiceImports.
func genInstallMCS(t *testing.T, k *kubeAPI) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(mcscrd.ServiceImportCRD, &obj); err != nil {
		t.Fatalf("the ServiceImport CRD: %v", err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := k.Dynamic.Resource(gvr).Create(ctxT(t), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ServiceImport CRD: %v", err)
	}
	c := genMCSClient(t, k)
	Eventually(t, 20*time.Second, func() string {
		if _, err := c.ServiceImports("default").List(ctxT(t), metav1.ListOptions{}); err != nil {
			return "ServiceImports not served yet: " + err.Error()
		}
		return ""
	})
}

// genMCSClients are the ServiceImport clients of the API servers.
var genMCSClients sync.Map // *kubeAPI → mcsv1alpha1.MulticlusterV1alpha1Interface

// genMCSClient is the API server's ServiceImport client (JSON: a custom
// resource has no protobuf form).
func genMCSClient(t *testing.T, k *kubeAPI) mcsv1alpha1.MulticlusterV1alpha1Interface {
	t.Helper()
	if c, ok := genMCSClients.Load(k); ok {
		return c.(mcsv1alpha1.MulticlusterV1alpha1Interface)
	}
	rc := rest.CopyConfig(k.Config)
	rc.ContentType, rc.AcceptContentTypes = "application/json", "application/json"
	c, err := mcsv1alpha1.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	genMCSClients.Store(k, c)
	t.Cleanup(func() { genMCSClients.Delete(k) })
	return c
}

// genApplyImport makes a generated change of a ServiceImport.
func genApplyImport(ctx context.Context, k *kubeAPI, op clustergen.Op, o *mcsapi.ServiceImport) error {
	c, ok := genMCSClients.Load(k)
	if !ok {
		return fmt.Errorf("ServiceImport %s/%s: the API server has no ServiceImport client (genInstallMCS)", o.Namespace, o.Name)
	}
	api := c.(mcsv1alpha1.MulticlusterV1alpha1Interface).ServiceImports(o.Namespace)
	switch op {
	case clustergen.Add:
		_, err := api.Create(ctx, o, metav1.CreateOptions{})
		return err
	case clustergen.Update:
		cur, err := api.Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		o.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, o, metav1.UpdateOptions{})
		return err
	}
	return api.Delete(ctx, o.Name, metav1.DeleteOptions{})
}

// genMulticluster adds the multicluster zone to the cluster block of
// directive (endpointsvc or kubernetes) in corefile, with the line that
// makes it one.
func genMulticluster(t *testing.T, corefile, directive string) string {
	t.Helper()
	old := directive + " cluster.local in-addr.arpa ip6.arpa {"
	if !strings.Contains(corefile, old) {
		t.Fatalf("no %q in the Corefile:\n%s", old, corefile)
	}
	return strings.Replace(corefile, old, directive+" cluster.local clusterset.local in-addr.arpa ip6.arpa {\n        multicluster clusterset.local", 1)
}

// genMarkImport creates the ServiceImport marker of round n (in genMark's
// namespace of that round) and waits until every server answers it: the
// ServiceImports are watched apart from the rest, and a server that has
// seen the marker has seen every ServiceImport change made before it.
// (Imported slices are EndpointSlices: genMark covers them.)
func genMarkImport(t *testing.T, k *kubeAPI, n int, servers ...*Server) {
	t.Helper()
	ns := fmt.Sprintf("mark-%d", n)
	imp := &mcsapi.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		Spec: mcsapi.ServiceImportSpec{Type: mcsapi.ClusterSetIP, IPs: []string{fmt.Sprintf("10.254.200.%d", 1+n%250)}, // clustergen.CallerIPv4
			Ports: []mcsapi.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}}
	if err := genApplyImport(ctxT(t), k, clustergen.Add, imp); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("the ServiceImport marker: %v", err)
	}
	qname := "m." + ns + ".svc.clusterset.local."
	for _, s := range servers {
		Eventually(t, 20*time.Second, func() string {
			genPoll++
			m := new(dns.Msg)
			m.SetQuestion(qname, 65280+uint16(genPoll%250)) // a new cache key each time
			m.CheckingDisabled = genPoll/250%2 == 1
			r, err := dns.Exchange(m, s.DNS())
			if err != nil {
				return err.Error()
			}
			if r.Rcode != dns.RcodeSuccess {
				return fmt.Sprintf("marker %s: %s", qname, dns.RcodeToString[r.Rcode])
			}
			return ""
		})
	}
}

// genImportsAnswered fails unless the restarted meshdns (its API server
// stopped, its table from the snapshot) answered imported names with
// records, as the stock plugin did before the API server stopped: the
// multicluster questions the stock plugin answered with records and that
// are not among the restart phase's differences.
func genImportsAnswered(t *testing.T, qs []clustergen.Question, stock []genReply, restart []genMismatch) {
	t.Helper()
	differ := map[clustergen.Question]bool{}
	for _, m := range restart {
		differ[m.Q] = true
	}
	answered := 0
	for i, q := range qs {
		if !dns.IsSubDomain("clusterset.local.", strings.ToLower(q.Name)) || differ[q] || stock[i].msg == nil || len(stock[i].msg.Answer) == 0 {
			continue
		}
		answered++
	}
	if answered < 10 {
		t.Errorf("restarted from the snapshot with the API server stopped: %d imported names answered with records, want many", answered)
	}
	t.Logf("restarted from the snapshot with the API server stopped: %d imported names answered with records, as before", answered)
}
