package endpointsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"

	"github.com/miekg/dns"
)

// bigState is the benchmark's orchestrator: services × tasks on nodes, task
// j of service i on node (i*tasks+j) % nodes, the same shape that
// build/bench-endpointsvc.sh feeds the binary.
func bigState(services, tasks, nodes int) *orch.State {
	st := &orch.State{}
	for n := 0; n < nodes; n++ {
		st.Nodes = append(st.Nodes, orch.Node{ID: fmt.Sprintf("n-%d", n), Name: fmt.Sprintf("node-%d", n),
			Address: fmt.Sprintf("10.%d.%d.%d:7946", n/65536%256, n/256%256, n%256), Status: "ready"})
	}
	for i := 0; i < services; i++ {
		st.Services = append(st.Services, orch.Service{ID: fmt.Sprintf("s-%d", i), Name: fmt.Sprintf("svc-%d", i), Status: "active",
			Ports: []orch.ServicePort{{Name: "http", Protocol: "tcp", TargetPort: 80}}})
		for j := 0; j < tasks; j++ {
			st.Tasks = append(st.Tasks, orch.Task{ID: fmt.Sprintf("t-%d-%d", i, j), ServiceID: fmt.Sprintf("s-%d", i),
				NodeID: fmt.Sprintf("n-%d", (i*tasks+j)%nodes), DesiredStatus: "running", ActualStatus: "healthy",
				Ports: []orch.TaskPort{{Name: "http", Protocol: "tcp", ContainerPort: 80, HostPort: 30000 + j}}})
		}
	}
	return st
}

func benchPlugin(b *testing.B) *Endpointsvc {
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	st := bigState(10000, 10, 1000)
	if err := st.Validate(); err != nil {
		b.Fatal(err)
	}
	e.apply(context.Background(), "bench", st, false)
	e.resolveHosts(context.Background()) // apply leaves hostnames to the refresher
	return e
}

func benchServe(b *testing.B, qname string, qtype uint16, answers int) {
	e := benchPlugin(b)
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	w := &test.ResponseWriter{}
	ctx := context.Background()
	rec := dnstest.NewRecorder(w)
	e.ServeDNS(ctx, rec, m)
	if rec.Msg == nil || len(rec.Msg.Answer) != answers {
		b.Fatalf("reply %v, want %d answers", rec.Msg, answers)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.ServeDNS(ctx, w, m)
	}
}

// BenchmarkServeDNS measures the hot path on 10,000 services × 10 tasks.
func BenchmarkServeDNS(b *testing.B) {
	b.Run("A", func(b *testing.B) { benchServe(b, "svc-4242.svc.orch.", dns.TypeA, 10) })
	b.Run("SRV", func(b *testing.B) { benchServe(b, "_http._tcp.svc-4242.svc.orch.", dns.TypeSRV, 10) })
	b.Run("NXDOMAIN", func(b *testing.B) { benchServe(b, "nope.svc.orch.", dns.TypeA, 0) })
}

// BenchmarkLoad measures decoding and building the table of 10,000 services
// × 10 tasks on 1,000 nodes, and reports the heap the table keeps.
func BenchmarkLoad(b *testing.B) {
	doc, err := json.Marshal(bigState(10000, 10, 1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var heap uint64
	var decode, build time.Duration
	for i := 0; i < b.N; i++ {
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		t0 := time.Now()
		st, err := orch.DecodeState(doc)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		t := orch.BuildTable(st, []string{"svc.orch."}, false, false, nil)
		decode, build = decode+t1.Sub(t0), build+time.Since(t1)
		st = nil
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		heap = ms1.HeapAlloc - ms0.HeapAlloc
		runtime.KeepAlive(t)
	}
	b.ReportMetric(float64(decode.Milliseconds())/float64(b.N), "decode-ms")
	b.ReportMetric(float64(build.Milliseconds())/float64(b.N), "build-ms")
	b.ReportMetric(float64(heap)/(1<<20), "table-MiB")
	b.ReportMetric(float64(len(doc))/(1<<20), "json-MiB")
}
