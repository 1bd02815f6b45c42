//go:build nodedrill

package test

// Drills of issue 25 item 4 (a rollout restart, a deleted replica, a
// ConfigMap change picked up by reload) and the probes the outage drills
// share: a new Service's first answers, and a meshdns container's restart
// timed from its process start to its first answer.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// TestNodeDrillConfigMapReload: a server block added to the Corefile in the
// ConfigMap; the drill waits until every replica's reload plugin reloaded,
// then puts the ConfigMap back and waits for the second reload.
func TestNodeDrillConfigMapReload(t *testing.T) {
	rolloutDrill(t, "configmap-reload", func(ctx context.Context, c *nodeCluster) error {
		cms := c.Client.CoreV1().ConfigMaps("kube-system")
		cm, err := cms.Get(ctx, "meshdns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		orig := cm.Data["Corefile"]
		// reload compares the parsed Corefile (a comment changes nothing):
		// the change adds a server block for a zone nobody asks
		extra := fmt.Sprintf("\ndrill%d.invalid.:53 {\n    errors\n}\n", time.Now().Unix())
		for i, corefile := range []string{orig + extra, orig} {
			before := reloads(c)
			cm.Data["Corefile"] = corefile
			if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				return err
			}
			start := time.Now()
			if err := waitFor(4*time.Minute, nil, "reload in every replica", func() error {
				now := reloads(c)
				for pod, n := range now {
					if n <= before[pod] {
						return fmt.Errorf("%s: %d reloads, %d before", pod, n, before[pod])
					}
				}
				if len(now) == 0 {
					return fmt.Errorf("no meshdns log")
				}
				return nil
			}); err != nil {
				return fmt.Errorf("%w\n%s", err, reloadDiagnosis(c))
			}
			note(t, c, "configmap-reload", "change %d reloaded in every replica %v after the update", i+1, time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
}

// reloads counts "Reloading complete" in each running meshdns container's
// log (the kubelet's pod logs on the node).
func reloads(c *nodeCluster) map[string]int {
	files, _ := filepath.Glob(filepath.Join(c.paths.state, "pod-logs", "kube-system_meshdns-*", "meshdns", "*.log"))
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out[f] = strings.Count(string(b), "Reloading complete")
	}
	return out
}

// reloadDiagnosis shows, per meshdns pod, the Corefile the kubelet
// mounted (its last lines) and the container log's tail.
func reloadDiagnosis(c *nodeCluster) string {
	var b strings.Builder
	mounted, _ := filepath.Glob(filepath.Join(c.paths.kubeletRoot, "pods", "*", "volumes", "kubernetes.io~configmap", "config", "Corefile"))
	for _, m := range mounted {
		data, _ := os.ReadFile(m)
		fmt.Fprintf(&b, "mounted %s:\n%s\n", m, tail(string(data), 4))
	}
	logs, _ := filepath.Glob(filepath.Join(c.paths.state, "pod-logs", "kube-system_meshdns-*", "meshdns", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "log %s:\n%s\n", l, tail(string(data), 10))
	}
	return b.String()
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

// killMeshdnsAndTime kills one meshdns process (SIGKILL), waits for the
// kubelet's restart and its first answer (from its snapshot: the API
// server is down), and checks that it answered within 1 s of its start. It returns the span in which lookups may reach
// the dead replica: from just before the kill (a lookup in flight dies
// with the process) to the restarted process's first answer.
func killMeshdnsAndTime(t *testing.T, c *nodeCluster, drill string) *span {
	t.Helper()
	pids := meshdnsPIDs()
	if len(pids) == 0 {
		t.Fatal("no meshdns process")
	}
	victim := pids[0]
	ip, err := podAddr(victim)
	if err != nil {
		t.Fatal(err)
	}
	old := map[int]bool{}
	for _, p := range pids {
		old[p] = true
	}
	killedAt := time.Now()
	_ = syscall.Kill(victim, syscall.SIGKILL)
	var newPID int
	if err := waitFor(2*time.Minute, nil, "restarted meshdns process", func() error {
		for _, p := range meshdnsPIDs() {
			if !old[p] {
				if a, err := podAddr(p); err == nil && a == ip {
					newPID = p
					return nil
				}
			}
		}
		return fmt.Errorf("none yet")
	}); err != nil {
		t.Fatal(err)
	}
	started := procStart(newPID)
	addr := net.JoinHostPort(ip, "53")
	if err := waitFor(30*time.Second, nil, "first answer at "+addr, func() error {
		got, err := askAt(addr, "kubernetes.default.svc.cluster.local")
		if err != nil || strings.Join(got, " ") != apiServiceIP {
			return fmt.Errorf("%v %v", got, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	answeredAt := time.Now()
	answered := answeredAt.Sub(started)
	note(t, c, drill, "meshdns killed; restarted %v later, answered %v after its start (goal 1s)",
		started.Sub(killedAt).Round(time.Millisecond), answered.Round(time.Millisecond))
	if answered > time.Second {
		t.Errorf("%s: the restarted meshdns answered %v after its start, goal 1s", drill, answered)
	}
	return &span{killedAt.Add(-100 * time.Millisecond), answeredAt}
}

// podAddr returns the IPv4 address of eth0 in pid's network namespace.
func podAddr(pid int) (string, error) {
	out, err := hostRun("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "inet" {
			return strings.Split(f[i+1], "/")[0], nil
		}
	}
	return "", fmt.Errorf("no address: %q", out)
}

// procStart returns when pid started, from its start time in clock ticks
// since boot (CLK_TCK 100) against /proc/uptime.
func procStart(pid int) time.Time {
	now := time.Now()
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ticks, _ := strconv.ParseFloat(f[19], 64) // field 22 of stat; f[0] is field 3
	u, _ := os.ReadFile("/proc/uptime")
	up, _ := strconv.ParseFloat(strings.Fields(string(u))[0], 64)
	return now.Add(-time.Duration((up - ticks/100) * float64(time.Second)))
}
