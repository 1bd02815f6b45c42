package test

// charts/meshdns installed with `helm install` on the one-node cluster
// (issue 23): the kubectl-applied cluster DNS of deploy/kubernetes is
// removed, the chart alone brings the cluster DNS up again at 10.96.0.10 and
// pods resolve the names of TestNodeClusterDNS through it; `helm uninstall`
// then leaves nothing of it, and the shipped manifests are applied again,
// so the cluster is as the next test expects it (deployDNS), whatever the
// outcome.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// helmTestNS is the namespace of TestNodeHelmInstall's own objects.
const helmTestNS = "helmtest"

func TestNodeHelmInstall(t *testing.T) {
	c := sharedNodeCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	t.Cleanup(func() { c.restoreShippedDNS(t) })
	if err := c.removeShippedDNS(ctx); err != nil {
		t.Fatal(err)
	}
	repo, tag, _ := strings.Cut(meshdnsImage, ":")
	start := time.Now()
	out, err := c.helm(t, "install", "meshdns", chartDir(), "--namespace", "kube-system", "--wait", "--timeout", "4m",
		"--set", "image.repository="+repo+",image.tag="+tag+",image.pullPolicy=Never")
	if err != nil {
		t.Fatalf("%v\n%s", err, c.meshdnsLogs(20))
	}
	if err := c.waitDeployment(ctx, "kube-system", "meshdns", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install: the cluster DNS available %v after the install started\n%s", time.Since(start).Round(time.Millisecond), out)
	if !strings.Contains(out, "the Service kube-system/meshdns on "+clusterDNSIP+".") {
		t.Errorf("helm install's notes do not name the Service:\n%s", out)
	}
	checkHelmOwned(ctx, t, c)

	pods := dnsTestObjects(t, c, helmTestNS)
	svc, err := c.Client.CoreV1().Services(helmTestNS).Get(ctx, "web-svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qs, wants := nodeDNSQuestions(helmTestNS, pods["web-0"].Status.PodIP, pods["client"].Status.PodIP, svc.Spec.ClusterIP)
	for i, r := range c.resolveIn(t, helmTestNS, "client", qs...) {
		want := append([]string(nil), wants[i]...)
		sort.Strings(want)
		if got := strings.Join(r.Answers, " "); r.Error != "" || got != strings.Join(want, " ") {
			t.Errorf("through the chart's cluster DNS: %s %s %s: got %q (error %q), want %q", r.Resolver, r.Type, r.Name, r.Answers, r.Error, want)
		}
	}

	if out, err := c.helm(t, "uninstall", "meshdns", "--namespace", "kube-system", "--wait", "--cascade", "foreground", "--timeout", "3m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if left := c.chartLeftovers(ctx); len(left) > 0 {
		t.Errorf("helm uninstall left %v", left)
	}
}

// helm runs helm against the cluster with the admin kubeconfig.
func (c *nodeCluster) helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runHelm(t, append(args, "--kubeconfig", c.pki.kubeconfig["admin"])...)
}

// removeShippedDNS deletes the objects deployDNS applied (all of
// deploy/kubernetes but the example client pod) and waits until their
// pods are gone.
func (c *nodeCluster) removeShippedDNS(ctx context.Context) error {
	dir := filepath.Join(c.paths.state, "helm-remove")
	_ = os.RemoveAll(dir)
	if _, err := shippedManifests(dir); err != nil {
		return err
	}
	examples, _ := filepath.Glob(filepath.Join(dir, "*-pod-dnsconfig.json"))
	for _, f := range examples {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	if out, err := c.kubectl(ctx, "delete", "-f", dir, "--cascade=foreground", "--wait", "--timeout=3m"); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return c.waitNoMeshdnsPods(ctx)
}

// waitNoMeshdnsPods waits until the cluster DNS has no pod left in
// kube-system.
func (c *nodeCluster) waitNoMeshdnsPods(ctx context.Context) error {
	return waitFor(2*time.Minute, nil, "no meshdns pods", func() error {
		pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}

// checkHelmOwned shows that the chart's objects, not kubectl's, serve:
// each belongs to the release and none carries kubectl's last-applied
// configuration.
func checkHelmOwned(ctx context.Context, t *testing.T, c *nodeCluster) {
	t.Helper()
	metas := map[string]func() (metav1.Object, error){
		"Deployment": func() (metav1.Object, error) {
			return c.Client.AppsV1().Deployments("kube-system").Get(ctx, "meshdns", metav1.GetOptions{})
		},
		"Service": func() (metav1.Object, error) {
			return c.Client.CoreV1().Services("kube-system").Get(ctx, "meshdns", metav1.GetOptions{})
		},
		"ConfigMap": func() (metav1.Object, error) {
			return c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "meshdns", metav1.GetOptions{})
		},
		"ClusterRole": func() (metav1.Object, error) {
			return c.Client.RbacV1().ClusterRoles().Get(ctx, "meshdns", metav1.GetOptions{})
		},
	}
	for kind, get := range metas {
		o, err := get()
		if err != nil {
			t.Errorf("%s meshdns: %v", kind, err)
			continue
		}
		a := o.GetAnnotations()
		if a["meta.helm.sh/release-name"] != "meshdns" || a["meta.helm.sh/release-namespace"] != "kube-system" {
			t.Errorf("%s meshdns is not the release's: annotations %v", kind, a)
		}
		if _, ok := a["kubectl.kubernetes.io/last-applied-configuration"]; ok {
			t.Errorf("%s meshdns still carries kubectl's last-applied configuration", kind)
		}
	}
}

// chartLeftovers lists the chart's objects still in the cluster.
func (c *nodeCluster) chartLeftovers(ctx context.Context) []string {
	var left []string
	check := func(kind string, err error) {
		if err == nil {
			left = append(left, kind)
		} else if !apierrors.IsNotFound(err) {
			left = append(left, kind+" ("+err.Error()+")")
		}
	}
	ns := "kube-system"
	_, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "meshdns", metav1.GetOptions{})
	check("Deployment", err)
	_, err = c.Client.CoreV1().Services(ns).Get(ctx, "meshdns", metav1.GetOptions{})
	check("Service", err)
	_, err = c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "meshdns", metav1.GetOptions{})
	check("ConfigMap", err)
	_, err = c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "meshdns", metav1.GetOptions{})
	check("ServiceAccount", err)
	_, err = c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "meshdns", metav1.GetOptions{})
	check("PodDisruptionBudget", err)
	_, err = c.Client.RbacV1().ClusterRoles().Get(ctx, "meshdns", metav1.GetOptions{})
	check("ClusterRole", err)
	_, err = c.Client.RbacV1().RoleBindings(ns).Get(ctx, "meshdns-publish", metav1.GetOptions{})
	check("RoleBinding", err)
	if err := c.waitNoMeshdnsPods(ctx); err != nil {
		left = append(left, "pods: "+err.Error())
	}
	// the replicas' published slices belong to their pods: gone with them
	if err := waitFor(time.Minute, nil, "no published EndpointSlices", func() error {
		sl, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=meshdns"})
		if err == nil && len(sl.Items) > 0 {
			err = fmt.Errorf("%d left", len(sl.Items))
		}
		return err
	}); err != nil {
		left = append(left, "EndpointSlices: "+err.Error())
	}
	return left
}

// restoreShippedDNS leaves the cluster as deployDNS made it, whatever the
// test did: the release uninstalled (if any) and its pods gone,
// deploy/kubernetes applied and available, the test's namespace gone.
func (c *nodeCluster) restoreShippedDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := c.helm(t, "status", "meshdns", "--namespace", "kube-system"); err == nil {
		if out, err := c.helm(t, "uninstall", "meshdns", "--namespace", "kube-system", "--wait", "--cascade", "foreground", "--timeout", "3m"); err != nil {
			t.Errorf("restoring the cluster DNS: %v\n%s", err, out)
		}
		if err := c.waitNoMeshdnsPods(ctx); err != nil {
			t.Errorf("restoring the cluster DNS: %v", err)
		}
	}
	if err := c.deployDNS(); err != nil {
		t.Errorf("restoring the cluster DNS (deploy/kubernetes): %v", err)
		return
	}
	err := c.Client.CoreV1().Namespaces().Delete(ctx, helmTestNS, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", helmTestNS, err)
	}
}
