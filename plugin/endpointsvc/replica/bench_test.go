package replica

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

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

// BenchmarkBucketResume: what a follower that moves to a replica which
// never had its state receives (version 4: the buckets whose digests
// differ) against the whole state, at 5,000 Services (specCluster) with
// 1, 10 and 100 names different; and the leader's work to find and
// encode them.
//
//	go test -run - -bench BucketResume -benchtime 20x ./plugin/endpointsvc/replica/
func BenchmarkBucketResume(b *testing.B) {
	base := k8sdns.Build(specCluster(5000))
	whole := len(encodeWhole(&state{table: base}).b)
	_, theirs := wholeBuckets(base)
	var lanes [Buckets]uint64
	for i, d := range theirs {
		lanes[i] = d[0]
	}
	for _, n := range []int{1, 10, 100} {
		c := specCluster(5000)
		for i := range n { // another port on n Services, spread over the namespaces
			c.Services[i*37%len(c.Services)].Ports[0].Port = 81
		}
		l := NewLeader("cluster.local.", "")
		l.Rebuilt(k8sdns.Build(c))
		b.Run(fmt.Sprintf("differ/%d", n), func(b *testing.B) {
			var size int
			for b.Loop() {
				l.enc.lastBucket = weak.Pointer[encoded]{} // encode each time
				s := l.next("0", 1, zeroDigest, &lanes, true)
				size = len(s.body.b)
			}
			b.ReportMetric(float64(size), "bytes/resume")
			b.ReportMetric(float64(whole), "bytes/whole")
		})
	}
}

// BenchmarkStreamHeap: the leader's live heap per open idle stream, after
// each got its first state (a small table), with 100 and 1,000 streams
// from raw loopback connections in the same process (their own heap, a
// socket each, is counted in).
//
//	go test -run - -bench StreamHeap -benchtime 1x ./plugin/endpointsvc/replica/
func BenchmarkStreamHeap(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, over := range []bool{true, false} {
			name := fmt.Sprintf("takeover/streams/%d", n)
			if !over {
				name = fmt.Sprintf("responsewriter/streams/%d", n)
			}
			b.Run(name, func(b *testing.B) { streamHeap(b, n, over) })
		}
	}
}

// streamHeap measures n streams' heap; over: taken over (as Server
// serves them), else written through the ResponseWriter (as before).
func streamHeap(b *testing.B, n int, over bool) {
	{
		{
			for b.Loop() {
				l := NewLeader("cluster.local.", "")
				l.Rebuilt(k8sdns.Build(specCluster(100)))
				var h http.Handler = l
				if !over {
					h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						l.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), baseKey{}, nil)))
					})
				}
				base, srv := serveLeader(b, h)
				addr := strings.TrimPrefix(base, "http://")
				before := liveHeap()
				conns := make([]net.Conn, 0, n)
				for range n {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
					fmt.Fprintf(c, "GET %s?v=%d HTTP/1.1\r\nHost: x\r\n\r\n", Path, Version)
				}
				buf := make([]byte, 64<<10)
				for _, c := range conns { // read up to the first synced line
					got := buf[:0:0]
					for !bytes.Contains(got, []byte(`"synced":true`)) {
						k, err := c.Read(buf)
						if err != nil {
							b.Fatal(err)
						}
						got = append(got, buf[:k]...)
					}
				}
				for l.Stats.Streams.Load() != int64(n) {
					time.Sleep(time.Millisecond)
				}
				after := liveHeap()
				b.ReportMetric(float64(int64(after)-int64(before))/float64(n), "heapB/stream")
				for _, c := range conns {
					c.Close()
				}
				srv.Stop()
			}
		}
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
