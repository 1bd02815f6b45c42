package kubesource

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// FuzzTransforms feeds API objects (JSON) through the transforms and both
// mappings: whatever the API server sends, the orch state validates, and
// the Kubernetes DNS cluster's snapshot (written from the stores, as the
// source writes it) decodes to the same table - the snapshot of anything
// the source serves loads at the next start.
func FuzzTransforms(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"web","namespace":"node"},"spec":{"type":"NodePort","clusterIPs":["10.96.0.5","fd00::5"],"ports":[{"name":"http","protocol":"TCP","port":80,"nodePort":30080}]}}`),
		[]byte(`{"metadata":{"name":"web-1","namespace":"node","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","endpoints":[{"addresses":["10.1.0.1","10.1.0.2"],"hostname":"h","nodeName":"n1","targetRef":{"name":"p"},"conditions":{"ready":false,"terminating":true}}],"ports":[{"name":"http","port":8080}]}`),
		[]byte(`{"metadata":{"name":"n1"},"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"conditions":[{"type":"Ready","status":"False"}]}}`),
		[]byte(`{"metadata":{"name":"node"}}`))
	f.Add([]byte(`{"metadata":{"name":"ext","namespace":"a"},"spec":{"type":"ExternalName","externalName":"x.example."}}`),
		[]byte(`{"metadata":{"name":"r","namespace":"a","labels":{"kubernetes.io/service-name":"Ext"}},"addressType":"FQDN","endpoints":[{"addresses":["a.example.test"]}]}`),
		[]byte(`{}`), []byte(`{"metadata":{"name":"a"}}`))
	f.Fuzz(func(t *testing.T, svcJSON, sliceJSON, nodeJSON, nsJSON []byte) {
		var svc corev1.Service
		var sl discoveryv1.EndpointSlice
		var n corev1.Node
		var ns corev1.Namespace
		if json.Unmarshal(svcJSON, &svc) != nil || json.Unmarshal(sliceJSON, &sl) != nil ||
			json.Unmarshal(nodeJSON, &n) != nil || json.Unmarshal(nsJSON, &ns) != nil {
			return
		}
		st := newStores()
		load(t, st, &svc, &sl, &n, &ns)
		mapped := (&orchModel{}).whole(st).(*orch.State)
		if err := mapped.Validate(); err != nil {
			t.Fatalf("mapped orch state does not validate: %v", err)
		}
		orch.BuildTable(mapped, []string{"cluster.local."}, false, true, nil)
		var buf bytes.Buffer
		if err := (&orchModel{}).snapshot(&buf, st); err != nil {
			t.Fatal(err)
		}
		if _, err := orch.DecodeSnapshot(buf.Bytes()); err != nil {
			t.Fatalf("the orch snapshot does not load: %v\n%s", err, buf.String())
		}
		dm := &dnsModel{}
		want := k8sdns.Build(dm.whole(st).(*k8sdns.Cluster)).Describe()
		buf.Reset()
		if err := dm.snapshot(&buf, st); err != nil {
			t.Fatal(err)
		}
		c, err := k8sdns.DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("the kubernetes snapshot does not load: %v\n%s", err, buf.String())
		}
		if got := k8sdns.Build(c).Describe(); got != want {
			t.Fatalf("the snapshot's table differs:\n%s\nwant:\n%s", got, want)
		}
	})
}
