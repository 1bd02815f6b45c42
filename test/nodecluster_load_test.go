package test

// The load of the node drills: a client pod runs `nodeclient load` (~20
// lookups a second through the kubelet-written resolv.conf, Go's resolver,
// UDP) and appends every lookup's outcome and latency to a file on a
// hostPath volume, which the test reads from the node's side; the figures of
// a drill are counted over time windows of that log.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// drillNS holds the drills' objects (the same shapes as TestNodeClusterDNS).
const drillNS = "drill"

// loadLine is one lookup of the load log (test/nodeclient/load.go).
type loadLine struct {
	Start   int64   `json:"t"`
	Type    string  `json:"type"`
	Name    string  `json:"name"`
	Millis  float64 `json:"ms"`
	OK      bool    `json:"ok"`
	Timeout bool    `json:"timeout"`
	Answers int     `json:"n"`
	Error   string  `json:"err"`
}

// drillLoad is a running load pod and its log.
type drillLoad struct {
	c     *nodeCluster
	pod   string
	path  string
	start time.Time
}

// drillNames is the mix the load asks: the names of TestNodeClusterDNS.
func drillNames(pods map[string]*corev1.Pod) []string {
	podName := strings.ReplaceAll(pods["client"].Status.PodIP, ".", "-") + "." + drillNS + ".pod.cluster.local"
	return []string{
		"A:kubernetes.default", "A:web-svc." + drillNS + ".svc", "SRV:_http._tcp.web-svc." + drillNS + ".svc",
		"A:web-0.web." + drillNS + ".svc.cluster.local", "A:" + podName, "A:ext." + drillNS + ".svc", "A:" + extName,
	}
}

// startDrillLoad starts the load pod for drill name and waits until its
// log shows answered lookups.
func startDrillLoad(t *testing.T, c *nodeCluster, name string, names []string, d time.Duration) *drillLoad {
	t.Helper()
	l := &drillLoad{c: c, pod: "load-" + name, path: filepath.Join(c.paths.hostLogs, name+".jsonl")}
	_ = os.Remove(l.path)
	p := clientPod(l.pod, nil)
	hostDir := corev1.HostPathDirectory
	p.Spec.Volumes = []corev1.Volume{{Name: "log", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: c.paths.hostLogs, Type: &hostDir}}}}
	ctr := &p.Spec.Containers[0]
	ctr.VolumeMounts = []corev1.VolumeMount{{Name: "log", MountPath: "/log"}}
	ctr.Command = append([]string{"/nodeclient", "load", "-rate", "20", "-duration", d.String(), "-out", "/log/" + name + ".jsonl"}, names...)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.runPods(ctx, drillNS, p); err != nil {
		t.Fatal(err)
	}
	// A drill starts from a cluster that answers: an earlier drill's
	// aftermath (the node controller's NotReady marks, kube-proxy without
	// endpoints) may outlast the Deployment's own status.
	waited := time.Now()
	if err := waitFor(5*time.Minute, nil, "2 s of answered lookups in "+l.path, func() error {
		return lastAnswered(l.lines(t), 40)
	}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(waited); d > 5*time.Second {
		note(t, c, name, "the load's lookups all answered only %v after its pod was ready", d.Round(time.Second))
	}
	l.start = time.Now()
	return l
}

// lastAnswered returns nil when the n latest lookups (by start) all
// answered.
func lastAnswered(lines []loadLine, n int) error {
	if len(lines) < n {
		return fmt.Errorf("%d lookups", len(lines))
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].Start < lines[j].Start })
	bad := 0
	for _, l := range lines[len(lines)-n:] {
		if !l.OK {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of the last %d lookups failed", bad, n)
	}
	return nil
}

// stop deletes the load pod (the API must be up) and returns the log.
func (l *drillLoad) stop(t *testing.T) []loadLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zero := int64(0)
	_ = l.c.Client.CoreV1().Pods(drillNS).Delete(ctx, l.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	time.Sleep(500 * time.Millisecond)
	return l.lines(t)
}

// lines reads the log so far.
func (l *drillLoad) lines(t *testing.T) []loadLine {
	t.Helper()
	f, err := os.Open(l.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []loadLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var x loadLine
		if json.Unmarshal(sc.Bytes(), &x) == nil {
			out = append(out, x)
		}
	}
	return out
}

// drillStats are the figures of one window of a drill.
type drillStats struct {
	window                             string
	expected                           bool // failures here are the drill's own (reported, not failed)
	total, ok, lost, timedOut, skipped int
	p50, p99, max                      time.Duration
	firstBad, lastBad                  time.Time
	errors                             map[string]int
}

// span is a stretch of time [from, to).
type span struct{ from, to time.Time }

func (s span) has(t time.Time) bool { return !t.Before(s.from) && t.Before(s.to) }

// statsBetween counts the lookups that started in [from, to), but for
// those that started in one of the spans left out.
func statsBetween(window string, lines []loadLine, from, to time.Time, leftOut ...span) drillStats {
	s := drillStats{window: window, errors: map[string]int{}}
	var lat []time.Duration
next:
	for _, l := range lines {
		at := time.Unix(0, l.Start)
		if at.Before(from) || !at.Before(to) {
			continue
		}
		for _, x := range leftOut {
			if x.has(at) {
				continue next
			}
		}
		s.total++
		switch {
		case strings.HasPrefix(l.Error, "skipped"):
			s.skipped++
		case l.OK:
			s.ok++
		case l.Timeout:
			s.timedOut++
		default:
			s.lost++
		}
		if !l.OK {
			if s.firstBad.IsZero() {
				s.firstBad = at
			}
			s.lastBad = at
			s.errors[shortError(l.Error)]++
		}
		lat = append(lat, time.Duration(l.Millis*float64(time.Millisecond)))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n := len(lat); n > 0 {
		s.p50, s.p99, s.max = lat[n/2], lat[(n*99)/100], lat[n-1]
	}
	return s
}

// shortError keeps an error's kind, without the name and server.
func shortError(e string) string {
	for _, k := range []string{"no such host", "server misbehaving", "connection refused", "i/o timeout", "deadline exceeded", "no answer", "skipped"} {
		if strings.Contains(e, k) {
			return k
		}
	}
	return e
}

func (s drillStats) String() string {
	out := fmt.Sprintf("%-7s %5d lookups, %4d lost, %4d timed out, p50 %v, p99 %v, max %v", s.window, s.total, s.lost, s.timedOut,
		s.p50.Round(100*time.Microsecond), s.p99.Round(100*time.Microsecond), s.max.Round(time.Millisecond))
	if s.skipped > 0 {
		out += fmt.Sprintf(", %d skipped", s.skipped)
	}
	if len(s.errors) > 0 {
		out += fmt.Sprintf("; failures %v from %s to %s", s.errors, s.firstBad.Format("15:04:05.000"), s.lastBad.Format("15:04:05.000"))
	}
	return out
}
