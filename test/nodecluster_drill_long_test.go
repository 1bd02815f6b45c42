//go:build nodedrill

package test

// The longer drills of issue 25, run with `make drill` (go test -tags
// nodedrill; ~16 min with the node-local drills): the API server frozen for
// 90 s, the meshdns container killed while the API server is down (its
// restart answers from the snapshot), and a ConfigMap change picked up by
// reload. The API server killed and returning, a rollout restart and a
// deleted replica run in every `make test` (nodecluster_drill_test.go,
// nodecluster_rollout_test.go).

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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeDrillAPIFrozen: the API server SIGSTOPped for 90 s (issue item 3).
func TestNodeDrillAPIFrozen(t *testing.T) {
	var api *nodeProc
	outageDrill(t, "api-frozen", 90*time.Second,
		func(c *nodeCluster) {
			api = c.proc("kube-apiserver")
			api.signal(syscall.SIGSTOP)
			t.Cleanup(func() { api.signal(syscall.SIGCONT) })
		},
		func(t *testing.T, c *nodeCluster) {
			api.signal(syscall.SIGCONT)
			if err := c.waitAPIReady(); err != nil {
				t.Fatal(err)
			}
		}, nil)
}

// TestNodeDrillMeshdnsKilledDuringOutage: with the API server down, one
// meshdns process is killed; the kubelet restarts the container, which
// must answer from its snapshot within 1 s of its start.
func TestNodeDrillMeshdnsKilledDuringOutage(t *testing.T) {
	stop, start := apiKilled(t)
	outageDrill(t, "meshdns-killed", 60*time.Second, stop, start,
		func(t *testing.T, c *nodeCluster) *span {
			time.Sleep(10 * time.Second)
			return killMeshdnsAndTime(t, c, "meshdns-killed")
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

// reloads counts "Reloading complete" per meshdns pod, over all its
// container logs (the kubelet's pod logs on the node: 0.log, then 1.log
// after a restart, the earlier one kept). Counted per pod, not per file:
// a pod whose container an earlier drill killed reloads in its newest log
// while its first one stays as it was.
func reloads(c *nodeCluster) map[string]int {
	files, _ := filepath.Glob(filepath.Join(c.paths.state, "pod-logs", "kube-system_meshdns-*", "meshdns", "*.log"))
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out[filepath.Base(filepath.Dir(filepath.Dir(f)))] += strings.Count(string(b), "Reloading complete")
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
	return restartSpan(t, c, drill, "meshdns", killedAt, newPID, net.JoinHostPort(ip, "53"), nil)
}

// restartSpan waits for the first answer at addr from the process newPID
// that replaced one killed at killedAt, notes how long the restart and the
// first answer took, fails the drill unless it answered within 1 s of its
// start, and returns the span from just before the kill to that answer.
// diag, when not nil, adds to a failure to answer at all.
func restartSpan(t *testing.T, c *nodeCluster, drill, what string, killedAt time.Time, newPID int, addr string, diag func() string) *span {
	t.Helper()
	started := procStart(newPID)
	if err := waitFor(30*time.Second, nil, "first answer at "+addr, func() error {
		got, err := askAt(addr, "kubernetes.default.svc.cluster.local")
		if err != nil || strings.Join(got, " ") != apiServiceIP {
			return fmt.Errorf("%v %v", got, err)
		}
		return nil
	}); err != nil {
		if diag != nil {
			err = fmt.Errorf("%w\n%s", err, diag())
		}
		t.Fatal(err)
	}
	answeredAt := time.Now()
	answered := answeredAt.Sub(started)
	note(t, c, drill, "%s killed; restarted %v later, answered %v after its start (goal 1s)",
		what, started.Sub(killedAt).Round(time.Millisecond), answered.Round(time.Millisecond))
	if answered > time.Second {
		t.Errorf("%s: the restarted %s answered %v after its start, goal 1s", drill, what, answered)
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
