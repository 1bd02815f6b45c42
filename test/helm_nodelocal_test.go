package test

// The chart's node-local mode: its addresses, the cluster DNS it follows
// and its names render into every place that names them.

import (
	"reflect"
	"strings"
	"testing"
)

const (
	helmNodeLocalDS  = "DaemonSet kube-system/meshdns-node-local"
	helmNodeLocalCM  = "ConfigMap kube-system/meshdns-node-local"
	helmNodeLocalSvc = "Service kube-system/meshdns-upstream"
)

// TestHelmValuesNodeLocal: other addresses reach the init container, bind,
// health, ready, metrics and the probes; the replication source and
// forward go through the upstream Service (another port reaches it), not
// the cluster DNS address; nothing of the cluster mode is rendered.
func TestHelmValuesNodeLocal(t *testing.T) {
	objs := renderWith(t, `
mode: node-local
nodeLocal:
  addresses: [169.254.0.53, 10.43.0.10]
  clusterDNS: 10.43.0.10
  replicationPort: 9156
  stateHostPath: /srv/meshdns
`)
	if keys := sortedKeys(objs); strings.Join(keys, ",") != helmNodeLocalCM+","+helmNodeLocalDS+","+helmNodeLocalSvc {
		t.Errorf("mode node-local rendered %v, want only its ConfigMap, DaemonSet and upstream Service", keys)
	}
	corefile, _ := field(objs[helmNodeLocalCM], "data.Corefile").(string)
	for _, want := range []string{"bind 169.254.0.53 10.43.0.10\n", "health 169.254.0.53:8080 {", "ready 169.254.0.53:8181\n",
		"prometheus 169.254.0.53:9253\n", "source replica http://" + nodeLocalUpstreamVar + ":9156 {\n", "forward . " + nodeLocalUpstreamVar + "\n"} {
		if !strings.Contains(corefile, want) {
			t.Errorf("the node-local Corefile has no %q:\n%s", want, corefile)
		}
	}
	if strings.Contains(corefile, "10.43.0.10:") || strings.Contains(corefile, "forward . 10.43.0.10") {
		t.Errorf("the node-local Corefile goes to the cluster DNS address on its own lo:\n%s", corefile)
	}
	wantField(t, objs, helmNodeLocalSvc, "spec.ports", "[{name: dns, port: 53, protocol: UDP, targetPort: 53}, {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}, {name: replication, port: 9156, protocol: TCP, targetPort: 9156}]")
	if n := strings.Count(corefile, "bind 169.254.0.53 10.43.0.10\n"); n != 2 {
		t.Errorf("bind in %d server blocks, want 2", n)
	}
	spec := "spec.template.spec."
	wantField(t, objs, helmNodeLocalDS, spec+"initContainers.0.args", `["-node-local-setup", "169.254.0.53,10.43.0.10"]`)
	wantField(t, objs, helmNodeLocalDS, spec+"containers.0.readinessProbe.httpGet", "{host: 169.254.0.53, path: /ready, port: 8181, scheme: HTTP}")
	wantField(t, objs, helmNodeLocalDS, spec+"containers.0.livenessProbe.httpGet", "{host: 169.254.0.53, path: /health, port: 8080, scheme: HTTP}")
	wantField(t, objs, helmNodeLocalDS, spec+"volumes.1.hostPath.path", "/srv/meshdns")
	wantField(t, objs, helmNodeLocalDS, spec+"hostNetwork", "true")
	wantField(t, objs, helmNodeLocalDS, spec+"automountServiceAccountToken", "false")
	wantField(t, objs, helmNodeLocalDS, spec+"containers.0.ports", "null")
}

