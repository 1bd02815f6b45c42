package test

// Drills of issue 25 item 4 (a rollout restart, a deleted replica, a
// ConfigMap change picked up by reload) and the probes the outage drills
// share: a new Service's first answers, and a meshdns container's restart
// timed from its process start to its first answer.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// rolloutDrill runs change under load: 10 s before, the change until the
// Deployment is complete again ("during"), and 30 s after.
func rolloutDrill(t *testing.T, drill string, change func(context.Context, *nodeCluster) error) {
	c, pods := drillCluster(t)
	load := startDrillLoad(t, c, drill, drillNames(pods), 10*time.Minute)
	time.Sleep(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	if err := change(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.waitDeployment(ctx, "kube-system", "meshdns", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	note(t, c, drill, "change complete after %v", end.Sub(start).Round(time.Millisecond))
	time.Sleep(30 * time.Second)
	lines := load.stop(t)
	report(t, c, drill, statsBetween("before", lines, load.start, start),
		statsBetween("during", lines, start, end), statsBetween("after", lines, end, end.Add(30*time.Second)))
}

// TestNodeDrillRolloutRestart: kubectl rollout restart of the Deployment.
func TestNodeDrillRolloutRestart(t *testing.T) {
	rolloutDrill(t, "rollout-restart", func(ctx context.Context, c *nodeCluster) error {
		_, err := c.kubectl(ctx, "rollout", "restart", "-n", "kube-system", "deployment/meshdns")
		if err != nil {
			return err
		}
		// the Deployment's status lags the restart by a moment
		time.Sleep(time.Second)
		return nil
	})
}

// TestNodeDrillDeletePod: one meshdns pod deleted (its grace period as the
// manifest sets it).
func TestNodeDrillDeletePod(t *testing.T) {
	rolloutDrill(t, "delete-pod", func(ctx context.Context, c *nodeCluster) error {
		pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
		if err != nil || len(pods.Items) == 0 {
			return fmt.Errorf("meshdns pods: %v", err)
		}
		if err := c.Client.CoreV1().Pods("kube-system").Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		time.Sleep(time.Second)
		return nil
	})
}

// askAt asks addr for name's A records with a short timeout and returns
// them.
func askAt(addr, name string) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	cl := dns.Client{Timeout: 200 * time.Millisecond}
	r, _, err := cl.Exchange(m, addr)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out, nil
}

// newServiceAnswers creates a Service once the API is back and measures
// how long until every meshdns replica (asked at its pod address) answers
// its name with its ClusterIP; the goal is 2 s.
func newServiceAnswers(t *testing.T, c *nodeCluster, drill, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
	if err != nil {
		t.Fatal(err)
	}
	// each replica is asked once before the Service exists (NXDOMAIN): a
	// denial must not keep the new Service from answering
	fqdn0 := name + "." + drillNS + ".svc.cluster.local"
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			got, err := askAt(net.JoinHostPort(p.Status.PodIP, "53"), fqdn0)
			note(t, c, drill, "before the Service exists, %s answers %v %v", p.Name, got, err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	created, err := c.Client.CoreV1().Services(drillNS).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	fqdn := name + "." + drillNS + ".svc.cluster.local"
	var worst time.Duration
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		addr := net.JoinHostPort(p.Status.PodIP, "53")
		err := waitFor(time.Minute, nil, fqdn+" at "+addr, func() error {
			got, err := askAt(addr, fqdn)
			if err != nil || strings.Join(got, " ") != created.Spec.ClusterIP {
				return fmt.Errorf("%v %v", got, err)
			}
			return nil
		})
		took := time.Since(at)
		if err != nil {
			t.Errorf("%s: %v", drill, err)
		}
		note(t, c, drill, "new Service answered by %s %v after its creation", p.Name, took.Round(time.Millisecond))
		if took > worst {
			worst = took
		}
	}
	note(t, c, drill, "new Service answered by every replica %v after its creation (goal 2s)", worst.Round(time.Millisecond))
	if worst > 2*time.Second {
		t.Errorf("%s: a new Service answered after %v, goal 2s; the replicas' logs:\n%s", drill, worst, c.meshdnsLogs(15))
	}
}
