package endpointsvc

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in  string
		err string
		chk func(t *testing.T, e *Endpointsvc)
	}{
		{in: `endpointsvc {
			source file state.json
		}`, chk: func(t *testing.T, e *Endpointsvc) {
			f, o := e.source.(*fileSource), orchOf(e)
			if e.Zones[0] != "svc.orch." || o.srv.TTL != 30 || o.srv.Namespace != "default" || f.path != abs(t, "state.json") || f.interval != 5*time.Second || f.decode == nil {
				t.Errorf("defaults: %+v %+v", e, f)
			}
		}},
		{in: `endpointsvc mesh.example. other.example {
			source orch http://127.0.0.1:8080/v1/state 2s
			namespace Prod
			include_unhealthy
			ttl 10s
			snapshot /var/lib/meshdns/state.json
			fallthrough
			token_file /run/secrets/token
			timeout 1s
			max_backoff 30s
			max_body 8m
		}`, chk: func(t *testing.T, e *Endpointsvc) {
			o, s := e.source.(*orchSource), orchOf(e)
			if len(e.Zones) != 2 || e.Zones[1] != "other.example." || s.srv.Namespace != "prod" || !s.includeUnhealthy || s.srv.TTL != 10 ||
				e.snapshotPath != "/var/lib/meshdns/state.json" || o.interval != 2*time.Second || o.timeout != time.Second ||
				o.maxBackoff != 30*time.Second || o.maxBody != 8<<20 || o.tokenFile != "/run/secrets/token" || !e.Fall.Through("x.mesh.example.") {
				t.Errorf("options: %+v %+v", e, o)
			}
		}},
		{in: "endpointsvc {\nsource orch https://orch.example:8443/state\ntls\ntls_servername orch.internal\n}", chk: func(t *testing.T, e *Endpointsvc) {
			o := e.source.(*orchSource)
			if o.tlsConfig == nil || o.tlsConfig.ServerName != "orch.internal" || o.timeout != defaultOrchTimeout || o.maxBody != defaultMaxBody {
				t.Errorf("tls: %+v", o)
			}
		}},
		{in: "endpointsvc {\nttl 45\nsource file s.json 1s\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if orchOf(e).srv.TTL != 45 || e.source.(*fileSource).interval != time.Second {
				t.Errorf("ttl %d", orchOf(e).srv.TTL)
			}
		}},
		{in: "endpointsvc cluster.local {\nsource kubernetes\n}", chk: func(t *testing.T, e *Endpointsvc) {
			k := e.source.(*kubesource.Source).Config()
			if k.Kubeconfig != "" || k.Context != "" || k.Labels != "" || k.Namespaces != nil || k.NodeAddress != nil || orchOf(e).endpointMode {
				t.Errorf("kubernetes defaults: %+v", k)
			}
		}},
		{in: "endpointsvc {\nsource kubernetes /etc/kube.conf prod\nnode_address ExternalIP InternalIP\naddresses endpoint\nlabels app in (a, b)\nnamespaces Knative default\nfallthrough\n}", chk: func(t *testing.T, e *Endpointsvc) {
			k := e.source.(*kubesource.Source).Config()
			if k.Kubeconfig != "/etc/kube.conf" || k.Context != "prod" || k.Labels != "app in (a, b)" || fmt.Sprint(k.Namespaces) != "[knative default]" ||
				fmt.Sprint(k.NodeAddress) != "[externalip internalip]" || !orchOf(e).endpointMode || orchOf(e).srv.Upstream == nil {
				t.Errorf("kubernetes options: %+v", k)
			}
		}},
		{in: "endpointsvc {\nsource file a.json\naddresses endpoint\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if !orchOf(e).endpointMode {
				t.Error("addresses endpoint with a file source")
			}
		}},
		{in: "endpointsvc cluster.local in-addr.arpa ip6.arpa {\nsource kubernetes\nschema kubernetes\npods insecure\nfallthrough in-addr.arpa ip6.arpa\n}", chk: func(t *testing.T, e *Endpointsvc) {
			d, ok := e.schema.(*dnsSchema)
			if !ok || !strings.Contains(e.source.Key(), "model=kubernetes") || !d.srv.PodsInsecure || d.srv.TTL != defaultSpecTTL || d.srv.Primary != 0 || len(e.Zones) != 3 ||
				!e.Fall.Through("1.0.0.10.in-addr.arpa.") || e.Fall.Through("x.cluster.local.") {
				t.Errorf("schema kubernetes: %+v", e)
			}
		}},
		{in: "endpointsvc in-addr.arpa example.local {\nsource file s.json\nschema kubernetes\nttl 30\n}", chk: func(t *testing.T, e *Endpointsvc) {
			d, ok := e.schema.(*dnsSchema)
			if !ok || d.srv.PodsInsecure || d.srv.TTL != 30 || d.srv.Primary != 1 || d.srv.Upstream == nil {
				t.Errorf("schema kubernetes from a file: %+v", e)
			}
		}},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if len(e.Zones) != 1 || e.Zones[0] != "cluster.local." {
				t.Errorf("schema kubernetes default zone: %v", e.Zones)
			}
		}},
		{in: "endpointsvc {\nsource kubernetes\nschema kubedns\n}", err: `bad schema "kubedns": want orch or kubernetes`},
		{in: "endpointsvc {\nsource kubernetes\npods insecure\n}", err: "pods needs 'schema kubernetes'"},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\npods verified\n}", chk: func(t *testing.T, e *Endpointsvc) {
			d := e.schema.(*dnsSchema)
			if !d.srv.PodsVerified || d.srv.PodsInsecure || !e.source.(*kubesource.Source).Config().Pods {
				t.Errorf("pods verified: verified %v insecure %v, source %+v", d.srv.PodsVerified, d.srv.PodsInsecure, e.source.(*kubesource.Source).Config())
			}
		}},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\npods trusted\n}", err: `bad pods "trusted": want disabled, insecure or verified`},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nendpoint_pod_names\nignore empty_service\nnoendpoints\nstartup_timeout 7s\n}", chk: func(t *testing.T, e *Endpointsvc) {
			d := e.schema.(*dnsSchema)
			if !d.srv.EndpointPodNames || !d.srv.IgnoreEmptyService || !d.noEndpoints || e.startupTimeout != 7*time.Second ||
				!e.source.(*kubesource.Source).Config().NoEndpoints {
				t.Errorf("options: pod names %v ignore %v noendpoints %v startup %v", d.srv.EndpointPodNames, d.srv.IgnoreEmptyService, d.noEndpoints, e.startupTimeout)
			}
		}},
		{in: "endpointsvc {\nsource kubernetes\nendpoint_pod_names\n}", err: "endpoint_pod_names needs 'schema kubernetes'"},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nignore empty_services\n}", err: `bad ignore "empty_services": want empty_service`},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nnoendpoints x\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nendpoint_pod_names x\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nstartup_timeout soon\n}", err: `bad startup_timeout "soon"`},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nstartup_timeout\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\naddresses endpoint\n}", err: "addresses does not apply to 'schema kubernetes'"},
		{in: "endpointsvc {\nsource kubernetes\nschema kubernetes\nnamespace prod\n}", err: "namespace does not apply to 'schema kubernetes'"},
		{in: "endpointsvc in-addr.arpa {\nsource kubernetes\nschema kubernetes\n}", err: "needs a zone that is not a reverse zone"},
		{in: "endpointsvc {\nsource kubernetes a b c\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource kubernetes\naddresses pod\n}", err: `bad addresses "pod": want node or endpoint`},
		{in: "endpointsvc {\nsource kubernetes\nnode_address InternalIP LoopbackIP\n}", err: `bad node_address "LoopbackIP"`},
		{in: "endpointsvc {\nsource kubernetes\nlabels a=b=c\n}", err: `bad labels "a=b=c"`},
		{in: "endpointsvc {\nsource kubernetes\nnamespaces a_b\n}", err: `bad namespace "a_b"`},
		{in: "endpointsvc {\nsource kubernetes\nnamespaces\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource file a.json\nlabels app=x\n}", err: "labels needs 'source kubernetes'"},
		{in: "endpointsvc {\nsource kubernetes\ntoken_file t\n}", err: "token_file needs 'source orch URL'"},
		{in: "endpointsvc {\nschema orch\n}", err: "no source"},
		{in: "endpointsvc {\nsource file a.json\nsource file b.json\n}", err: "only one source"},
		{in: "endpointsvc {\nsource file\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource consul x\n}", err: `unknown source "consul"`},
		{in: "endpointsvc {\nsource file a.json\nsnapshot s.json\nempty_grace 30s\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if e.emptyGrace != 30*time.Second {
				t.Errorf("empty_grace %v", e.emptyGrace)
			}
		}},
		{in: "endpointsvc {\nsource file a.json\nsnapshot s.json\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if e.emptyGrace != 5*time.Minute {
				t.Errorf("default empty_grace %v, want 5m", e.emptyGrace)
			}
		}},
		{in: "endpointsvc {\nsource file a.json\nempty_grace 1m\n}", err: "empty_grace needs snapshot"},
		{in: "endpointsvc {\nsource file a.json\nsnapshot s.json\nempty_grace soon\n}", err: `bad empty_grace "soon"`},
		{in: "endpointsvc {\nsource orch ftp://x/\n}", err: `bad orch URL "ftp://x/"`},
		{in: "endpointsvc {\nsource file a.json 1ms\n}", err: `bad interval "1ms"`},
		{in: "endpointsvc {\nsource file a.json\nttl 1.5s\n}", err: `invalid TTL "1.5s" (want whole seconds`},
		{in: "endpointsvc {\nsource file a.json\nttl forever\n}", err: `invalid TTL "forever"`},
		{in: "endpointsvc {\nsource file a.json\nttl 100000\n}", err: `want 0s to 86400s`},
		{in: "endpointsvc {\nsource file a.json\nnamespace node\n}", err: `bad namespace "node"`},
		{in: "endpointsvc {\nsource file a.json\nnamespace a_b\n}", err: `bad namespace "a_b"`},
		{in: "endpointsvc {\nsource file a.json\ninclude_unhealthy yes\n}", err: "Wrong argument count"},
		{in: "endpointsvc {\nsource file a.json\ntoken_file t\n}", err: "token_file needs 'source orch URL'"},
		{in: "endpointsvc {\nsource orch http://x/\nmax_body lots\n}", err: `bad max_body "lots"`},
		{in: "endpointsvc {\nsource orch http://x/\ntimeout -1s\n}", err: `bad timeout "-1s"`},
		{in: "endpointsvc {\nsource orch http://x/\ntls /no/such/ca.pem\n}", err: "tls:"},
		{in: "endpointsvc {\nsource file a.json\ncolour red\n}", err: `unknown property "colour"`},
		{in: "endpointsvc {\nsource file a.json\n}\nendpointsvc {\nsource file a.json\n}", err: "only be used once"},
	} {
		c := caddy.NewTestController("dns", tc.in)
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
		tc.chk(t, e)
	}
}

