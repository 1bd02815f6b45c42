package test

// The Helm chart charts/meshdns (issue 23): helm lint, its default values
// rendering deploy/kubernetes object by object, and each family of values
// rendering what it says. The real helm, built from its Go module
// (build/peer-tools.sh helm), renders the chart.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The shipped objects the chart renders, by key.
const (
	helmDeployment = "Deployment kube-system/meshdns"
	helmService    = "Service kube-system/meshdns"
	helmConfigMap  = "ConfigMap kube-system/meshdns"
	helmPDB        = "PodDisruptionBudget kube-system/meshdns"
	helmSA         = "ServiceAccount kube-system/meshdns"
	helmMonitor    = "ServiceMonitor kube-system/meshdns"
)

// clusterManifestsOutsideChart are the files of deploy/kubernetes the chart
// does not render: pod-dnsconfig.yaml is an example of a client pod in the
// default namespace, not part of the cluster DNS.
var clusterManifestsOutsideChart = []string{"pod-dnsconfig.yaml"}

func TestHelmLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "prometheus.monitor.enabled=true"}, {"--set", "mode=node-local"}} {
		out, err := runHelm(t, append([]string{"lint", "--strict", chartDir()}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", args, out)
		}
	}
}

// TestHelmChartVersion: the chart's appVersion is the release of VERSION,
// and the image tag defaults to it.
func TestHelmChartVersion(t *testing.T) {
	v, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	release := strings.TrimSpace(string(v))
	if chart.AppVersion != release {
		t.Errorf("Chart.yaml appVersion %q, VERSION %q", chart.AppVersion, release)
	}
	wantField(t, mustRender(t), helmDeployment, "spec.template.spec.containers.0.image", "ghcr.io/meshdns/meshdns:v"+release)
}

// TestHelmDefaultsRenderDeployKubernetes: `helm template meshdns
// charts/meshdns -n kube-system` is deploy/kubernetes, object by object.
func TestHelmDefaultsRenderDeployKubernetes(t *testing.T) {
	want := manifestObjects(t, "kubernetes", clusterManifestsOutsideChart...)
	compareObjects(t, "default values vs deploy/kubernetes", want, mustRender(t))
}

// TestHelmInvalidValues: values that cannot render say why.
func TestHelmInvalidValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"mode=cluster-dns", `mode must be cluster or node-local, not "cluster-dns"`},
		{"servers=null", "the cluster mode needs at least one server block"},
		{"mode=node-local,nodeLocal.servers=null", "the node-local mode needs at least one server block"},
		{"mode=node-local,nodeLocal.addresses=null", "the node-local mode needs at least one address"},
		{"mode=node-local,nodeLocal.upstream.clusterIP=10.96.0.10", "nodeLocal.upstream.clusterIP 10.96.0.10 is one of nodeLocal.addresses"},
	} {
		_, err := renderChart(t, "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: error %v, want one saying %q", tc.set, err, tc.want)
		}
	}
}

// TestHelmValuesNames: another release name and namespace rename every
// object, its references and the Corefile's publish alike; nameOverride
// renames the name label (the selector).
func TestHelmValuesNames(t *testing.T) {
	objs, err := renderRelease(t, "edge", "--namespace", "dns-system", "--set", "nameOverride=edns")
	if err != nil {
		t.Fatal(err)
	}
	for k := range objs {
		clusterWide := strings.HasPrefix(k, "Cluster") || strings.HasPrefix(k, "ValidatingAdmissionPolicy")
		if !strings.Contains(k, "dns-system/edge-edns") && !(clusterWide && strings.Contains(k, " edge-edns")) {
			t.Errorf("%s is not edge-edns in dns-system", k)
		}
	}
	// the admission policy pins the renamed ServiceAccount's writes to the
	// renamed Service's slices and Leases
	vap := "ValidatingAdmissionPolicy edge-edns-publish"
	wantField(t, objs, vap, "spec.matchConditions.0.expression", "request.userInfo.username == 'system:serviceaccount:dns-system:edge-edns'")
	wantField(t, objs, "ValidatingAdmissionPolicyBinding edge-edns-publish", "spec.policyName", "edge-edns-publish")
	if v := jsonOf(field(objs[vap], "spec")); !strings.Contains(v, "== 'edge-edns'") || strings.Contains(v, "'meshdns") {
		t.Errorf("the admission policy does not name the renamed Service alone:\n%s", v)
	}
	dep := "Deployment dns-system/edge-edns"
	wantField(t, objs, dep, "spec.selector.matchLabels", "{app.kubernetes.io/name: edns}")
	wantField(t, objs, dep, "spec.template.metadata.labels", "{app.kubernetes.io/name: edns, k8s-app: kube-dns}")
	wantField(t, objs, dep, "spec.template.spec.serviceAccountName", "edge-edns")
	wantField(t, objs, dep, "spec.template.spec.volumes.0.configMap.name", "edge-edns")
	wantField(t, objs, "ClusterRoleBinding edge-edns", "subjects", "[{kind: ServiceAccount, name: edge-edns, namespace: dns-system}]")
	wantField(t, objs, "RoleBinding dns-system/edge-edns-publish", "roleRef.name", "edge-edns-publish")
	corefile, _ := field(objs["ConfigMap dns-system/edge-edns"], "data.Corefile").(string)
	if !strings.Contains(corefile, "publish edge-edns app.kubernetes.io/name=edns\n") {
		t.Errorf("the Corefile does not publish the renamed Service:\n%s", corefile)
	}
	// a release name that holds the chart's name is the full name
	if _, ok := mustRenderRelease(t, "meshdns-dr")["Deployment kube-system/meshdns-dr"]; !ok {
		t.Error("release meshdns-dr: no Deployment meshdns-dr")
	}
}

