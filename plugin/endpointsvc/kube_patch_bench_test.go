package endpointsvc

import (
	"fmt"
	"net/netip"
	"testing"
	"unique"

	"k8s.io/client-go/tools/cache"
)

// benchStores are slim stores of a cluster-DNS mix: services Services in
// 50 namespaces (one in ten headless with endpoint hostnames), one slice
// of perSvc ready endpoints each, as the kubernetes source holds them.
func benchStores(services, perSvc int) kubeStores {
	st := kubeStores{
		svcs:   cache.NewStore(cache.MetaNamespaceKeyFunc),
		slices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byService: sliceService}),
		nss:    cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	for n := range 50 {
		_ = st.nss.Add(&kNamespace{kMeta{Name: fmt.Sprintf("ns-%d", n), ResourceVersion: "1"}})
	}
	ep := 0
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%50)
		s := &kService{kMeta: kMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: ns, ResourceVersion: "1"},
			ports: []kServicePort{{name: "http", protocol: "tcp", port: 80}, {name: "metrics", protocol: "tcp", port: 9090}}}
		headless := i%10 == 0
		if headless {
			s.headless = true
		} else {
			s.clusterIPs = []string{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()}
		}
		_ = st.svcs.Add(s)
		sl := &kSlice{kMeta: kMeta{Name: s.Name + "-abcde", Namespace: ns, ResourceVersion: "1"}, service: ns + "/" + s.Name, addressType: addressIPv4,
			ports: []kSlicePort{{name: "http", protocol: "tcp", port: 8080}, {name: "metrics", protocol: "tcp", port: 9090}}}
		for j := range perSvc {
			ep++
			e := kEndpoint{ip: netip.AddrFrom4([4]byte{10, 100 + byte(ep>>16), byte(ep >> 8), byte(ep)}).As16(), ready: true, serving: true,
				node: unique.Make(fmt.Sprintf("node-%d", ep%500))}
			sl.endpoints = append(sl.endpoints, e)
			if headless {
				sl.hostnames = append(sl.hostnames, fmt.Sprintf("%s-%d", s.Name, j))
			}
		}
		_ = st.slices.Add(sl)
	}
	return st
}

// BenchmarkKubeSnapshot writes the compact snapshot of 5,000 Services /
// 50,000 endpoints and of 20,000 / 200,000 from the stores, as the
// snapshot writer does; "bytes" is the file's size (200,000 endpoints must
// fit the manifest's 64 MiB emptyDir twice: the file and its temporary).
func BenchmarkKubeSnapshot(b *testing.B) {
	for _, services := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("endpoints=%d", services*10), func(b *testing.B) {
			st := benchStores(services, 10)
			k := &kubeSource{spec: true}
			var total int64
			w := byteCounter{&total}
			b.ReportAllocs()
			for b.Loop() {
				total = 0
				if err := k.writeSnapshot(w, st); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total), "bytes")
		})
	}
}

// BenchmarkKubePatchOne maps one changed Service and patches the table of
// 5,000 Services / 50,000 endpoints with it.
func BenchmarkKubePatchOne(b *testing.B) {
	st := benchStores(5000, 10)
	k := &kubeSource{spec: true}
	tbl := buildSpecTable(k.state(st))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("ns-%d/svc-%d", i%50, i%5000)
		ks, _, _ := st.svcs.GetByKey(id)
		mapped := specState([]*kService{ks.(*kService)}, k.slicesOf(st, id))
		_ = tbl.patched(mapped, nil, false)
	}
}

// byteCounter discards what is written and counts it.
type byteCounter struct{ n *int64 }

func (c byteCounter) Write(b []byte) (int, error) { *c.n += int64(len(b)); return len(b), nil }
