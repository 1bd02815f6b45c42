package replica

import (
	"fmt"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// specCluster is n ClusterIP Services in n/100 namespaces, each with a
// named port and one EndpointSlice of ten ready endpoints (an address,
// a node of 500, a target Pod): the cluster-DNS mix of docs/performance.md
// in its shape and size per Service.
func specCluster(n int) *k8sdns.Cluster {
	var nss []*corev1.Namespace
	for i := range max(n/100, 1) {
		nss = append(nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%d", i)}})
	}
	ready := true
	var svcs []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	port, proto := int32(8080), corev1.ProtocolTCP
	name := "http"
	for i := range n {
		ns, svc := nss[i%len(nss)].Name, fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250),
				ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250)}, Ports: []corev1.ServicePort{{Name: "http", Protocol: proto, Port: 80}}},
		})
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-x1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		}
		for j := range 10 {
			k := i*10 + j
			node := fmt.Sprintf("node-%d", k%500)
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+k/65536, k/256%256, k%256)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				NodeName:   &node,
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("%s-%d", svc, j)},
			})
		}
		sls = append(sls, sl)
	}
	return kubesource.DNSCluster(nss, svcs, sls)
}

// BenchmarkWholeState: a whole state's encoding (what a new follower, or
// one no replica recognises, receives) and its digest computed whole
// (once, at a leader's first table), at 5,000 and 50,000 Services of ten
// endpoints each (specCluster). Reports the state's size.
//
//	go test -run - -bench WholeState -benchtime 5x ./plugin/endpointsvc/replica/
func BenchmarkWholeState(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		l := NewLeader("cluster.local.", "")
		l.Rebuilt(k8sdns.Build(specCluster(n)))
		st := l.cur
		b.Run(fmt.Sprintf("encode/%d", n), func(b *testing.B) {
			var size int
			for b.Loop() {
				size = len(encodeWhole(st).b)
			}
			b.ReportMetric(float64(size), "bytes/state")
		})
		b.Run(fmt.Sprintf("digest/%d", n), func(b *testing.B) {
			for b.Loop() {
				wholeDigest(st.table)
			}
		})
	}
}