// TestHelmValuesReplicasResourcesPriority: replicaCount, resources and
// priorityClassName.
func TestHelmValuesReplicasResourcesPriority(t *testing.T) {
	objs := renderWith(t, `
replicaCount: 3
resources: {requests: {cpu: 250m, memory: 128Mi}, limits: {memory: 512Mi}}
priorityClassName: dns-critical
`)
	wantField(t, objs, helmDeployment, "spec.replicas", "3")
	wantField(t, objs, helmDeployment, "spec.template.spec.containers.0.resources",
		"{requests: {cpu: 250m, memory: 128Mi}, limits: {memory: 512Mi}}")
	wantField(t, objs, helmDeployment, "spec.template.spec.priorityClassName", "dns-critical")
	objs = mustRender(t, "--set", "priorityClassName=")
	wantField(t, objs, helmDeployment, "spec.template.spec.priorityClassName", "null")
}

// TestHelmValuesImage: repository, tag, digest and pull policy.
func TestHelmValuesImage(t *testing.T) {
	img := "spec.template.spec.containers.0."
	objs := mustRender(t, "--set", "image.repository=registry.example.com/dns/meshdns,image.tag=v9.9.9,image.pullPolicy=Always")
	wantField(t, objs, helmDeployment, img+"image", "registry.example.com/dns/meshdns:v9.9.9")
	wantField(t, objs, helmDeployment, img+"imagePullPolicy", "Always")
	digest := "sha256:" + strings.Repeat("ab", 32)
	objs = mustRender(t, "--set", "image.digest="+digest+",image.pullSecrets={regcred}")
	wantField(t, objs, helmDeployment, img+"image", "ghcr.io/meshdns/meshdns@"+digest)
	wantField(t, objs, helmDeployment, "spec.template.spec.imagePullSecrets", "[{name: regcred}]")
}

// TestHelmValuesSecurityContext: the pod's and the container's.
func TestHelmValuesSecurityContext(t *testing.T) {
	objs := renderWith(t, `
podSecurityContext:
  runAsUser: 1000
  runAsGroup: 1000
  sysctls: null
  fsGroup: 1000
securityContext:
  readOnlyRootFilesystem: false
`)
	wantField(t, objs, helmDeployment, "spec.template.spec.securityContext",
		"{runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, seccompProfile: {type: RuntimeDefault}}")
	wantField(t, objs, helmDeployment, "spec.template.spec.containers.0.securityContext",
		`{allowPrivilegeEscalation: false, readOnlyRootFilesystem: false, capabilities: {drop: ["ALL"]}}`)
}

// TestHelmValuesServiceAccount: an existing ServiceAccount instead of the
// chart's, bound by the chart's roles; and no RBAC at all.
func TestHelmValuesServiceAccount(t *testing.T) {
	objs := mustRender(t, "--set", "serviceAccount.create=false,serviceAccount.name=dns-reader")
	if _, ok := objs[helmSA]; ok {
		t.Errorf("%s rendered with serviceAccount.create=false", helmSA)
	}
	wantField(t, objs, helmDeployment, "spec.template.spec.serviceAccountName", "dns-reader")
	wantField(t, objs, "ClusterRoleBinding meshdns", "subjects.0.name", "dns-reader")
	wantField(t, objs, "RoleBinding kube-system/meshdns-publish", "subjects.0.name", "dns-reader")
	objs = mustRender(t, "--set", "rbac.create=false")
	for k := range objs {
		if strings.Contains(k, "Role") {
			t.Errorf("%s rendered with rbac.create=false", k)
		}
	}
}