func TestParseErrorNamesLine(t *testing.T) {
	c := caddy.NewTestController("dns", "endpointsvc {\n  source file a.json\n  ttl x\n}")
	_, err := parse(c)
	if err == nil || !strings.Contains(err.Error(), "Testfile:3") {
		t.Fatalf("error %v does not name file and line", err)
	}
}

// abs is p made absolute as conf.Path does without a root.
func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestCarryKeyCoversTheSource: a reload hands the table over only to an
// instance whose table would be the same: any option the table or the
// source's selection depends on changes the key, so a reload that changes
// the filter during an outage does not keep serving the old filter's table.
func TestCarryKeyCoversTheSource(t *testing.T) {
	base := "source kubernetes /etc/kubeconfig ctx\nschema kubernetes\n"
	key := func(body string) string {
		t.Helper()
		e, err := parse(caddy.NewTestController("dns", "endpointsvc cluster.local {\n"+body+"}"))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		return e.carryKey
	}
	same := key(base)
	if k := key(base + "ttl 30\n"); k != same {
		t.Errorf("the TTL changed the key: %q vs %q", k, same)
	}
	seen := map[string]string{same: "base"}
	for _, body := range []string{
		base + "labels app=web\n",
		base + "namespaces shop\n",
		base + "namespaces shop other\n",
		base + "pods insecure\n",
		base + "pods verified\n",
		base + "noendpoints\n",
		"source kubernetes /etc/kubeconfig other\nschema kubernetes\n",
		"source kubernetes /etc/other\nschema kubernetes\n",
		"source kubernetes /etc/kubeconfig ctx\n",
		"source kubernetes /etc/kubeconfig ctx\nnode_address ExternalIP\n",
		"source file a.json\nschema kubernetes\n",
		"source file b.json\nschema kubernetes\n",
		"source orch http://127.0.0.1:1/state\nschema kubernetes\n",
	} {
		k := key(body)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q has the key of %q: %s", body, prev, k)
		}
		seen[k] = body
	}
}
