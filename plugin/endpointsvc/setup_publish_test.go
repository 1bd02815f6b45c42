package endpointsvc

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

func TestParsePublish(t *testing.T) {
	for _, tc := range []struct {
		in, err         string
		namespace, name string
		selector        string
	}{
		{in: "source kubernetes\nschema kubernetes\npublish meshdns app.kubernetes.io/name=meshdns", name: "meshdns", selector: "app.kubernetes.io/name=meshdns"},
		{in: "source kubernetes\npublish kube-system/dns", namespace: "kube-system", name: "dns"},
		{in: "source file a.json\npublish meshdns", err: "publish needs 'source kubernetes'"},
		{in: "source kubernetes\npublish", err: "Wrong argument count"},
		{in: "source kubernetes\npublish Bad_Name", err: "bad Service"},
		{in: "source kubernetes\npublish meshdns a=(", err: "bad pod selector"},
	} {
		e, err := parse(caddy.NewTestController("dns", "endpointsvc cluster.local {\n"+tc.in+"\n}"))
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
		p := e.publishing
		if p == nil || p.namespace != tc.namespace || p.service != tc.name || p.pods.String() != tc.selector {
			t.Errorf("%q: publishing %+v", tc.in, p)
		}
	}
}

// TestPublishPodIdentity: the pod's name and namespace come from the
// downward API's variables, the namespace of the option first.
func TestPublishPodIdentity(t *testing.T) {
	t.Setenv("POD_NAME", "meshdns-abc")
	t.Setenv("POD_NAMESPACE", "kube-system")
	p := &publishing{}
	if n, ns := p.podIdentity(); n != "meshdns-abc" || ns != "kube-system" {
		t.Errorf("identity %s/%s", ns, n)
	}
	p.namespace = "dns"
	if _, ns := p.podIdentity(); ns != "dns" {
		t.Errorf("namespace %s, want the option's", ns)
	}
}

// TestPublishCrossNamespace: a Service in another namespace than the
// pod's is refused with an error that says so (a replica's slices and
// Lease live in its own namespace), not published silently to nothing.
func TestPublishCrossNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "kube-system")
	for _, tc := range []struct {
		namespace string
		refused   bool
	}{{"", false}, {"kube-system", false}, {"dns", true}} {
		p := &publishing{namespace: tc.namespace, service: "meshdns"}
		e := p.crossNamespace()
		if (e != "") != tc.refused || (tc.refused && !strings.Contains(e, "dns/meshdns is in another namespace than this pod (kube-system)")) {
			t.Errorf("Service namespace %q: %q, refused want %v", tc.namespace, e, tc.refused)
		}
	}
}
