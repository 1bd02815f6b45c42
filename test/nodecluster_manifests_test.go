package test

// deploy/kubernetes applied to the one-node cluster as it is: every file,
// every document, with only the container images substituted (the meshdns
// image for meshdns, the client image for any other) and imagePullPolicy
// Never, since nothing can be pulled here.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// shippedManifests reads deploy/kubernetes/*.yaml, substitutes the images,
// writes each document as JSON under dir and returns what it substituted
// ("kind/name container: old -> new").
func shippedManifests(dir string) ([]string, error) { return deployManifests("kubernetes", dir) }

// deployManifests is shippedManifests for deploy/<sub> (kubernetes,
// node-local).
func deployManifests(sub, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", sub, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no manifests in deploy/%s: %v", sub, err)
	}
	sort.Strings(files)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var subs []string
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range splitYAMLDocs(string(b)) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if obj == nil {
				continue
			}
			subs = append(subs, substituteImages(obj, objectName(obj))...)
			out, err := json.MarshalIndent(obj, "", "  ")
			if err != nil {
				return nil, err
			}
			n++
			name := fmt.Sprintf("%02d-%s.json", n, strings.TrimSuffix(filepath.Base(f), ".yaml"))
			if err := os.WriteFile(filepath.Join(dir, name), out, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return subs, nil
}

// splitYAMLDocs splits a multi-document YAML file at its "---" lines.
func splitYAMLDocs(s string) []string {
	var docs []string
	var cur strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimRight(l, " ") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(l + "\n")
	}
	return append(docs, cur.String())
}

func objectName(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	return fmt.Sprintf("%v/%v", obj["kind"], md["name"])
}

// substituteImages walks obj and rewrites the image of every container and
// init container it finds.
func substituteImages(v any, where string) []string {
	var subs []string
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if k == "containers" || k == "initContainers" {
				list, _ := child.([]any)
				for _, item := range list {
					ctr, ok := item.(map[string]any)
					if !ok {
						continue
					}
					old, _ := ctr["image"].(string)
					img := clientImage
					if strings.Contains(old, "meshdns") {
						img = meshdnsImage
					}
					ctr["image"], ctr["imagePullPolicy"] = img, "Never"
					subs = append(subs, fmt.Sprintf("%s %v: %s -> %s", where, ctr["name"], old, img))
				}
				continue
			}
			subs = append(subs, substituteImages(child, where)...)
		}
	case []any:
		for _, child := range x {
			subs = append(subs, substituteImages(child, where)...)
		}
	}
	return subs
}

// deployDNS applies the shipped manifests and waits until the meshdns
// Deployment has every replica available.
func (c *nodeCluster) deployDNS() error {
	dir := filepath.Join(c.paths.state, "manifests")
	subs, err := shippedManifests(dir)
	if err != nil {
		return err
	}
	meshdnsSubs := 0
	for _, s := range subs {
		if strings.HasSuffix(s, meshdnsImage) {
			meshdnsSubs++
		}
	}
	if meshdnsSubs == 0 {
		return fmt.Errorf("deploy/kubernetes has no meshdns container (substituted: %v)", subs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := waitFor(time.Minute, nil, "default ServiceAccounts", func() error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if out, err := c.kubectl(ctx, "apply", "-f", dir); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	if err := c.waitDeployment(ctx, "kube-system", "meshdns", 2*time.Minute); err != nil {
		return fmt.Errorf("%w\n%s", err, c.meshdnsLogs(20))
	}
	return nil
}

// meshdnsLogs returns the last n lines of every meshdns container's log.
func (c *nodeCluster) meshdnsLogs(n int) string {
	logs, _ := filepath.Glob(filepath.Join(c.paths.state, "pod-logs", "kube-system_meshdns-*", "meshdns", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "%s:\n%s\n", l, tail(string(data), n))
	}
	return b.String()
}

// waitDeployment waits until the Deployment's rollout is complete: every
// replica updated, ready and available, no old one left.
func (c *nodeCluster) waitDeployment(ctx context.Context, ns, name string, d time.Duration) error {
	return waitFor(d, nil, "available Deployment "+ns+"/"+name, func() error {
		dep, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := int32(1)
		if dep.Spec.Replicas != nil {
			want = *dep.Spec.Replicas
		}
		st := dep.Status
		if st.ObservedGeneration < dep.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want ||
			st.AvailableReplicas != want || st.Replicas != want {
			return fmt.Errorf("%d wanted: %d updated, %d ready, %d available, %d in all%s", want,
				st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, st.Replicas, c.podProblems(ctx, ns, dep))
		}
		return nil
	})
}

// podProblems describes the waiting containers of dep's pods (image,
// sandbox or crash trouble), for the error of a wait.
func (c *nodeCluster) podProblems(ctx context.Context, ns string, dep *appsv1.Deployment) string {
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).String()
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return ""
	}
	var out []string
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				out = append(out, fmt.Sprintf("%s: %s %s", p.Name, w.Reason, w.Message))
			}
		}
		if len(p.Status.ContainerStatuses) == 0 {
			out = append(out, fmt.Sprintf("%s: %s %v", p.Name, p.Status.Phase, podConditions(p)))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

func podConditions(p corev1.Pod) []string {
	var out []string
	for _, c := range p.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
	}
	return out
}
