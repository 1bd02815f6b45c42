package endpointsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// FuzzServeDNS feeds arbitrary packets to the handler: whatever unpacks
// must get a reply (or go to the next plugin) and never a panic.
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"atlas.svc.orch.", dns.TypeA}, {"_http._tcp.atlas.svc.orch.", dns.TypeSRV}, {"node-1.node.svc.orch.", dns.TypeAAAA}, {"svc.orch.", dns.TypeSOA}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		b, _ := m.Pack()
		f.Add(b)
	}
	e := newTestPlugin(f, true)
	f.Fuzz(func(t *testing.T, b []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil || len(m.Question) != 1 {
			return
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		code, _ := e.ServeDNS(context.Background(), rec, m)
		if code != dns.RcodeRefused && rec.Msg == nil && code == dns.RcodeSuccess {
			t.Fatalf("NOERROR without a reply for %v", m.Question[0])
		}
	})
}

// FuzzParseCorefile checks that no Corefile text makes parse panic.
func FuzzParseCorefile(f *testing.F) {
	for _, s := range []string{
		"endpointsvc {\nsource file s.json 1s\nttl 10\n}",
		"endpointsvc a.example. {\nsource orch http://127.0.0.1:1/x\ntoken_file t\ntimeout 1s\nmax_body 1k\nmax_backoff 2s\nfallthrough\n}",
		"endpointsvc {\nnamespace x\ninclude_unhealthy\nsnapshot s\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parse(caddy.NewTestController("dns", s))
	})
}

func FuzzDecodeState(f *testing.F) {
	good, _ := os.ReadFile("testdata/state.json")
	f.Add(good)
	f.Add([]byte(`{"services":[],"tasks":[],"nodes":[]}`))
	f.Add([]byte(`{"nodes":[{"id":"n","name":"a","address":"[::1]:1","status":"ready"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeState(b)
		if err != nil {
			return
		}
		// a valid state builds a table, and its snapshot form decodes again
		buildTable(st, []string{"svc.orch."}, true, true, nil, 1)
		if _, err := DecodeState(mustJSON(t, st)); err != nil {
			t.Fatalf("snapshot of a valid state is invalid: %v", err)
		}
	})
}

// FuzzDecodeSnapshot: a snapshot in either form is rejected whole or
// decodes to a valid state that builds both schemas' tables, and whose
// compact form decodes again to the same services.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, path := range []string{"testdata/state.json", "testdata/spec-state.json"} {
		good, _ := os.ReadFile(path)
		f.Add(good)
		st, err := DecodeState(good)
		if err != nil {
			f.Fatal(err)
		}
		var b bytes.Buffer
		if err := st.encodeCompact(&b); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte(`{"format":"meshdns-state-compact/1","nodes":[],"services":[{"service":{"id":"s","name":"a","status":"active"},"groups":[{"desired":"running","actual":"healthy","tasks":[["","10.0.0.1","h"]]}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		buildTable(st, []string{"svc.orch."}, true, true, nil, 1)
		buildSpecTable(st)
		var out bytes.Buffer
		if err := st.encodeCompact(&out); err != nil {
			t.Fatal(err)
		}
		back, err := DecodeSnapshot(out.Bytes())
		if err != nil {
			t.Fatalf("the compact form of a valid state is invalid: %v\n%s", err, out.String())
		}
		if len(back.Services) != len(st.Services) || len(back.Tasks) != len(st.Tasks) {
			t.Fatalf("%d services, %d tasks after the round trip; want %d, %d", len(back.Services), len(back.Tasks), len(st.Services), len(st.Tasks))
		}
	})
}

// FuzzKubeState feeds API objects (JSON) through the transforms and the
// mapping: whatever the API server sends, the state must validate.
func FuzzKubeState(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"web","namespace":"default"},"spec":{"type":"NodePort","ports":[{"name":"http","protocol":"TCP","port":80,"nodePort":30080}]}}`),
		[]byte(`{"metadata":{"name":"web-1","namespace":"default","labels":{"kubernetes.io/service-name":"web"}},"addressType":"FQDN","endpoints":[{"addresses":["a.example.test"],"conditions":{"ready":true}}],"ports":[{"name":"http","port":8080}]}`),
		[]byte(`{"metadata":{"name":"n1"},"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"conditions":[{"type":"Ready","status":"False"}]}}`))
	f.Fuzz(func(t *testing.T, svcJSON, sliceJSON, nodeJSON []byte) {
		var svc corev1.Service
		var sl discoveryv1.EndpointSlice
		var n corev1.Node
		if json.Unmarshal(svcJSON, &svc) != nil || json.Unmarshal(sliceJSON, &sl) != nil || json.Unmarshal(nodeJSON, &n) != nil {
			return
		}
		ks, _ := transformService(nil)(&svc)
		kl, _ := transformSlice(nil)(&sl)
		kn, _ := transformNode(&n)
		st := kubeState([]*kService{ks.(*kService)}, []*kSlice{kl.(*kSlice)}, []*kNode{kn.(*kNode)}, nil)
		if err := st.Validate(); err != nil {
			t.Fatalf("mapped state does not validate: %v", err)
		}
		buildTable(st, []string{"cluster.local."}, false, true, nil, 1)
	})
}
