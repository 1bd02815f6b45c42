package endpointsvc

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
)

// TestParseStockBlock: the kubernetes plugin's block, pasted with its
// directive renamed, means what it meant: no source line is source
// kubernetes with schema kubernetes, zones from the server block when it
// names none, and the client options reach the source's configuration.
func TestParseStockBlock(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		in   string
		err  string
		chk  func(t *testing.T, e *Endpointsvc, k kubesource.Config)
	}{
		{keys: []string{"cluster.local:53"}, in: "endpointsvc {\n}", chk: func(t *testing.T, e *Endpointsvc, k kubesource.Config) {
			if _, ok := e.schema.(*dnsSchema); !ok || len(e.Zones) != 1 || e.Zones[0] != "cluster.local." || k.Kubeconfig != "" || k.API.Endpoint != "" {
				t.Errorf("bare block: zones %v, source %+v", e.Zones, k)
			}
		}},
		{keys: []string{".:53"}, in: "endpointsvc cluster.local in-addr.arpa ip6.arpa {\n pods insecure\n fallthrough in-addr.arpa ip6.arpa\n ttl 30\n}",
			chk: func(t *testing.T, e *Endpointsvc, k kubesource.Config) {
				d, ok := e.schema.(*dnsSchema)
				if !ok || len(e.Zones) != 3 || !d.srv.PodsInsecure || d.srv.TTL != 30 {
					t.Errorf("kubeadm's block: zones %v %+v", e.Zones, d)
				}
			}},
		{in: "endpointsvc cluster.local {\n kubeconfig /etc/kube.conf prod\n apiserver_qps 50\n apiserver_burst 100\n apiserver_max_inflight 8\n namespace_labels team=a, env in (p)\n}",
			chk: func(t *testing.T, e *Endpointsvc, k kubesource.Config) {
				if k.Kubeconfig != "/etc/kube.conf" || k.Context != "prod" || k.API.QPS != 50 || k.API.Burst != 100 || k.API.MaxInflight != 8 ||
					k.API.NamespaceLabels != "team=a, env in (p)" {
					t.Errorf("client options: %+v", k)
				}
			}},
		{in: "endpointsvc cluster.local {\n endpoint https://10.0.0.1:6443 https://10.0.0.2:6443\n tls /c.pem /k.pem /ca.pem\n}",
			chk: func(t *testing.T, e *Endpointsvc, k kubesource.Config) {
				if k.API.Endpoint != "https://10.0.0.1:6443" || k.API.TLSCert != "/c.pem" || k.API.TLSKey != "/k.pem" || k.API.TLSCA != "/ca.pem" {
					t.Errorf("endpoint and tls: %+v", k.API)
				}
			}},
		{in: "endpointsvc cluster.local {\n source kubernetes\n schema kubernetes\n kubeconfig /k\n}", chk: func(t *testing.T, e *Endpointsvc, k kubesource.Config) {
			if k.Kubeconfig != "/k" {
				t.Errorf("kubeconfig beside source kubernetes: %+v", k)
			}
		}},
		{in: "endpointsvc {\n source kubernetes\n kubeconfig /k\n apiserver_qps 20\n}", chk: func(t *testing.T, e *Endpointsvc, k kubesource.Config) {
			if _, ok := e.schema.(*orchSchema); !ok || k.Kubeconfig != "/k" || k.API.QPS != 20 {
				t.Errorf("client options with schema orch: %+v", k)
			}
		}},
		{in: "endpointsvc {\n source kubernetes /a\n kubeconfig /b\n}", err: "kubeconfig given twice"},
		{in: "endpointsvc {\n kubeconfig /a\n kubeconfig /b\n}", err: "kubeconfig given twice"},
		{in: "endpointsvc {\n kubeconfig\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\n endpoint\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\n tls /c.pem /k.pem\n}", err: "Testfile:2 - Error during parsing: tls with source kubernetes takes CERT KEY CACERT"},
		{in: "endpointsvc {\n source file a.json\n tls /c /k /ca\n}", err: "tls needs 'source orch URL' or 'source kubernetes'"},
		{in: "endpointsvc {\n apiserver_qps fast\n}", err: `invalid apiserver_qps "fast"`},
		{in: "endpointsvc {\n apiserver_qps -1\n}", err: "apiserver_qps must be >= 0"},
		{in: "endpointsvc {\n apiserver_burst -1\n}", err: "apiserver_burst must be >= 0"},
		{in: "endpointsvc {\n apiserver_max_inflight x\n}", err: `invalid apiserver_max_inflight "x"`},
		{in: "endpointsvc {\n apiserver_burst 1 2\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\n namespace_labels a=b=c\n}", err: `bad namespace_labels "a=b=c"`},
		{in: "endpointsvc {\n namespace_labels a=b\n namespaces x\n}", err: "namespaces and namespace_labels cannot both be set"},
		{in: "endpointsvc {\n source kubernetes\n namespace_labels a=b\n}", err: "namespace_labels needs 'schema kubernetes'"},
		{in: "endpointsvc {\n source file a.json\n apiserver_qps 5\n}", err: "apiserver_qps needs 'source kubernetes'"},
		{in: "endpointsvc {\n source file a.json\n schema kubernetes\n kubeconfig /k\n}", err: "kubeconfig needs 'source kubernetes'"},
		{in: "endpointsvc {\n schema orch\n kubeconfig /k\n}", err: "kubeconfig needs 'source kubernetes'"},
	} {
		c := caddy.NewTestController("dns", tc.in)
		c.ServerBlockKeys = tc.keys
		e, err := parse(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		tc.chk(t, e, e.source.(*kubesource.Source).Config())
	}
}

// TestCarryKeyClientOptions: the API server and the namespaces the source
// reads are in the carry key (a reload that changes them does not keep
// the old table); the rate limits are not.
func TestCarryKeyClientOptions(t *testing.T) {
	key := func(body string) string {
		t.Helper()
		e, err := parse(caddy.NewTestController("dns", "endpointsvc cluster.local {\n"+body+"}"))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		return e.carryKey
	}
	base := key("")
	if k := key("apiserver_qps 50\napiserver_burst 60\napiserver_max_inflight 3\n"); k != base {
		t.Errorf("rate limits changed the key: %s", k)
	}
	for _, body := range []string{"endpoint https://10.0.0.1:6443\n", "namespace_labels a=b\n", "kubeconfig /k\n",
		"endpoint https://10.0.0.1:6443\ntls /c /k /ca\n"} {
		if key(body) == base {
			t.Errorf("%q did not change the key", body)
		}
	}
}