// TestHelmValuesService: the cluster IP, and none (the API server picks).
func TestHelmValuesService(t *testing.T) {
	wantField(t, mustRender(t, "--set", "service.clusterIP=10.43.0.10"), helmService, "spec.clusterIP", "10.43.0.10")
	objs := mustRender(t, "--set", "service.clusterIP=,service.name=kube-dns")
	svc := "Service kube-system/kube-dns"
	wantField(t, objs, svc, "spec.clusterIP", "null")
	corefile, _ := field(objs[helmConfigMap], "data.Corefile").(string)
	if !strings.Contains(corefile, "publish kube-dns app.kubernetes.io/name=meshdns\n") {
		t.Errorf("the Corefile does not publish the Service kube-dns:\n%s", corefile)
	}
}

// TestHelmValuesPodDisruptionBudget: minAvailable in maxUnavailable's
// place, and none.
func TestHelmValuesPodDisruptionBudget(t *testing.T) {
	objs := mustRender(t, "--set", "podDisruptionBudget.minAvailable=1")
	wantField(t, objs, helmPDB, "spec", "{minAvailable: 1, selector: {matchLabels: {app.kubernetes.io/name: meshdns}}}")
	objs = mustRender(t, "--set", "podDisruptionBudget.enabled=false")
	if _, ok := objs[helmPDB]; ok {
		t.Errorf("%s rendered with podDisruptionBudget.enabled=false", helmPDB)
	}
}

// TestHelmValuesScheduling: topologySpreadConstraints (a label selector of
// the pods' own labels unless given), nodeSelector, tolerations, affinity.
func TestHelmValuesScheduling(t *testing.T) {
	objs := renderWith(t, `
topologySpreadConstraints:
- {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
- {maxSkew: 1, topologyKey: rack, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {tier: dns}}}
nodeSelector: {dns: "yes"}
tolerations: [{operator: Exists}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [infra]}]}]}}}
`)
	spec := "spec.template.spec."
	wantField(t, objs, helmDeployment, spec+"topologySpreadConstraints", `
- {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app.kubernetes.io/name: meshdns}}}
- {maxSkew: 1, topologyKey: rack, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {tier: dns}}}`)
	wantField(t, objs, helmDeployment, spec+"nodeSelector", `{kubernetes.io/os: linux, dns: "yes"}`)
	wantField(t, objs, helmDeployment, spec+"tolerations", "[{operator: Exists}]")
	wantField(t, objs, helmDeployment, spec+"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0.matchExpressions.0.key", "pool")
	objs = renderWith(t, "topologySpreadConstraints: []\nnodeSelector: null\ntolerations: []\n")
	for _, f := range []string{"topologySpreadConstraints", "nodeSelector", "tolerations", "affinity"} {
		wantField(t, objs, helmDeployment, spec+f, "null")
	}
}

// TestHelmValuesServiceMonitor: off by default (the default render is
// deploy/kubernetes); on, it scrapes the Service's metrics port.
func TestHelmValuesServiceMonitor(t *testing.T) {
	objs := mustRender(t, "--set", "prometheus.monitor.enabled=true,prometheus.monitor.interval=15s,prometheus.monitor.additionalLabels.release=prom")
	wantField(t, objs, helmMonitor, "apiVersion", "monitoring.coreos.com/v1")
	wantField(t, objs, helmMonitor, "metadata.labels", "{app.kubernetes.io/name: meshdns, release: prom}")
	wantField(t, objs, helmMonitor, "spec", `
namespaceSelector: {matchNames: [kube-system]}
selector: {matchLabels: {app.kubernetes.io/name: meshdns}}
endpoints: [{port: metrics, path: /metrics, interval: 15s}]`)
	if _, ok := mustRender(t)[helmMonitor]; ok {
		t.Errorf("%s rendered by default", helmMonitor)
	}
	objs = mustRender(t, "--set", "prometheus.monitor.enabled=true,prometheus.monitor.namespace=monitoring")
	wantField(t, objs, "ServiceMonitor monitoring/meshdns", "spec.namespaceSelector.matchNames", "[kube-system]")
}

