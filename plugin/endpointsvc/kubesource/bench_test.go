package kubesource

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
)

// benchStores are slim stores of a cluster-DNS mix: services Services in
// 50 namespaces (one in ten headless with endpoint hostnames), one slice
// of perSvc ready endpoints each on 500 nodes, as the source holds them.
func benchStores(services, perSvc int) stores {
	st := newStores()
	for n := range 50 {
		_ = st.nss.Add(&kNamespace{kMeta{Name: fmt.Sprintf("ns-%d", n), ResourceVersion: "1"}})
	}
	for n := range 500 {
		_ = st.nodes.Add(&kNode{kMeta: kMeta{Name: fmt.Sprintf("node-%d", n), ResourceVersion: "1"},
			addresses: map[string]string{"internalip": netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}).String()}})
	}
	ep := 0
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%50)
		s := &kService{kMeta: kMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: ns, ResourceVersion: "1"}}
		s.svc = k8sdns.Service{Namespace: ns, Name: s.Name,
			Ports: []k8sdns.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "metrics", Protocol: "TCP", Port: 9090}}}
		headless := i%10 == 0
		if headless {
			s.svc.Kind = k8sdns.Headless
		} else {
			s.svc.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})}
		}
		_ = st.svcs.Add(s)
		sl := &kSlice{kMeta: kMeta{Name: s.Name + "-abcde", Namespace: ns, ResourceVersion: "1"}}
		sl.sl = k8sdns.Slice{Namespace: ns, Name: sl.Name, Service: s.Name, Type: k8sdns.IPv4,
			Ports: []k8sdns.Port{{Name: "http", Protocol: "TCP", Port: 8080}, {Name: "metrics", Protocol: "TCP", Port: 9090}}}
		for j := range perSvc {
			ep++
			e := k8sdns.EndpointSpec{Ready: k8sdns.True, Serving: k8sdns.True, NodeName: fmt.Sprintf("node-%d", ep%500),
				TargetRef: fmt.Sprintf("%s-%d", s.Name, j), Addresses: []string{netip.AddrFrom4([4]byte{10, 100 + byte(ep>>16), byte(ep >> 8), byte(ep)}).String()}}
			if headless {
				e.Hostname = fmt.Sprintf("%s-%d", s.Name, j)
			}
			_ = sl.sl.Add(e)
		}
		sl.sl.Compact()
		_ = st.slices.Add(sl)
	}
	return st
}

// BenchmarkSnapshot writes the snapshot of 5,000 Services / 50,000
// endpoints and of 20,000 / 200,000 from the stores, as the snapshot
// writer does; "bytes" is the file's size (200,000 endpoints must fit the
// manifest's 64 MiB emptyDir twice: the file and its temporary).
func BenchmarkSnapshot(b *testing.B) {
	for _, services := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("endpoints=%d", services*10), func(b *testing.B) {
			st := benchStores(services, 10)
			var total int64
			w := byteCounter{&total}
			b.ReportAllocs()
			for b.Loop() {
				total = 0
				if err := (&dnsModel{}).snapshot(w, st); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total), "bytes")
		})
	}
}

// BenchmarkPatchOne maps one changed Service from the stores and patches
// the table of 5,000 and of 50,000 Services (ten endpoints each) with it,
// for each schema: the work, time and bytes, is the Service's, whatever
// the cluster's size.
func BenchmarkPatchOne(b *testing.B) {
	for _, services := range []int{5000, 50000} {
		st := benchStores(services, 10)
		b.Run(fmt.Sprintf("schema=kubernetes/services=%d", services), func(b *testing.B) {
			m := &dnsModel{}
			tbl := k8sdns.Build(m.whole(st).(*k8sdns.Cluster))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c := changes{names: map[string]bool{fmt.Sprintf("ns-%d/svc-%d", i%50, i%services): true}}
				tbl = tbl.Patched(m.patch(st, c, nil).(*k8sdns.Patch))
			}
		})
		b.Run(fmt.Sprintf("schema=orch/services=%d", services), func(b *testing.B) {
			m := &orchModel{}
			zones := []string{"cluster.local."}
			tbl := orch.BuildTable(m.whole(st).(*orch.State), zones, false, false, nil)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c := changes{names: map[string]bool{fmt.Sprintf("ns-%d/svc-%d", i%50, i%services): true}}
				tbl = tbl.Patched(m.patch(st, c, nil).(*orch.Patch), zones, false, false, nil)
			}
		})
	}
}

// byteCounter discards what is written and counts it.
type byteCounter struct{ n *int64 }

func (c byteCounter) Write(b []byte) (int, error) { *c.n += int64(len(b)); return len(b), nil }
