package test

// The chart's node-local mode: its addresses, the cluster DNS it follows
// and its names render into every place that names them.

import (
	"strings"
	"testing"
)

const (
	helmNodeLocalDS = "DaemonSet kube-system/meshdns-node-local"
	helmNodeLocalCM = "ConfigMap kube-system/meshdns-node-local"
)

// TestHelmValuesNodeLocal: other addresses and another cluster DNS reach
// the init container, bind, health, ready, metrics, the probes, the
// replication source and forward; nothing of the cluster mode is rendered.
func TestHelmValuesNodeLocal(t *testing.T) {
	objs := renderWith(t, `
mode: node-local
nodeLocal:
  addresses: [169.254.0.53, 10.43.0.10]
  clusterDNS: 10.43.0.10
  replicationPort: 9156
  stateHostPath: /srv/meshdns
`)
	if keys := sortedKeys(objs); strings.Join(keys, ",") != helmNodeLocalCM+","+helmNodeLocalDS {
		t.Errorf("mode node-local rendered %v, want only its ConfigMap and DaemonSet", keys)
	}
	corefile, _ := field(objs[helmNodeLocalCM], "data.Corefile").(string)
	for _, want := range []string{"bind 169.254.0.53 10.43.0.10\n", "health 169.254.0.53:8080 {", "ready 169.254.0.53:8181\n",
		"prometheus 169.254.0.53:9253\n", "source replica http://10.43.0.10:9156 {\n", "forward . 10.43.0.10\n"} {
		if !strings.Contains(corefile, want) {
			t.Errorf("the node-local Corefile has no %q:\n%s", want, corefile)
		}
	}
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