// TestHelmValuesNodeLocalUpstream: the upstream Service selects exactly
// the cluster release's Deployment's pods (and not the node-local's) on
// the DNS ports and the stream's; the Corefile forwards to and follows
// the stream from the Service link variable of its name, with service
// links on; a pinned ClusterIP goes to the Service and the Corefile (no
// service links needed); another name or selector is used as given;
// upstream.enabled false goes through clusterDNS, as before, without the
// Service; TLS checks the certificate against clusterDNS by default.
func TestHelmValuesNodeLocalUpstream(t *testing.T) {
	cluster := mustRender(t)
	objs := mustRender(t, "--set", "mode=node-local")
	sel := field(cluster[helmDeployment], "spec.selector.matchLabels")
	if got := field(objs[helmNodeLocalSvc], "spec.selector"); !reflect.DeepEqual(got, sel) {
		t.Errorf("upstream selector %s, want the cluster Deployment's %s", jsonOf(got), jsonOf(sel))
	}
	podLabels, _ := field(cluster[helmDeployment], "spec.template.metadata.labels").(map[string]any)
	selMap, _ := sel.(map[string]any)
	for k, v := range selMap {
		if podLabels[k] != v {
			t.Errorf("upstream selector %s=%v: the cluster DNS pods have %v", k, v, podLabels[k])
		}
	}
	if reflect.DeepEqual(sel, field(objs[helmNodeLocalDS], "spec.selector.matchLabels")) {
		t.Errorf("upstream selector %s selects the node-local pods", jsonOf(sel))
	}
	wantField(t, objs, helmNodeLocalSvc, "spec.ports", "[{name: dns, port: 53, protocol: UDP, targetPort: 53}, {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}, {name: replication, port: 9155, protocol: TCP, targetPort: 9155}]")
	wantField(t, objs, helmNodeLocalSvc, "spec.clusterIP", "null")
	wantField(t, objs, helmNodeLocalDS, "spec.template.spec.enableServiceLinks", "true")
	corefile, _ := field(objs[helmNodeLocalCM], "data.Corefile").(string)
	for _, want := range []string{"source replica http://" + nodeLocalUpstreamVar + ":9155 {\n", "forward . " + nodeLocalUpstreamVar + "\n"} {
		if !strings.Contains(corefile, want) {
			t.Errorf("the node-local Corefile has no %q:\n%s", want, corefile)
		}
	}
	if n := strings.Count(corefile, "forward . "+nodeLocalUpstreamVar+"\n"); n != 2 {
		t.Errorf("%d forward lines to the upstream, want 2:\n%s", n, corefile)
	}
	if strings.Contains(corefile, clusterDNSIP+":") || strings.Contains(corefile, "forward . "+clusterDNSIP) {
		t.Errorf("the node-local Corefile goes to the cluster DNS address on its own lo:\n%s", corefile)
	}

	// a release named edge: its cluster release edge-meshdns has edge-meshdns-upstream
	objs = mustRenderRelease(t, "edge", "--set", "mode=node-local")
	corefile, _ = field(objs["ConfigMap kube-system/edge-meshdns-node-local"], "data.Corefile").(string)
	if _, ok := objs["Service kube-system/edge-meshdns-upstream"]; !ok || !strings.Contains(corefile, "forward . {$EDGE_MESHDNS_UPSTREAM_SERVICE_HOST}\n") {
		t.Errorf("release edge: want Service edge-meshdns-upstream and its variable in the Corefile; rendered %v:\n%s", sortedKeys(objs), corefile)
	}

	objs = renderWith(t, "mode: node-local\nnodeLocal: {upstream: {clusterIP: 10.96.0.11}}\n")
	wantField(t, objs, helmNodeLocalSvc, "spec.clusterIP", "10.96.0.11")
	wantField(t, objs, helmNodeLocalDS, "spec.template.spec.enableServiceLinks", "false")
	corefile, _ = field(objs[helmNodeLocalCM], "data.Corefile").(string)
	if !strings.Contains(corefile, "source replica http://10.96.0.11:9155 {\n") || strings.Count(corefile, "forward . 10.96.0.11\n") != 2 {
		t.Errorf("upstream.clusterIP 10.96.0.11: the Corefile does not name it:\n%s", corefile)
	}

	objs = renderWith(t, "mode: node-local\nnodeLocal: {upstream: {name: dns-upstream, selector: {k8s-app: meshdns}}}\n")
	wantField(t, objs, "Service kube-system/dns-upstream", "spec.selector", "{k8s-app: meshdns}")
	corefile, _ = field(objs[helmNodeLocalCM], "data.Corefile").(string)
	if !strings.Contains(corefile, "forward . {$DNS_UPSTREAM_SERVICE_HOST}\n") {
		t.Errorf("upstream.name dns-upstream: the Corefile does not read its variable:\n%s", corefile)
	}

	objs = renderWith(t, "mode: node-local\nnodeLocal: {clusterDNS: 10.43.0.10, upstream: {enabled: false}}\n")
	if _, ok := objs[helmNodeLocalSvc]; ok {
		t.Errorf("upstream.enabled false rendered %s", helmNodeLocalSvc)
	}
	wantField(t, objs, helmNodeLocalDS, "spec.template.spec.enableServiceLinks", "false")
	corefile, _ = field(objs[helmNodeLocalCM], "data.Corefile").(string)
	if !strings.Contains(corefile, "source replica http://10.43.0.10:9155 {\n") || strings.Count(corefile, "forward . 10.43.0.10\n") != 2 {
		t.Errorf("upstream.enabled false: want the stream and forward through clusterDNS:\n%s", corefile)
	}

	objs = renderWith(t, "mode: node-local\nreplication: {tls: {secretName: repl-tls}}\n")
	corefile, _ = field(objs[helmNodeLocalCM], "data.Corefile").(string)
	if want := "source replica https://" + nodeLocalUpstreamVar + ":9155 {\n            token_file /var/run/secrets/meshdns-replication/token\n            tls /var/run/secrets/meshdns-replication-tls/ca.crt\n            tls_servername " + clusterDNSIP + "\n        }\n"; !strings.Contains(corefile, want) {
		t.Errorf("TLS without serverName: the node-local Corefile has no %q:\n%s", want, corefile)
	}
}

// TestHelmValuesNodeLocalNames: the node-local objects of a release named
// meshdns-node-local keep that name; the image follows the image values.
func TestHelmValuesNodeLocalNames(t *testing.T) {
	objs := mustRenderRelease(t, "meshdns-node-local", "--set", "mode=node-local,image.tag=v9.9.9")
	wantField(t, objs, helmNodeLocalDS, "spec.selector.matchLabels", "{app.kubernetes.io/name: meshdns-node-local}")
	wantField(t, objs, helmNodeLocalDS, "spec.template.spec.volumes.0.configMap.name", "meshdns-node-local")
	for _, c := range []string{"initContainers.0", "containers.0"} {
		wantField(t, objs, helmNodeLocalDS, "spec.template.spec."+c+".image", "ghcr.io/meshdns/meshdns:v9.9.9")
	}
	objs = mustRenderRelease(t, "edge", "--set", "mode=node-local")
	if _, ok := objs["DaemonSet kube-system/edge-meshdns-node-local"]; !ok {
		t.Errorf("release edge: no DaemonSet edge-meshdns-node-local in %v", sortedKeys(objs))
	}
}

// TestHelmNodeLocalRendersDeployNodeLocal: `--set mode=node-local` is
// deploy/node-local, object by object.
func TestHelmNodeLocalRendersDeployNodeLocal(t *testing.T) {
	want := manifestObjects(t, "node-local")
	compareObjects(t, "mode node-local vs deploy/node-local", want, mustRender(t, "--set", "mode=node-local"))
}
