// Package kubefix holds the Kubernetes objects and helpers that the tests
// of endpointsvc and its kubernetes source share: a small cluster, object
// constructors, a fake clientset loader and a polling wait.
package kubefix

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }

// Node is a Node with an InternalIP ip (none when ""), a Hostname
// <name>.example.test, and Ready condition ready.
func Node(name, ip string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name + ".example.test"}, {Type: corev1.NodeInternalIP, Address: ip}}
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: ready}}
	return n
}

// Service is a Service of type typ with ports (default: http/TCP 80), a
// label and an annotation.
func Service(ns, name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1",
		Labels: map[string]string{"app": name}, Annotations: map[string]string{"big": "annotation"}},
		Spec: corev1.ServiceSpec{Type: typ, Ports: ports}}
}

// Slice is an EndpointSlice of Service svc with port http/TCP 8080.
func Slice(ns, name, svc string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: Ptr("http"), Protocol: Ptr(corev1.ProtocolTCP), Port: Ptr(int32(8080))}},
		Endpoints:   eps,
	}
}

// EP is a ready endpoint with address addr on node (none when "").
func EP(addr, node string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: Ptr(true)}}
	if node != "" {
		e.NodeName = Ptr(node)
	}
	return e
}

// Fixture is a small cluster: nodes n1 (ready), n2 (ready, IPv6), n3 (Ready
// False), n4 (no address); a NodePort Service with two IPv4 slices, a
// dual-stack Service, an FQDN Service with two FQDN endpoints, an
// ExternalName Service and a Service in another namespace.
func Fixture() []any {
	return []any{
		Node("n1", "10.0.0.1", corev1.ConditionTrue),
		Node("n2", "fd00::2", corev1.ConditionTrue),
		Node("n3", "10.0.0.3", corev1.ConditionFalse),
		Node("n4", "", corev1.ConditionUnknown),
		Service("default", "web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}),
		Slice("default", "web-a", "web", discoveryv1.AddressTypeIPv4, EP("10.1.0.1", "n1"), EP("10.1.0.3", "n3")),
		Slice("default", "web-b", "web", discoveryv1.AddressTypeIPv4, EP("10.1.0.2", "n2"), EP("10.1.0.9", "n4")),
		Service("default", "dual", corev1.ServiceTypeClusterIP),
		Slice("default", "dual-4", "dual", discoveryv1.AddressTypeIPv4, EP("10.2.0.1", "n1")),
		Slice("default", "dual-6", "dual", discoveryv1.AddressTypeIPv6, EP("fd00:2::1", "n2")),
		Service("default", "route", corev1.ServiceTypeClusterIP),
		Slice("default", "route-z", "route", discoveryv1.AddressTypeFQDN, EP("z-ingress.example.test", "")),
		Slice("default", "route-a", "route", discoveryv1.AddressTypeFQDN, EP("A-Ingress.example.test", "")),
		Service("default", "ext", corev1.ServiceTypeExternalName),
		Service("other", "api", corev1.ServiceTypeClusterIP),
		Slice("other", "api-1", "api", discoveryv1.AddressTypeIPv4, EP("10.3.0.1", "n1")),
	}
}

// Create adds o (a Node, Namespace, Service or EndpointSlice) to c.
func Create(t testing.TB, c *fake.Clientset, o any) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch x := o.(type) {
	case *corev1.Node:
		_, err = c.CoreV1().Nodes().Create(ctx, x, metav1.CreateOptions{})
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, x, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = c.CoreV1().Services(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
	case *discoveryv1.EndpointSlice:
		_, err = c.DiscoveryV1().EndpointSlices(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond (an empty string: met) for up to 5 s, and fails
// the test with cond's last message.
func Eventually(t testing.TB, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
