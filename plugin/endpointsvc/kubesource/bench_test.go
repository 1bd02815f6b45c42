package kubesource

import (
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
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
			addresses: [nodeAddressTypes]string{netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}).String()}})
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
// writer does (a compaction of the change log writes one), for each
// schema; "bytes" is the file's size (200,000 endpoints must fit the
// manifest's 64 MiB emptyDir twice: the file and its temporary).
func BenchmarkSnapshot(b *testing.B) {
	for _, services := range []int{5000, 20000} {
		st := benchStores(services, 10)
		for _, m := range []struct {
			schema   string
			snapshot func(io.Writer, stores) error
		}{{"kubernetes", (&dnsModel{}).snapshot}, {"orch", (&orchModel{}).snapshot}} {
			b.Run(fmt.Sprintf("schema=%s/endpoints=%d", m.schema, services*10), func(b *testing.B) {
				var total int64
				w := byteCounter{&total}
				b.ReportAllocs()
				for b.Loop() {
					total = 0
					if err := m.snapshot(w, st); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(total), "bytes")
			})
		}
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

// BenchmarkPatchFlip is issue 32's real change: one endpoint of a
// Service's slice of ten turns unready or ready again, in the store as the
// informer puts it, then the Service is mapped and the table patched, for
// each schema (a cluster of 1,500 Services as the churn bench has).
func BenchmarkPatchFlip(b *testing.B) {
	const services = 1500
	flip := func(st stores, i int) changes {
		id := fmt.Sprintf("ns-%d/svc-%d", i%50, i%services)
		old := st.slicesOf(id)[0]
		n := &kSlice{kMeta: old.kMeta, sl: old.sl}
		n.sl.Endpoints = slices.Clone(old.sl.Endpoints)
		ep := &n.sl.Endpoints[(i/services)%len(n.sl.Endpoints)]
		if ep.Ready == k8sdns.True {
			ep.Ready = k8sdns.False
		} else {
			ep.Ready = k8sdns.True
		}
		_ = st.slices.Update(n)
		return changes{names: map[string]bool{id: true}}
	}
	b.Run("schema=kubernetes", func(b *testing.B) {
		st := benchStores(services, 10)
		m := &dnsModel{}
		tbl := k8sdns.Build(m.whole(st).(*k8sdns.Cluster))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tbl = tbl.Patched(m.patch(st, flip(st, i), nil).(*k8sdns.Patch))
		}
	})
	b.Run("schema=orch", func(b *testing.B) {
		st := benchStores(services, 10)
		m := &orchModel{}
		zones := []string{"cluster.local."}
		tbl := orch.BuildTable(m.whole(st).(*orch.State), zones, false, true, nil)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tbl = tbl.Patched(m.patch(st, flip(st, i), nil).(*orch.Patch), zones, false, true, nil)
		}
	})
}

// BenchmarkNodeChange finds the Services with an endpoint on a changed
// Node (schema orch), by a look through 5,000 and 50,000 slices of ten
// endpoints on 500 nodes.
func BenchmarkNodeChange(b *testing.B) {
	for _, services := range []int{5000, 50000} {
		st := benchStores(services, 10)
		b.Run(fmt.Sprintf("slices=%d", services), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				names := map[string]bool{}
				onNodes(st, map[string]bool{fmt.Sprintf("node-%d", i%500): true}, names)
				if len(names) == 0 {
					b.Fatal("no Service on the node")
				}
			}
		})
	}
}

// byteCounter discards what is written and counts it.
type byteCounter struct{ n *int64 }

func (c byteCounter) Write(b []byte) (int, error) { *c.n += int64(len(b)); return len(b), nil }

// TestPatchCostFlat: the bytes a one-Service patch allocates (mapping it
// from the stores and patching the table, for each schema) do not grow
// with the cluster: at ten times the Services, less than twice as many
// (the trees are one level deeper). A patch used to copy the map of every
// Service, ten times the bytes at ten times the Services.
func TestPatchCostFlat(t *testing.T) {
	perPatch := func(services int, dns bool) float64 {
		st := benchStores(services, 2)
		const patches = 200
		var m0, m1 runtime.MemStats
		if dns {
			m := &dnsModel{}
			tbl := k8sdns.Build(m.whole(st).(*k8sdns.Cluster))
			runtime.ReadMemStats(&m0)
			for i := range patches {
				k := i * 7 % services
				c := changes{names: map[string]bool{fmt.Sprintf("ns-%d/svc-%d", k%50, k): true}}
				tbl = tbl.Patched(m.patch(st, c, nil).(*k8sdns.Patch))
			}
		} else {
			m := &orchModel{}
			zones := []string{"cluster.local."}
			tbl := orch.BuildTable(m.whole(st).(*orch.State), zones, false, false, nil)
			runtime.ReadMemStats(&m0)
			for i := range patches {
				k := i * 7 % services
				c := changes{names: map[string]bool{fmt.Sprintf("ns-%d/svc-%d", k%50, k): true}}
				tbl = tbl.Patched(m.patch(st, c, nil).(*orch.Patch), zones, false, false, nil)
			}
		}
		runtime.ReadMemStats(&m1)
		return float64(m1.TotalAlloc-m0.TotalAlloc) / patches
	}
	for _, dns := range []bool{true, false} {
		small, large := perPatch(2000, dns), perPatch(20000, dns)
		t.Logf("dns=%v: %.0f bytes per patch at 2,000 Services, %.0f at 20,000", dns, small, large)
		if large > 2*small {
			t.Errorf("dns=%v: a patch allocates %.0f bytes at 20,000 Services, %.1f times as many as at 2,000", dns, large, large/small)
		}
	}
}

// BenchmarkPatchRecord encodes the change-log record of one changed
// Service of ten endpoints (what the snapshot's log appends per patch),
// for each schema, into a buffer reused as the snapshot writer's batch
// is: the allocations are the encoder's own.
func BenchmarkPatchRecord(b *testing.B) {
	st := benchStores(1500, 10)
	c := changes{names: map[string]bool{"ns-7/svc-7": true}}
	for _, m := range []struct {
		name string
		p    interface{ AppendRecord([]byte) []byte }
	}{
		{"schema=kubernetes", (&dnsModel{}).patch(st, c, nil).(*k8sdns.Patch)},
		{"schema=orch", (&orchModel{}).patch(st, c, nil).(*orch.Patch)},
	} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf = m.p.AppendRecord(buf[:0])
			}
			b.ReportMetric(float64(len(buf)), "bytes")
		})
	}
}
