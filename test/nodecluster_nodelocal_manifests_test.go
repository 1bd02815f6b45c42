package test

// What deploy/node-local promises (its README and docs/node-local.md), read
// from the manifests as shipped: the pieces fail-open and a rollout that
// loses nothing rest on, and the agreement between the DaemonSet and its
// Corefile (addresses, probes, snapshot path, lameduck). TestNodeLocal and
// the node-local drills show that the pieces work on a node.

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	nodeLocalIP   = "169.254.20.10"
	nodeLocalName = "meshdns-node-local"          // the DaemonSet, its ConfigMap and its pods' app label
	nodeLocalDir  = "/var/lib/meshdns-node-local" // the DaemonSet's hostPath (the snapshot)
	// the node-local's upstream Service, in front of the cluster DNS pods,
	// and the Service link variable the kubelet sets to its ClusterIP
	nodeLocalUpstream    = "meshdns-upstream"
	nodeLocalUpstreamVar = "{$MESHDNS_UPSTREAM_SERVICE_HOST}"
)

// readNodeLocal decodes deploy/node-local's DaemonSet and ConfigMap
// strictly (an unknown field fails).
func readNodeLocal(t *testing.T) (*appsv1.DaemonSet, string) {
	t.Helper()
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	for name, into := range map[string]any{"daemonset.yaml": &ds, "configmap.yaml": &cm} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "node-local", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("deploy/node-local/%s: %v", name, err)
		}
	}
	if cm.Name != ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name {
		t.Fatalf("the DaemonSet mounts ConfigMap %q, the ConfigMap is %q", ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name, cm.Name)
	}
	return &ds, cm.Data["Corefile"]
}

func TestNodeLocalManifests(t *testing.T) {
	ds, corefile := readNodeLocal(t)
	spec := ds.Spec.Template.Spec
	t.Run("node-critical on every node, nothing of the API", func(t *testing.T) {
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSDefault || spec.PriorityClassName != "system-node-critical" {
			t.Errorf("hostNetwork %v, dnsPolicy %q, priorityClassName %q", spec.HostNetwork, spec.DNSPolicy, spec.PriorityClassName)
		}
		if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
			t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.ServiceAccountName != "" {
			t.Errorf("automountServiceAccountToken %v, serviceAccountName %q: the node-local reads nothing of the API", spec.AutomountServiceAccountToken, spec.ServiceAccountName)
		}
	})
	t.Run("rollout: surge, no hostPorts", func(t *testing.T) {
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil ||
			ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("update strategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy)
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if len(c.Ports) > 0 {
				t.Errorf("container %s declares ports %v: on the host network they act as hostPorts and block the surge pod", c.Name, c.Ports)
			}
		}
		lameduck := regexp.MustCompile(`lameduck (\d+)s`).FindStringSubmatch(corefile)
		if lameduck == nil || spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 3*int64(atoi(t, lameduck[1])) {
			t.Errorf("lameduck %v, terminationGracePeriodSeconds %v: want a lameduck well inside the grace period", lameduck, spec.TerminationGracePeriodSeconds)
		}
	})
	t.Run("addresses: setup, bind, probes, forward, replica agree", func(t *testing.T) {
		checkNodeLocalAddresses(t, ds, corefile)
	})
	t.Run("upstream: a Service of its own in front of the cluster DNS pods", func(t *testing.T) {
		checkNodeLocalUpstream(t, ds, corefile)
	})
	t.Run("capabilities: NET_ADMIN to set up, NET_BIND_SERVICE to serve", func(t *testing.T) {
		for _, tc := range []struct {
			c   corev1.Container
			cap corev1.Capability
		}{{spec.InitContainers[0], "NET_ADMIN"}, {spec.Containers[0], "NET_BIND_SERVICE"}} {
			sc := tc.c.SecurityContext
			if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) != 1 || sc.Capabilities.Add[0] != tc.cap ||
				len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("container %s: security context %+v, want every capability dropped but %s, no escalation, read-only root", tc.c.Name, sc, tc.cap)
			}
		}
	})
	t.Run("snapshot on the hostPath", func(t *testing.T) {
		m := regexp.MustCompile(`snapshot (\S+)`).FindStringSubmatch(corefile)
		var host string
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				host = v.HostPath.Path
			}
		}
		var mounted string
		for _, vm := range spec.Containers[0].VolumeMounts {
			if vm.Name == "state" {
				mounted = vm.MountPath
			}
		}
		if m == nil || host != nodeLocalDir || mounted == "" || filepath.Dir(m[1]) != mounted {
			t.Errorf("snapshot %v, hostPath %q mounted at %q: want the snapshot in the hostPath %s", m, host, mounted, nodeLocalDir)
		}
	})
}

