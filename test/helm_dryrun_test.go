package test

// What the chart renders with its value families set is valid for a real
// kube-apiserver: a server-side dry run with strict field validation of
// every object (the ServiceMonitor aside: it needs the prometheus-operator's
// CRD, which this API server does not have).

import (
	"os"
	"path/filepath"
	"testing"
)

// helmDryRunValues are the value sets the dry run applies, by name.
var helmDryRunValues = map[string]string{
	"defaults":   "",
	"node-local": "mode: node-local\n",
	"node-local others": `
mode: node-local
nodeLocal: {addresses: [169.254.0.53], clusterDNS: 10.43.0.10, minReadySeconds: null, podLabels: {team: dns}, affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [infra]}]}]}}}}
extraEnv: [{name: GODEBUG, value: madvdontneed=1}]
`,
	"node-local upstream pinned": `
mode: node-local
nodeLocal: {upstream: {name: dns-upstream, clusterIP: 10.96.0.11, selector: {k8s-app: meshdns}}}
replication: {tls: {secretName: repl-tls, clientCertificates: true}}
`,
	"node-local upstream off": "mode: node-local\nnodeLocal: {upstream: {enabled: false}}\n",
	"servers":                 helmServers,
	"scheduling": `
topologySpreadConstraints: [{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]
nodeSelector: {dns: "yes"}
tolerations: [{operator: Exists}]
affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/name: meshdns}}}}]}}
`,
	"others": `
replicaCount: 3
priorityClassName: ""
image: {digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000", pullSecrets: [regcred]}
podDisruptionBudget: {minAvailable: 1, unhealthyPodEvictionPolicy: AlwaysAllow}
serviceAccount: {create: false, name: dns-reader}
service: {clusterIP: "", name: kube-dns, ipFamilyPolicy: SingleStack, labels: {team: dns}}
customLabels: {team: dns}
customAnnotations: {owner: dns-team}
podAnnotations: {a: b}
extraEnv: [{name: GODEBUG, value: madvdontneed=1}]
extraVolumes: [{name: extra, emptyDir: {}}]
extraVolumeMounts: [{name: extra, mountPath: /extra}]
readinessProbe: {enabled: false}
`,
}

func TestHelmValuesDryRun(t *testing.T) {
	k := startKubeAPI(t)
	kubectl := peerTool(t, "kubectl")
	for name, values := range helmDryRunValues {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			vf := filepath.Join(dir, "values.yaml")
			if err := os.WriteFile(vf, []byte(values), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := runHelm(t, "template", "meshdns", chartDir(), "--namespace", "kube-system", "-f", vf)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := parseObjects(out, "helm template")
			if err != nil || len(objs) == 0 {
				t.Fatalf("%d objects: %v", len(objs), err)
			}
			rendered := filepath.Join(dir, "rendered.yaml")
			if err := os.WriteFile(rendered, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			runTool(t, kubectl, "--kubeconfig", k.Kubeconfig, "apply", "--dry-run=server", "--validate=strict", "-f", rendered)
			t.Logf("%d objects valid", len(objs))
		})
	}
}
