package test

// deploy/kubernetes/publish-policy.yaml on a real kube-apiserver: the
// writes a DNS pod's identity may make in kube-system, and publish at work
// under the policy (issue 31: publish needed create/update/delete on every
// EndpointSlice of kube-system, so a compromised DNS pod could redirect
// any kube-system Service).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/clustergen"
)

// dnsServiceAccount is the shipped manifests' identity of the DNS pods.
const dnsServiceAccount = "system:serviceaccount:kube-system:meshdns"

// podClaims are the extra fields of a projected ServiceAccount token bound
// to a pod, as the API server's authenticator sets them.
func podClaims(pod string, uid types.UID) map[string][]string {
	if pod == "" {
		return nil
	}
	return map[string][]string{"authentication.kubernetes.io/pod-name": {pod}, "authentication.kubernetes.io/pod-uid": {string(uid)}}
}

// asDNSPod is a client of the DNS pods' ServiceAccount whose token is bound
// to pod (none: pod ""), by impersonation of the admin.
func asDNSPod(t *testing.T, k *kubeAPI, pod string, uid types.UID) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(k.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: dnsServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		Extra:  podClaims(pod, uid)}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyPublishPolicy creates the policy and its binding as shipped and
// waits until the API server enforces it (a foreign slice refused).
func applyPublishPolicy(t *testing.T, k *kubeAPI) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "publish-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := splitYAMLDocs(string(b))
	if len(docs) != 2 {
		t.Fatalf("publish-policy.yaml: %d documents, want the policy and its binding", len(docs))
	}
	var vap admissionv1.ValidatingAdmissionPolicy
	var bind admissionv1.ValidatingAdmissionPolicyBinding
	for i, into := range []any{&vap, &bind} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), into); err != nil {
			t.Fatalf("publish-policy.yaml document %d: %v", i+1, err)
		}
	}
	api := k.Client.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctxT(t), &vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctxT(t), &bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := asDNSPod(t, k, "meshdns-probe", "00000000-0000-0000-0000-0000000000ff")
	Eventually(t, 20*time.Second, func() string {
		sl := testSlice("policy-probe", "kube-dns", "endpointslice-controller.k8s.io", "", "", "10.244.9.1")
		_, err := probe.DiscoveryV1().EndpointSlices("kube-system").Create(ctxT(t), sl, metav1.CreateOptions{})
		if err == nil {
			_ = k.Client.DiscoveryV1().EndpointSlices("kube-system").Delete(ctxT(t), sl.Name, metav1.DeleteOptions{})
			return "the policy is not enforced yet: a foreign slice was created"
		}
		if !apierrors.IsForbidden(err) {
			return err.Error()
		}
		return ""
	})
}

// testSlice is a one-endpoint IPv4 slice of service managed by manager,
// owned by pod (none: ""), ready and serving.
func testSlice(name, service, manager, pod string, uid types.UID, addr string) *discoveryv1.EndpointSlice {
	yes, no := true, false
	port, proto, pname := int32(53), corev1.ProtocolUDP, "dns"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: manager}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}}},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}},
	}
	if pod != "" {
		sl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: uid}}
	}
	return sl
}

// testLease is a Lease held by holder with the label of publish's Leases
// of service (none: "").
func testLease(name, holder, service string) *coordinationv1.Lease {
	now, secs := metav1.NowMicro(), int32(15)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now}}
	if service != "" {
		l.Labels = map[string]string{"endpointsvc.meshdns.io/publish": service}
	}
	return l
}

// policyCase is one write tried as a DNS pod: allowed (deny "") or refused
// as Forbidden with a message holding deny.
type policyCase struct {
	name  string
	write func(ctx context.Context) error
	deny  string
}