// checkNodeLocalAddresses checks that the init container sets up exactly
// the addresses the Corefile binds, that health, ready and metrics listen
// on the node-local address where the probes ask, and that the stream and
// the forwarding go to the upstream Service's address.
func checkNodeLocalAddresses(t *testing.T, ds *appsv1.DaemonSet, corefile string) {
	spec := ds.Spec.Template.Spec
	args := strings.Join(spec.InitContainers[0].Args, " ")
	want := "-node-local-setup " + nodeLocalIP + "," + clusterDNSIP
	if args != want {
		t.Errorf("init container args %q, want %q", args, want)
	}
	for _, line := range []string{"bind " + nodeLocalIP + " " + clusterDNSIP, "source replica http://" + nodeLocalUpstreamVar + ":9155",
		"forward . " + nodeLocalUpstreamVar, "health " + nodeLocalIP + ":8080 {", "ready " + nodeLocalIP + ":8181", "prometheus " + nodeLocalIP + ":9253"} {
		if !strings.Contains(corefile, line) {
			t.Errorf("the Corefile has no %q", line)
		}
	}
	blocks := regexp.MustCompile(`(?m)^\S.*\{\s*$`).FindAllString(corefile, -1)
	binds := regexp.MustCompile(`(?m)^\s+bind (.*)$`).FindAllStringSubmatch(corefile, -1)
	if len(binds) != len(blocks) {
		t.Errorf("%d server blocks, %d bind lines: every block must bind the two addresses (a wildcard listener is not bypassed)", len(blocks), len(binds))
	}
	for _, b := range binds {
		if b[1] != nodeLocalIP+" "+clusterDNSIP {
			t.Errorf("bind %s, want bind %s %s", b[1], nodeLocalIP, clusterDNSIP)
		}
	}
	c := spec.Containers[0]
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != nodeLocalIP {
			t.Errorf("%s probe %+v, want an HTTP probe of %s", name, p, nodeLocalIP)
		}
	}
	if c.ReadinessProbe.HTTPGet.Port.IntValue() != 8181 || c.LivenessProbe.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("probes on ports %v and %v, want ready 8181 and health 8080", c.ReadinessProbe.HTTPGet.Port, c.LivenessProbe.HTTPGet.Port)
	}
}

// readNodeLocalUpstream decodes deploy/node-local's upstream Service
// strictly.
func readNodeLocalUpstream(t *testing.T) *corev1.Service {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "node-local", "cluster-dns-upstream.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := yaml.UnmarshalStrict(b, &svc); err != nil {
		t.Fatalf("deploy/node-local/cluster-dns-upstream.yaml: %v", err)
	}
	return &svc
}

// checkNodeLocalUpstream checks the node-local's upstream: a Service that
// selects exactly the cluster DNS Deployment's pods (deploy/kubernetes) on
// the DNS ports and the stream's, applied before the DaemonSet (its file
// sorts first: the kubelet sets a Service link only for a Service that
// exists when the container starts), with service links on, and a
// Corefile that forwards to and follows the stream from that Service's
// variable and never from the cluster DNS address on its own lo.
func checkNodeLocalUpstream(t *testing.T, ds *appsv1.DaemonSet, corefile string) {
	svc := readNodeLocalUpstream(t)
	if svc.Name != nodeLocalUpstream || svc.Namespace != ds.Namespace {
		t.Errorf("upstream Service %s/%s, want %s/%s", svc.Namespace, svc.Name, ds.Namespace, nodeLocalUpstream)
	}
	wantVar := "{$" + strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_")) + "_SERVICE_HOST}"
	if wantVar != nodeLocalUpstreamVar {
		t.Errorf("the kubelet names the Service's address %s, the test expects %s", wantVar, nodeLocalUpstreamVar)
	}
	var dep appsv1.Deployment
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &dep); err != nil {
		t.Fatalf("deploy/kubernetes/deployment.yaml: %v", err)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
		t.Errorf("upstream selector %v, want the cluster DNS Deployment's %v", svc.Spec.Selector, dep.Spec.Selector.MatchLabels)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("upstream selector %s=%s: the cluster DNS pods have %s=%q", k, v, k, dep.Spec.Template.Labels[k])
		}
	}
	if svc.Spec.Selector["app.kubernetes.io/name"] == ds.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("upstream selector %v selects the node-local pods", svc.Spec.Selector)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s %d/%s->%s", p.Name, p.Port, p.Protocol, p.TargetPort.String()))
	}
	if got, want := strings.Join(ports, ", "), "dns 53/UDP->53, dns-tcp 53/TCP->53, replication 9155/TCP->9155"; got != want {
		t.Errorf("upstream ports %s, want %s", got, want)
	}
	if svc.Spec.ClusterIP != "" || svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("upstream clusterIP %q, type %q: want a ClusterIP the API server picks", svc.Spec.ClusterIP, svc.Spec.Type)
	}
	if l := ds.Spec.Template.Spec.EnableServiceLinks; l == nil || !*l {
		t.Errorf("enableServiceLinks not true: the kubelet sets %s only with service links", wantVar)
	}
	// kubectl apply -f deploy/node-local/, and the node tests
	// (deployManifests), apply the files in this order
	files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "node-local", "*.yaml"))
	sort.Strings(files)
	var order []string
	for _, f := range files {
		order = append(order, filepath.Base(f))
	}
	if i, j := slices.Index(order, "cluster-dns-upstream.yaml"), slices.Index(order, "daemonset.yaml"); i < 0 || j < 0 || i > j {
		t.Errorf("deploy/node-local applies %v: want the upstream Service's file before the DaemonSet's", order)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*(source replica|forward \.) (\S+)`).FindAllStringSubmatch(corefile, -1) {
		if !strings.Contains(m[2], wantVar) || strings.Contains(m[2], clusterDNSIP) {
			t.Errorf("%s %s: want the upstream Service's address %s, not the cluster DNS address %s on the node's lo", m[1], m[2], wantVar, clusterDNSIP)
		}
	}
	if n := strings.Count(corefile, "forward . "+wantVar); n != 2 {
		t.Errorf("%d forward lines to %s, want 2 (both server blocks)", n, wantVar)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("%q is not a number", s)
		}
		n = n*10 + int(r-'0')
	}
	return n
}
