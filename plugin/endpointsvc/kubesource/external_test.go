package kubesource

import (
	"slices"
	"testing"

	stockobject "github.com/coredns/coredns/plugin/kubernetes/object"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestExternalIPsAsStock: a Service's external IPs are what the
// kubernetes plugin's slim Service has (spec.externalIPs, then each
// ingress's IP or else its hostname), and a change of the LoadBalancer
// status alone is a change (k8s_external answers it), while one of
// another status field is not.
func TestExternalIPsAsStock(t *testing.T) {
	svc := func(ext []string, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20"},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}, ExternalIPs: ext},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}},
		}
	}
	cases := []*corev1.Service{
		svc(nil),
		svc([]string{"203.0.113.1", "2001:db8::1"}),
		svc(nil, corev1.LoadBalancerIngress{IP: "203.0.113.2"}, corev1.LoadBalancerIngress{Hostname: "lb.example.test"}),
		svc([]string{"203.0.113.1"}, corev1.LoadBalancerIngress{IP: "203.0.113.3", Hostname: "lb.example.test"}),
	}
	transform := transformService(nil)
	var prev *kService
	for i, s := range cases {
		o, err := transform(s.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		got := o.(*kService).svc.ExternalIPs
		so, _ := stockobject.ToService(s.DeepCopy())
		want := so.(*stockobject.Service).ExternalIPs
		if !slices.Equal(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Errorf("case %d: %q, stock %q", i, got, want)
		}
		if prev != nil && sameSlim(prev, o) {
			t.Errorf("case %d: a change of the external IPs is no change", i)
		}
		prev = o.(*kService)
	}
	cond := cases[3].DeepCopy()
	cond.Status.Conditions = []metav1.Condition{{Type: "x", Status: metav1.ConditionTrue}}
	o, _ := transform(cond)
	if !sameSlim(prev, o) {
		t.Error("a status condition changed the mapping")
	}
}
