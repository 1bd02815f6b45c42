package test

// What an operator expects of the cluster-DNS manifests (issue 25, item 5),
// read from deploy/kubernetes as shipped: the pieces the node drills need
// to lose nothing through rollouts, drains and the API's return, and the
// labels and pins other tools rely on. The drills themselves
// (nodecluster_drill_test.go) show that the pieces work together.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// readManifest decodes the documents of deploy/kubernetes/name into the
// objects given, in order.
func readManifest(t *testing.T, name string, into ...any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---")
	if len(docs) != len(into) {
		t.Fatalf("%s: %d documents, want %d", name, len(docs), len(into))
	}
	for i, d := range docs {
		if err := yaml.UnmarshalStrict([]byte(d), into[i]); err != nil {
			t.Fatalf("%s document %d: %v", name, i+1, err)
		}
	}
}

func TestManifests(t *testing.T) {
	var dep appsv1.Deployment
	var svc corev1.Service
	var pdb policyv1.PodDisruptionBudget
	var cm corev1.ConfigMap
	var sa corev1.ServiceAccount
	var cr rbacv1.ClusterRole
	var crb rbacv1.ClusterRoleBinding
	var role rbacv1.Role
	var rb rbacv1.RoleBinding
	var vap admissionv1.ValidatingAdmissionPolicy
	var vapb admissionv1.ValidatingAdmissionPolicyBinding
	readManifest(t, "deployment.yaml", &dep)
	readManifest(t, "service.yaml", &svc)
	readManifest(t, "pdb.yaml", &pdb)
	readManifest(t, "configmap.yaml", &cm)
	readManifest(t, "rbac.yaml", &sa, &cr, &crb, &role, &rb)
	readManifest(t, "publish-policy.yaml", &vap, &vapb)
	pods := labels.Set(dep.Spec.Template.Labels)

	t.Run("Labels", func(t *testing.T) {
		if pods["k8s-app"] != "kube-dns" || pods["app.kubernetes.io/name"] != "meshdns" {
			t.Errorf("pod labels %v: want k8s-app=kube-dns (NetworkPolicies, NodeLocal DNSCache, the e2e DNS tests) and app.kubernetes.io/name=meshdns", pods)
		}
		if _, ok := dep.Labels["k8s-app"]; ok {
			t.Errorf("the Deployment itself is labelled k8s-app: kubeadm would take it for its CoreDNS add-on")
		}
		if svc.Labels["k8s-app"] != "kube-dns" {
			t.Errorf("Service labels %v: want k8s-app=kube-dns", svc.Labels)
		}
	})

	t.Run("ImagePinned", func(t *testing.T) {
		v, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
		if err != nil {
			t.Fatal(err)
		}
		want := ":v" + strings.TrimSpace(string(v))
		img := dep.Spec.Template.Spec.Containers[0].Image
		if !strings.HasSuffix(img, want) {
			t.Errorf("image %q: want the release tag %q (VERSION)", img, want)
		}
	})

	t.Run("Rollouts", func(t *testing.T) {
		ru := dep.Spec.Strategy.RollingUpdate
		if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() < 1 {
			t.Errorf("rolling update %+v: want maxUnavailable 0 and a surge", ru)
		}
		if dep.Spec.MinReadySeconds < 1 {
			t.Errorf("minReadySeconds %d: a new replica must have published its endpoint before an old one goes", dep.Spec.MinReadySeconds)
		}
		sel, err := labels.Parse(labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).String())
		if err != nil || !sel.Matches(pods) || pdb.Spec.MaxUnavailable == nil {
			t.Errorf("PodDisruptionBudget %+v does not bound the DNS pods", pdb.Spec)
		}
		if dep.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" || len(dep.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
			t.Errorf("pod spec lacks the linux node selector or topology spread")
		}
		lameduck := regexp.MustCompile(`lameduck (\d+)s`).FindStringSubmatch(cm.Data["Corefile"])
		grace := dep.Spec.Template.Spec.TerminationGracePeriodSeconds
		if lameduck == nil || grace == nil || *grace < 15 {
			t.Errorf("Corefile lameduck %v, terminationGracePeriodSeconds %v: want a lameduck well inside the grace period", lameduck, grace)
		}
	})

	t.Run("PublishedEndpoints", func(t *testing.T) {
		if svc.Spec.Selector != nil {
			t.Errorf("the Service selects pods %v: its endpoints must be the ones the replicas publish", svc.Spec.Selector)
		}
		m := regexp.MustCompile(`publish (\S+) (\S+)`).FindStringSubmatch(cm.Data["Corefile"])
		if m == nil || m[1] != svc.Name {
			t.Fatalf("Corefile publishes %v, want Service %s", m, svc.Name)
		}
		if sel, err := labels.Parse(m[2]); err != nil || !sel.Matches(pods) {
			t.Errorf("publish selector %q does not select the DNS pods %v", m[2], pods)
		}
		env := map[string]string{}
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
			t.Errorf("env %v: publish needs POD_NAME and POD_NAMESPACE from the downward API", env)
		}
		verbs := map[string]bool{}
		for _, r := range role.Rules {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					verbs[res+":"+v] = true
				}
			}
		}
		for _, want := range []string{"pods:list", "pods:watch", "endpointslices:create", "endpointslices:update", "endpointslices:delete",
			"leases:get", "leases:list", "leases:watch", "leases:create", "leases:update"} {
			if !verbs[want] {
				t.Errorf("Role %s lacks %s", role.Name, want)
			}
		}
		if role.Namespace != svc.Namespace || rb.RoleRef.Name != role.Name {
			t.Errorf("Role %s/%s bound by %s: want it in the Service's namespace", role.Namespace, role.Name, rb.RoleRef.Name)
		}
		// the admission policy narrows the Role's writes to publish's own
		// (its effect on a real API server: TestPublishPolicy)
		user := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
		if len(vap.Spec.MatchConditions) != 1 || !strings.Contains(vap.Spec.MatchConditions[0].Expression, "'"+user+"'") {
			t.Errorf("publish policy matches %+v, want the ServiceAccount %s", vap.Spec.MatchConditions, user)
		}
		if vapb.Spec.PolicyName != vap.Name || len(vapb.Spec.ValidationActions) != 1 || vapb.Spec.ValidationActions[0] != admissionv1.Deny {
			t.Errorf("publish policy binding %+v: want it to deny by %s", vapb.Spec, vap.Name)
		}
		for _, v := range vap.Spec.Variables {
			if (v.Name == "newOurs" || v.Name == "oldOurs") && !strings.Contains(v.Expression, "== '"+svc.Name+"'") {
				t.Errorf("publish policy variable %s does not name the Service %s: %s", v.Name, svc.Name, v.Expression)
			}
		}
	})
}
