//go:build nodedrill

package test

// Drills of the node-local meshdns (issue 23) under the load of a client
// pod with the default dnsPolicy (~20 lookups a second to 10.96.0.10,
// nodecluster_load_test.go), one load through every phase:
//
//	service     no node-local: the cluster DNS Service through kube-proxy
//	takeover    deploy/node-local applied (until its pod is available)
//	node-local  the node-local answers: latency against "service"
//	rollout     kubectl rollout restart of the DaemonSet (maxSurge 1): 0 lost
//	kill        the node-local's process SIGKILLed; the kubelet restarts it
//	outage      the cluster DNS scaled to 0 and the API server killed: cluster
//	            names keep answering from the node-local's table, and a
//	            node-local killed then answers from its hostPath snapshot
//	            within 1 s of its start; the restore lasts until an outside
//	            name answers through the node-local again
//	fail-open   the DaemonSet deleted: pods resolve through the Service again
//
// Run with `go test -tags nodedrill -run TestNodeLocalDrills ./test/` (~7 min
// on a running cluster).

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// phase is one named stretch of the drill.
type phase struct {
	name string
	span
}

// nodeLocalDrill records the phases of the drill as it goes.
type nodeLocalDrill struct {
	t      *testing.T
	c      *nodeCluster
	phases []phase
	kills  []span // from a kill to the restarted node-local's first answer
}

// run times f as phase name.
func (d *nodeLocalDrill) run(name string, f func()) {
	start := time.Now()
	f()
	d.phases = append(d.phases, phase{name, span{start, time.Now()}})
	note(d.t, d.c, "node-local", "%s: %v", name, time.Since(start).Round(time.Millisecond))
}

