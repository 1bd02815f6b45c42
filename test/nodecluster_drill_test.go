package test

// Drills of issue 25 (items 3 and 4) on the one-node cluster, each under the
// load of a client pod (~20 lookups a second, nodecluster_load_test.go).
// Each reports lookups lost, timed out and p50/p99 latency per window, and
// asserts the issue's goal: nothing lost, nothing timed out. Every `make
// test` runs the API server killed for 90 s and returning (with a new
// Service that must answer within 2 s), a rollout restart and a deleted
// replica (nodecluster_rollout_test.go), ~5.5 min; `make drill` adds the
// API server frozen, a meshdns container killed during the outage, a
// ConfigMap reload (nodecluster_drill_long_test.go) and the node-local
// drills.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var drillFixture struct {
	once sync.Once
	pods map[string]*corev1.Pod
}

// drillCluster returns the cluster with the drill namespace's objects, once
// the node is Ready and the meshdns Deployment fully available (an earlier
// drill may have left it recovering).
func drillCluster(t *testing.T) (*nodeCluster, map[string]*corev1.Pod) {
	t.Helper()
	c := sharedNodeCluster(t)
	drillFixture.once.Do(func() {
		pods := dnsTestObjects(t, c, drillNS)
		// After an outage longer than the node-monitor grace period the node
		// controller marks every pod of the node NotReady until the kubelet
		// reports again, and a headless Service's hostname of a NotReady pod
		// rightly leaves DNS (web-0.web…). The drills measure the DNS, not
		// the workload's readiness: the headless Service publishes its
		// endpoints whatever their readiness.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		svc, err := c.Client.CoreV1().Services(drillNS).Get(ctx, "web", metav1.GetOptions{})
		if err == nil {
			svc.Spec.PublishNotReadyAddresses = true
			_, err = c.Client.CoreV1().Services(drillNS).Update(ctx, svc, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("publishNotReadyAddresses on %s/web: %v", drillNS, err)
		}
		drillFixture.pods = pods
	})
	if drillFixture.pods == nil {
		t.Fatal("the drill objects could not be created")
	}
	c.waitSettled(t)
	return c, drillFixture.pods
}

// waitSettled waits for a Ready node and a complete meshdns rollout.
func (c *nodeCluster) waitSettled(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := waitFor(3*time.Minute, nil, "Ready node", func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node not Ready")
	})
	if err == nil {
		err = c.waitDeployment(ctx, "kube-system", "meshdns", 3*time.Minute)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// report logs a drill's windows, appends them to <state>/logs/drills.txt
// and fails the drill for every lost or timed-out lookup.
func report(t *testing.T, c *nodeCluster, drill string, windows ...drillStats) {
	t.Helper()
	f, _ := os.OpenFile(filepath.Join(c.paths.state, "logs", "drills.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	defer f.Close()
	for _, w := range windows {
		line := fmt.Sprintf("%s %-22s %s", time.Now().Format("15:04:05"), drill, w)
		t.Log(line)
		fmt.Fprintln(f, line)
		if (w.lost > 0 || w.timedOut > 0) && !w.expected {
			t.Errorf("%s, %s: %d lookups lost and %d timed out (goal: 0)", drill, w.window, w.lost, w.timedOut)
		}
		if w.total == 0 {
			t.Errorf("%s, %s: no lookups in the window", drill, w.window)
		}
	}
	if n, err := egressRejected(); err == nil {
		line := fmt.Sprintf("%s %-22s the egress rule has rejected %d pod packets bound outside the pod network since the cluster started", time.Now().Format("15:04:05"), drill, n)
		t.Log(line)
		fmt.Fprintln(f, line)
	}
}

// note appends a free-form figure to the drill log.
func note(t *testing.T, c *nodeCluster, drill, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("%s %-22s %s", time.Now().Format("15:04:05"), drill, fmt.Sprintf(format, args...))
	t.Log(line)
	if f, err := os.OpenFile(filepath.Join(c.paths.state, "logs", "drills.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

// outageDrill runs one API-server outage drill: 10 s of load, the outage
// (stop takes the API server down, start brings it back), a new Service
// that must answer within 2 s of the API's return, and 2 minutes after.
// during, when not nil, acts while the API server is down and may return
// a span whose lookups are the drill's own loss (a replica killed: the
// queries kube-proxy sends it until it answers again); they are reported
// in a window of their own and left out of "during".
func outageDrill(t *testing.T, drill string, outage time.Duration, stop func(*nodeCluster), start func(*testing.T, *nodeCluster), during func(*testing.T, *nodeCluster) *span) {
	c, pods := drillCluster(t)
	load := startDrillLoad(t, c, drill, drillNames(pods), 10*time.Minute)
	time.Sleep(10 * time.Second)
	outStart := time.Now()
	stop(c)
	var down *span
	if during != nil {
		down = during(t, c)
	}
	time.Sleep(time.Until(outStart.Add(outage)))
	start(t, c)
	outEnd := time.Now()
	note(t, c, drill, "API server down %v", outEnd.Sub(outStart).Round(time.Millisecond))
	newServiceAnswers(t, c, drill, "fresh-"+drill)
	time.Sleep(time.Until(outEnd.Add(2 * time.Minute)))
	lines := load.stop(t)
	windows := []drillStats{statsBetween("before", lines, load.start, outStart)}
	if down != nil {
		gone := statsBetween("replica down", lines, down.from, down.to)
		gone.expected = true
		windows = append(windows, statsBetween("during", lines, outStart, outEnd, *down), gone)
	} else {
		windows = append(windows, statsBetween("during", lines, outStart, outEnd))
	}
	report(t, c, drill, append(windows, statsBetween("after", lines, outEnd, outEnd.Add(2*time.Minute)))...)
}

// TestNodeDrillAPIKilled: the API server killed, restarted after 90 s.
func TestNodeDrillAPIKilled(t *testing.T) {
	stop, start := apiKilled(t)
	outageDrill(t, "api-killed", 90*time.Second, stop, start, nil)
}

// apiKilled is an outage's stop and start for outageDrill: the API server
// killed (and started again at the test's end if a failure left it down),
// then started again.
func apiKilled(t *testing.T) (stop func(*nodeCluster), start func(*testing.T, *nodeCluster)) {
	stop = func(c *nodeCluster) {
		c.proc("kube-apiserver").kill()
		t.Cleanup(func() {
			if c.proc("kube-apiserver").exited() {
				_ = c.StartAPIServer()
			}
		})
	}
	start = func(t *testing.T, c *nodeCluster) {
		if err := c.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	return stop, start
}
