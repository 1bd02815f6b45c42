package test

// Pods of the node tests: client pods from the client image (static
// busybox, glibc getent, test/nodeclient), created through the API, and the
// questions they answer through `kubectl exec … /nodeclient resolve`.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// resolveResult is nodeclient's answer to one question (test/nodeclient).
type resolveResult struct {
	Resolver string   `json:"resolver"`
	Type     string   `json:"type"`
	Name     string   `json:"name"`
	Answers  []string `json:"answers"`
	FQDN     string   `json:"fqdn"`
	Error    string   `json:"error"`
	Millis   float64  `json:"ms"`
}

// clientPod is a pod of the client image that sleeps (for an hour at a
// time; the kubelet restarts it) with the default dnsPolicy.
func clientPod(name string, labels map[string]string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "client", Image: clientImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/busybox", "sleep", "3600"},
			}},
		},
	}
}

// ensureNamespace creates ns (if needed) and waits for its default
// ServiceAccount, without which no pod is admitted.
func (c *nodeCluster) ensureNamespace(ctx context.Context, ns string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return waitFor(time.Minute, nil, "ServiceAccount "+ns+"/default", func() error {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// runPods creates the pods in ns and waits until each is Ready; it returns
// them as the API has them then (with their IPs).
func (c *nodeCluster) runPods(ctx context.Context, ns string, pods ...*corev1.Pod) (map[string]*corev1.Pod, error) {
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating pod %s/%s: %w", ns, p.Name, err)
		}
	}
	out := map[string]*corev1.Pod{}
	for _, p := range pods {
		name := p.Name
		err := waitFor(2*time.Minute, nil, "Ready pod "+ns+"/"+name, func() error {
			got, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && got.Status.PodIP != "" {
					out[name] = got
					return nil
				}
			}
			return fmt.Errorf("%s %v %v", got.Status.Phase, podConditions(*got), got.Status.ContainerStatuses)
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// exec runs argv in the pod's first container (kubectl exec).
func (c *nodeCluster) exec(ctx context.Context, ns, pod string, argv ...string) (string, error) {
	return c.kubectl(ctx, append([]string{"exec", "-n", ns, pod, "--"}, argv...)...)
}

// resolveIn asks the questions ("RESOLVER:TYPE:NAME") from inside the pod.
func (c *nodeCluster) resolveIn(t *testing.T, ns, pod string, questions ...string) []resolveResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.exec(ctx, ns, pod, append([]string{"/nodeclient", "resolve"}, questions...)...)
	if err != nil {
		t.Fatalf("resolving in %s/%s: %v\n%s", ns, pod, err, out)
	}
	var res []resolveResult
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r resolveResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("nodeclient printed %q: %v", l, err)
		}
		res = append(res, r)
	}
	if len(res) != len(questions) {
		t.Fatalf("asked %d questions, got %d answers:\n%s", len(questions), len(res), out)
	}
	return res
}

// meshdnsPIDs returns the meshdns processes of the node's containers (in
// its cgroups, started as the image's /meshdns).
func meshdnsPIDs() []int {
	var out []int
	for _, pid := range cgroupPIDs() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && strings.HasPrefix(string(b), "/meshdns\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// connectedTo reports whether pid has an established TCP connection to
// ip:port as its own socket sees it (in its network namespace: a Service
// address stays the Service address for the client).
func connectedTo(pid int, ip string, port int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/tcp")
	if err != nil {
		return false
	}
	v4 := net.ParseIP(ip).To4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", v4[3], v4[2], v4[1], v4[0], port)
	for _, l := range strings.Split(string(b), "\n") {
		// "sl local_address rem_address st …", st 01 = ESTABLISHED
		if f := strings.Fields(l); len(f) > 3 && f[2] == want && f[3] == "01" {
			return true
		}
	}
	return false
}
