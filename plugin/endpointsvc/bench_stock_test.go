package endpointsvc

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// headlessCluster is one dual-stack headless Service with n ready
// endpoints per family, in slices of 1,000 (the API's largest), each
// endpoint with two ports.
func headlessCluster(n int) *clustergen.Cluster {
	c := &clustergen.Cluster{Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "big"}}}}
	c.Services = []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: "db"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone},
			Ports: []corev1.ServicePort{{Name: "pg", Protocol: corev1.ProtocolTCP, Port: 5432}, {Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9187}}}}}
	name, proto := []string{"pg", "metrics"}, corev1.ProtocolTCP
	ports := []discoveryv1.EndpointPort{{Name: &name[0], Protocol: &proto, Port: ptrInt(5432)}, {Name: &name[1], Protocol: &proto, Port: ptrInt(9187)}}
	for _, fam := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		for s := 0; s*1000 < n; s++ {
			sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: fmt.Sprintf("db-%s-%d", fam, s),
				Labels: map[string]string{discoveryv1.LabelServiceName: "db"}}, AddressType: fam, Ports: ports}
			for i := s * 1000; i < min(n, (s+1)*1000); i++ {
				a := netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)})
				if fam == discoveryv1.AddressTypeIPv6 {
					a = netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 14: byte(i >> 8), 15: byte(i)})
				}
				sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()}})
			}
			c.Slices = append(c.Slices, sl)
		}
	}
	return c
}

func ptrInt(v int32) *int32 { return &v }

// BenchmarkHeadless answers A and AAAA for a headless Service of 2,000
// endpoints × 2 ports per family, with endpointsvc (schema kubernetes)
// and with the stock kubernetes plugin fed the same objects, in one run.
func BenchmarkHeadless(b *testing.B) {
	c := headlessCluster(2000)
	servers := []struct {
		name string
		h    interface {
			ServeDNS(context.Context, dns.ResponseWriter, *dns.Msg) (int, error)
		}
	}{{"endpointsvc", ourPlugin(b, clusterModel(c))}, {"kubernetes", stockPlugin(b, c)}}
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		for _, s := range servers {
			b.Run(fmt.Sprintf("%s/%s", dns.TypeToString[qtype], s.name), func(b *testing.B) {
				m := new(dns.Msg).SetQuestion("db.big.svc.cluster.local.", qtype)
				rec := &answerCount{}
				s.h.ServeDNS(context.Background(), rec, m)
				if rec.n != 2000 {
					b.Fatalf("%d records, want 2000", rec.n)
				}
				b.ReportAllocs()
				for b.Loop() {
					s.h.ServeDNS(context.Background(), rec, m)
				}
			})
		}
	}
}

// answerCount is a ResponseWriter that counts the answer's records.
type answerCount struct {
	test.ResponseWriter
	n int
}

func (a *answerCount) WriteMsg(m *dns.Msg) error { a.n = len(m.Answer); return nil }