// TestHelmReadmeValues: the values table of charts/meshdns/README.md
// covers every value of values.yaml (a row for it or for a map holding it)
// and names no value that is not there.
func TestHelmReadmeValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Values\n")
	if !ok {
		t.Fatal(`README.md has no "## Values" section`)
	}
	rows := map[string]bool{}
	for _, l := range strings.Split(table, "\n") {
		if cells := strings.Split(l, "|"); len(cells) > 2 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = true
		}
	}
	for row := range rows {
		if _, ok := lookupValue(values, row); !ok {
			t.Errorf("README.md documents %s, which values.yaml does not have", row)
		}
	}
	for _, p := range valuePaths("", values) {
		documented := false
		for q := p; q != "" && !documented; q = parentPath(q) {
			documented = rows[q]
		}
		if !documented {
			t.Errorf("values.yaml has %s, which README.md's table does not document", p)
		}
	}
}

// valuePaths lists the dotted paths of v's leaves (lists and empty maps are
// leaves).
func valuePaths(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var out []string
	for k, child := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, valuePaths(p, child)...)
	}
	return out
}

func parentPath(p string) string {
	if i := strings.LastIndex(p, "."); i >= 0 {
		return p[:i]
	}
	return ""
}

// lookupValue finds a dotted path in values (a key that is present with a
// null value counts).
func lookupValue(values map[string]any, path string) (any, bool) {
	var cur any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// TestHelmValuesMonitoring: off by default; on, the PrometheusRule holds
// deploy/monitoring's rules with MeshdnsDown's job set to the Service's
// name (or prometheus.rules.job), and the dashboard ConfigMap holds the
// generated dashboard byte for byte.
func TestHelmValuesMonitoring(t *testing.T) {
	const rule, board = "PrometheusRule kube-system/meshdns", "ConfigMap kube-system/meshdns-dashboard"
	def := mustRender(t)
	for _, k := range []string{rule, board} {
		if _, ok := def[k]; ok {
			t.Errorf("%s rendered by default", k)
		}
	}
	file := func(name string) string {
		b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "monitoring", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for job, values := range map[string]string{
		"meshdns":  "prometheus.rules.enabled=true,prometheus.dashboard.enabled=true",
		"kube-dns": "prometheus.rules.enabled=true,prometheus.rules.job=kube-dns,prometheus.dashboard.enabled=true",
	} {
		objs := mustRender(t, "--set", values)
		var want map[string]any
		if err := yaml.Unmarshal([]byte(strings.ReplaceAll(file("meshdns-rules.yaml"), `up{job="meshdns"}`, `up{job="`+job+`"}`)), &want); err != nil {
			t.Fatal(err)
		}
		if got := jsonOf(field(objs[rule], "spec.groups")); got != jsonOf(want["groups"]) {
			t.Errorf("job %s: the PrometheusRule's groups are not deploy/monitoring/meshdns-rules.yaml's:\n%s", job, lineDiff(jsonOf(want["groups"]), got))
		}
		data, _ := field(objs[board], "data").(map[string]any)
		if got := data["meshdns-dashboard.json"]; got != strings.TrimSuffix(file("meshdns-dashboard.json"), "\n") {
			t.Errorf("the dashboard ConfigMap does not hold deploy/monitoring/meshdns-dashboard.json")
		}
		wantField(t, objs, board, "metadata.labels.grafana_dashboard", `"1"`)
	}
}

// TestHelmValuesClusterSize: the memory limits and the state volume follow
// clusterSize.endpoints (at the default 50,000 the shipped limits stand: the
// default render is deploy/kubernetes); a limit set above the floor stays.
func TestHelmValuesClusterSize(t *testing.T) {
	const c = "spec.template.spec.containers.0."
	objs := mustRender(t, "--set", "clusterSize.endpoints=500000")
	wantField(t, objs, helmDeployment, c+"resources.limits.memory", "1284Mi")
	wantField(t, objs, helmDeployment, "spec.template.spec.volumes.1.emptyDir.sizeLimit", "144Mi")
	objs = mustRender(t, "--set", "clusterSize.endpoints=500000,resources.limits.memory=2Gi,stateVolume.sizeLimit=1Gi")
	wantField(t, objs, helmDeployment, c+"resources.limits.memory", "2Gi")
	wantField(t, objs, helmDeployment, "spec.template.spec.volumes.1.emptyDir.sizeLimit", "1Gi")
	objs = mustRender(t, "--set", "mode=node-local,clusterSize.endpoints=500000")
	wantField(t, objs, helmNodeLocalDS, c+"resources.limits.memory", "796Mi")
}