// TestPublishPolicy: with the shipped policy applied, the DNS pods'
// ServiceAccount - each request as a pod's projected token makes it, with
// the pod's name and UID - writes publish's objects as publish does and
// nothing else of kube-system: no slice of another Service (not created,
// changed, relabelled into ours or deleted), no other replica's slice but
// to take its endpoint out, no slice owned by another pod, no Lease but
// its own (not the controller manager's leader election). Without the
// policy each of the refused writes succeeds (the Role allows them all);
// the admin's writes stay allowed (the policy is the ServiceAccount's).
// Then TestPublishPolicy/Publisher runs publish under it.
func TestPublishPolicy(t *testing.T) {
	k := startKubeAPI(t)
	createNS(t, k, "kube-system")
	admin := k.Client
	uidA, uidB := types.UID("11111111-1111-1111-1111-11111111111a"), types.UID("11111111-1111-1111-1111-11111111111b")
	// what exists before: a slice of another kube-system Service, the
	// controller manager's Lease, replica b's slice and Lease
	foreign := testSlice("kube-dns-x", "kube-dns", "endpointslice-controller.k8s.io", "", "", "10.244.9.9")
	if _, err := admin.DiscoveryV1().EndpointSlices("kube-system").Create(ctxT(t), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases("kube-system").Create(ctxT(t), testLease("kube-controller-manager", "cm-1", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyPublishPolicy(t, k)
	a, b, noPod := asDNSPod(t, k, "meshdns-a", uidA), asDNSPod(t, k, "meshdns-b", uidB), asDNSPod(t, k, "", "")
	ours := func(name, pod string, uid types.UID, addr string) *discoveryv1.EndpointSlice {
		return testSlice(name, "meshdns", "endpointsvc.meshdns.io", pod, uid, addr)
	}
	// update fetches name as c and writes it back changed by f
	update := func(c kubernetes.Interface, name string, f func(*discoveryv1.EndpointSlice)) func(context.Context) error {
		return func(ctx context.Context) error {
			cur, err := c.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			f(cur)
			_, err = c.DiscoveryV1().EndpointSlices("kube-system").Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	}
	create := func(c kubernetes.Interface, s *discoveryv1.EndpointSlice) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, s, metav1.CreateOptions{})
			return err
		}
	}
	renew := func(c kubernetes.Interface, name string, f func(*coordinationv1.Lease)) func(context.Context) error {
		return func(ctx context.Context) error {
			cur, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			f(cur)
			_, err = c.CoordinationV1().Leases("kube-system").Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	}
	no := false
	takeOut := func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[0].Conditions.Ready, s.Endpoints[0].Conditions.Serving = &no, &no
	}
	const (
		notOurs   = "may write only its own endpointslices of the Service meshdns"
		notOwn    = "pod meshdns-a may create only its own EndpointSlice"
		onlyOut   = "pod meshdns-a may only take the endpoints of kube-system/meshdns-meshdns-b-ipv4"
		leaseDeny = "pod meshdns-a may write only its own Lease meshdns-meshdns-a"
	)
	for _, c := range []policyCase{
		// publish's own writes
		{"b creates its slice", create(b, ours("meshdns-meshdns-b-ipv4", "meshdns-b", uidB, "10.244.0.6")), ""},
		{"b creates its Lease", func(ctx context.Context) error {
			_, err := b.CoordinationV1().Leases("kube-system").Create(ctx, testLease("meshdns-meshdns-b", "meshdns-b", "meshdns"), metav1.CreateOptions{})
			return err
		}, ""},
		{"a creates its slice", create(a, ours("meshdns-meshdns-a-ipv4", "meshdns-a", uidA, "10.244.0.5")), ""},
		{"a updates its slice", update(a, "meshdns-meshdns-a-ipv4", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.244.0.7"} }), ""},
		{"a creates its Lease", func(ctx context.Context) error {
			_, err := a.CoordinationV1().Leases("kube-system").Create(ctx, testLease("meshdns-meshdns-a", "meshdns-a", "meshdns"), metav1.CreateOptions{})
			return err
		}, ""},
		{"a renews its Lease", renew(a, "meshdns-meshdns-a", func(l *coordinationv1.Lease) { now := metav1.NowMicro(); l.Spec.RenewTime = &now }), ""},
		// another kube-system Service's slice
		{"a creates a slice of kube-dns", create(a, testSlice("kube-dns-evil", "kube-dns", "endpointslice-controller.k8s.io", "", "", "10.0.0.66")), notOurs},
		{"a creates a slice of kube-dns as if publish's", create(a, testSlice("kube-dns-evil", "kube-dns", "endpointsvc.meshdns.io", "meshdns-a", uidA, "10.0.0.66")), notOurs},
		{"a redirects kube-dns", update(a, "kube-dns-x", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.0.0.66"} }), notOurs},
		{"a relabels kube-dns's slice into meshdns's", update(a, "kube-dns-x", func(s *discoveryv1.EndpointSlice) {
			s.Labels = map[string]string{discoveryv1.LabelServiceName: "meshdns", discoveryv1.LabelManagedBy: "endpointsvc.meshdns.io"}
		}), notOurs},
		{"a moves its own slice to kube-dns", update(a, "meshdns-meshdns-a-ipv4", func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "kube-dns" }), notOurs},
		{"a deletes kube-dns's slice", func(ctx context.Context) error {
			return a.DiscoveryV1().EndpointSlices("kube-system").Delete(ctx, "kube-dns-x", metav1.DeleteOptions{})
		}, notOurs},
		// another replica's slice
		{"a creates a slice owned by b", create(a, ours("meshdns-meshdns-b-ipv6", "meshdns-b", uidB, "10.244.0.8")), notOwn},
		{"a moves b's endpoint", update(a, "meshdns-meshdns-b-ipv4", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.0.0.66"} }), onlyOut},
		{"a changes b's ports", update(a, "meshdns-meshdns-b-ipv4", func(s *discoveryv1.EndpointSlice) { p := int32(5353); s.Ports[0].Port = &p }), onlyOut},
		{"a takes over b's slice", update(a, "meshdns-meshdns-b-ipv4", func(s *discoveryv1.EndpointSlice) { s.OwnerReferences[0].UID = uidA }), onlyOut},
		{"a takes b out (b down)", update(a, "meshdns-meshdns-b-ipv4", takeOut), ""},
		{"a puts b back", update(a, "meshdns-meshdns-b-ipv4", func(s *discoveryv1.EndpointSlice) {
			yes := true
			s.Endpoints[0].Conditions.Ready, s.Endpoints[0].Conditions.Serving = &yes, &yes
		}), onlyOut},
		// Leases
		{"a takes the controller manager's Lease", renew(a, "kube-controller-manager", func(l *coordinationv1.Lease) {
			h := "meshdns-a"
			l.Spec.HolderIdentity = &h
		}), "may write only its own leases"},
		{"a renews b's Lease", renew(a, "meshdns-meshdns-b", func(l *coordinationv1.Lease) { now := metav1.NowMicro(); l.Spec.RenewTime = &now }), leaseDeny},
		{"a holds its Lease for b", renew(a, "meshdns-meshdns-a", func(l *coordinationv1.Lease) { h := "meshdns-b"; l.Spec.HolderIdentity = &h }), leaseDeny},
		{"a deletes its Lease", func(ctx context.Context) error {
			return a.CoordinationV1().Leases("kube-system").Delete(ctx, "meshdns-meshdns-a", metav1.DeleteOptions{})
		}, leaseDeny},
		// a token bound to no pod
		{"no pod creates a slice", create(noPod, ours("meshdns-meshdns-c-ipv4", "meshdns-c", "uid-c", "10.244.0.9")), "may create only its own EndpointSlice"},
		// the steward deletes the slice of a pod that is gone; the admin
		// is not the ServiceAccount
		{"a deletes b's slice", func(ctx context.Context) error {
			return a.DiscoveryV1().EndpointSlices("kube-system").Delete(ctx, "meshdns-meshdns-b-ipv4", metav1.DeleteOptions{})
		}, ""},
		{"the admin changes kube-dns's slice", update(admin, "kube-dns-x", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.244.9.10"} }), ""},
	} {
		err := c.write(ctxT(t))
		switch {
		case c.deny == "" && err != nil:
			t.Errorf("%s: %v, want it allowed", c.name, err)
		case c.deny != "" && err == nil:
			t.Errorf("%s: allowed, want it refused", c.name)
		case c.deny != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.deny)):
			t.Errorf("%s: %v, want Forbidden saying %q", c.name, err, c.deny)
		}
	}
	if t.Failed() {
		return
	}
	t.Run("Publisher", func(t *testing.T) { publishUnderPolicy(t, k) })
}

// publishUnderPolicy runs meshdns as replica p of the Service meshdns in
// kube-system, with p's identity (the ServiceAccount, p's pod claims)
// under the policy: p creates and renews its Lease and, as the steward,
// deletes the slice of a pod that is gone, through the policy, with no
// write refused. (p's pod has no address: an EndpointSlice refuses
// loopback addresses, and this test stays on loopback; p's own slice and a
// peer taken out are the writes the cases above try.) Then the two
// mistakes that published nothing without a word: a Service in another
// namespace than the pod's, and a selector that leaves the pod out.
func publishUnderPolicy(t *testing.T, k *kubeAPI) {
	createService(t, k, "kube-system", "meshdns", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
	})
	o := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-p", Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/name": "meshdns"}},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "meshdns", Image: "meshdns"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := genApplyPod(ctxT(t), k, clustergen.Add, o); err != nil {
		t.Fatal(err)
	}
	p, err := k.Client.CoreV1().Pods("kube-system").Get(ctxT(t), o.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stray := testSlice("meshdns-gone-0-ipv4", "meshdns", "endpointsvc.meshdns.io", "gone-0", "00000000-0000-0000-0000-00000000e2e0", "10.244.77.7")
	if _, err := k.Client.DiscoveryV1().EndpointSlices("kube-system").Create(ctxT(t), stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}
users:
- name: meshdns-p
  user:
    token: %s
    as: %s
    as-groups: [system:serviceaccounts, system:authenticated]
    as-user-extra:
      authentication.kubernetes.io/pod-name: [%s]
      authentication.kubernetes.io/pod-uid: ["%s"]
contexts:
- name: e2e
  context: {cluster: e2e, user: meshdns-p}
current-context: e2e
`, k.port, kubeToken, dnsServiceAccount, p.Name, p.UID)), 0o600); err != nil {
		t.Fatal(err)
	}
	corefile := func(publish string) string {
		return ".:53 {\n    bind 127.0.0.1\n    endpointsvc cluster.local {\n        source kubernetes " + kubeconfig +
			"\n        schema kubernetes\n        publish " + publish + "\n    }\n}\n"
	}
	env := []string{"POD_NAME=meshdns-p", "POD_NAMESPACE=kube-system"}
	s := Start(t, corefile("meshdns app.kubernetes.io/name=meshdns"), Options{Env: env})
	var renewed *metav1.MicroTime
	Eventually(t, 15*time.Second, func() string {
		l, err := k.Client.CoordinationV1().Leases("kube-system").Get(ctxT(t), "meshdns-meshdns-p", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "meshdns-p" || l.Spec.RenewTime == nil {
			return fmt.Sprintf("p's Lease: %v %v", l, err)
		}
		if renewed == nil {
			renewed = l.Spec.RenewTime
		}
		if !l.Spec.RenewTime.After(renewed.Time) {
			return "p's Lease not renewed yet"
		}
		if _, err := k.Client.DiscoveryV1().EndpointSlices("kube-system").Get(ctxT(t), stray.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the stray slice: %v", err)
		}
		return ""
	})
	for _, bad := range []string{"denied", "Forbidden", "forbidden"} {
		if strings.Contains(s.Log(), bad) {
			t.Errorf("a write of publish was refused (%q in its log):\n%s", bad, s.Log())
		}
	}

	// mistakes that published nothing in silence now say so
	for _, c := range []struct{ publish, want string }{
		{"dns/meshdns app.kubernetes.io/name=meshdns", "Service dns/meshdns is in another namespace than this pod (kube-system)"},
		{"meshdns app.kubernetes.io/name=other", "pod kube-system/meshdns-p does not match the pod selector"},
	} {
		m := Start(t, corefile(c.publish), Options{Env: env})
		Eventually(t, 10*time.Second, func() string {
			if !strings.Contains(m.Log(), c.want) {
				return "no " + c.want + " in the log"
			}
			return ""
		})
		m.Stop()
	}
}