func TestNodeLocalDrills(t *testing.T) {
	c, pods := drillCluster(t)
	load := startDrillLoad(t, c, "nodelocal", drillNames(pods), 30*time.Minute)
	d := &nodeLocalDrill{t: t, c: c}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	d.run("service", func() { time.Sleep(30 * time.Second) })
	d.run("takeover", func() { c.deployNodeLocal(t) })
	d.run("node-local", func() { time.Sleep(30 * time.Second) })
	d.run("rollout", func() {
		if out, err := c.kubectl(ctx, "rollout", "restart", "-n", "kube-system", "daemonset/"+nodeLocalName); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		time.Sleep(time.Second)
		if err := c.waitDaemonSet(ctx, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	d.run("after rollout", func() { time.Sleep(15 * time.Second) })
	d.run("kill", func() { d.kills = append(d.kills, *killNodeLocalAndTime(t, c, "node-local kill")) })
	d.run("after kill", func() { time.Sleep(15 * time.Second) })
	d.outage(ctx)
	d.run("after outage", func() { time.Sleep(15 * time.Second) })
	d.run("fail-open", func() { c.deleteNodeLocal(t, filepath.Join(c.paths.state, "node-local-manifests")) })
	d.run("after fail-open", func() { time.Sleep(15 * time.Second) })
	d.report(load.stop(t))
}

// outage scales the cluster DNS to 0 and kills the API server for 45 s
// (within the node controller's grace period), killing the node-local 10 s
// in (the kubelet restarts it after its crash backoff); then brings both
// back.
func (d *nodeLocalDrill) outage(ctx context.Context) {
	t, c := d.t, d.c
	t.Cleanup(func() { restoreClusterDNS(t, c) })
	d.run("scale to 0", func() {
		if out, err := c.kubectl(ctx, "scale", "-n", "kube-system", "deployment/meshdns", "--replicas=0"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if err := waitFor(2*time.Minute, nil, "no cluster DNS process", func() error {
			if n := len(meshdnsPIDs()) - len(nodeLocalPIDs()); n > 0 {
				return fmt.Errorf("%d left", n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	d.run("outage", func() {
		start := time.Now()
		c.proc("kube-apiserver").kill()
		time.Sleep(10 * time.Second)
		d.kills = append(d.kills, *killNodeLocalAndTime(t, c, "node-local kill, outage"))
		time.Sleep(time.Until(start.Add(45 * time.Second)))
	})
	d.run("restore", func() {
		restoreClusterDNS(t, c)
		// the replicas are available; the node-local's forwarding reaches
		// them once the upstream Service's EndpointSlice lists them ready
		// again and kube-proxy has programmed it (seconds more): part of
		// the restore, whose outside names are counted apart
		start := time.Now()
		if err := waitFor(time.Minute, nil, "an outside name answered through the node-local", func() error {
			got, err := askAt(net.JoinHostPort(nodeLocalIP, "53"), extName)
			if err != nil || strings.Join(got, " ") != extAddress {
				return fmt.Errorf("%v %v", got, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		note(t, c, "node-local", "restore: outside names answered through the node-local %v after the replicas were available", time.Since(start).Round(time.Millisecond))
	})
}

// restoreClusterDNS starts the API server if it is down and scales the
// cluster DNS back to its two replicas.
func restoreClusterDNS(t *testing.T, c *nodeCluster) {
	if c.proc("kube-apiserver").exited() {
		if err := c.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := c.kubectl(ctx, "scale", "-n", "kube-system", "deployment/meshdns", "--replicas=2"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := c.waitDeployment(ctx, "kube-system", "meshdns", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// needsOutside reports whether the load's name needs the outside world:
// the outside name, and the ExternalName Service whose CNAME points there
// (its A lookup follows the CNAME through forward).
func needsOutside(name string) bool {
	name = strings.TrimSuffix(name, ".")
	return name == extName || name == "ext."+drillNS+".svc"
}

// report counts every phase's lookups. While the cluster DNS is scaled to
// 0 (and the API server down) the names that need the outside world are
// counted apart: nothing can answer them, the cluster DNS that forwards
// them is gone (a cached answer lasts up to 30 s); the cluster names must
// all answer. The lookups of each kill's span are counted apart too.
func (d *nodeLocalDrill) report(lines []loadLine) {
	var inside, outside []loadLine
	for _, l := range lines {
		if needsOutside(l.Name) {
			outside = append(outside, l)
		} else {
			inside = append(inside, l)
		}
	}
	var windows []drillStats
	for _, p := range d.phases {
		switch p.name {
		case "kill":
			continue // the kill's own window, below
		case "scale to 0", "outage", "restore":
			windows = append(windows, statsBetween(p.name+", cluster names", inside, p.from, p.to, d.kills...))
			out := statsBetween(p.name+", outside names", outside, p.from, p.to, d.kills...)
			out.expected = true
			windows = append(windows, out)
		default:
			windows = append(windows, statsBetween(p.name, lines, p.from, p.to, d.kills...))
		}
	}
	for i, k := range d.kills {
		w := statsBetween(fmt.Sprintf("kill %d, to the first answer", i+1), lines, k.from, k.to)
		w.expected = true
		windows = append(windows, w)
	}
	report(d.t, d.c, "node-local", windows...)
}

// killNodeLocalAndTime SIGKILLs the node-local meshdns, waits for the
// kubelet's restart and its first answer at 169.254.20.10 (a cluster name:
// from the stream or, with the cluster DNS gone, from its snapshot), and
// checks that it answered within 1 s of its start. It returns the span from
// just before the kill to that answer.
func killNodeLocalAndTime(t *testing.T, c *nodeCluster, drill string) *span {
	t.Helper()
	pids := nodeLocalPIDs()
	if len(pids) != 1 {
		t.Fatalf("%d node-local processes, want 1", len(pids))
	}
	killedAt := time.Now()
	_ = syscall.Kill(pids[0], syscall.SIGKILL)
	var newPID int
	if err := waitFor(2*time.Minute, nil, "restarted node-local process", func() error {
		for _, p := range nodeLocalPIDs() {
			if p != pids[0] {
				newPID = p
				return nil
			}
		}
		return fmt.Errorf("none yet")
	}); err != nil {
		t.Fatal(err)
	}
	if !nodeLocalOnLo() {
		t.Fatalf("%s is not on lo: asking it would leave the machine", nodeLocalIP)
	}
	return restartSpan(t, c, drill, "node-local", killedAt, newPID, net.JoinHostPort(nodeLocalIP, "53"),
		func() string { return c.nodeLocalLogs(20) })
}
