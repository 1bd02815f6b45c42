package test

// The alert rules and the dashboard (issue 33) against a real Prometheus
// (Debian's prometheus package): promtool's unit tests of each rule, and a
// drill in which Prometheus scrapes real meshdns processes through real
// faults — a Consul agent frozen, the API server stopped, the replication
// leader killed, the container engine absent — and the test asserts which
// alerts fire during each fault and that they resolve after it. Every
// metric a rule or a dashboard panel names must exist in that real scrape.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/dashboard"
	"sigs.k8s.io/yaml"
)

// monitoringFile is a file of deploy/monitoring.
func monitoringFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "monitoring", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAlertRules: promtool checks the rule file and runs its unit tests
// (each alert fires on its input at its duration, not before, and
// resolves); every alert has a runbook in docs/operate.md, where its
// runbook_url points, and a unit test.
func TestAlertRules(t *testing.T) {
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(monitoringFile(t, "meshdns-rules.yaml")), &rf); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operate.md"))
	if err != nil {
		t.Fatal(err)
	}
	tests := monitoringFile(t, "meshdns-rules_test.yaml")
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name, _ := r["alert"].(string)
			ann, _ := r["annotations"].(map[string]any)
			url, _ := ann["runbook_url"].(string)
			if want := "docs/operate.md#" + strings.ToLower(name); !strings.HasSuffix(url, want) {
				t.Errorf("%s: runbook_url %q, want it to end in %s", name, url, want)
			}
			if !strings.Contains(string(doc), "\n### "+name+"\n") {
				t.Errorf("%s: docs/operate.md has no runbook heading for it", name)
			}
			if !strings.Contains(tests, "alertname: "+name+"\n") {
				t.Errorf("%s: no promtool test in meshdns-rules_test.yaml", name)
			}
		}
	}
	promtool := RequireTool(t, "promtool", "prometheus")
	dir := filepath.Join(repoRoot, "deploy", "monitoring")
	for _, args := range [][]string{{"check", "rules", "meshdns-rules.yaml"}, {"test", "rules", "meshdns-rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// ruleFile is the part of a Prometheus rule file the drill reads and
// rewrites.
type ruleFile struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

// drillClock is how much faster than real time the drill runs the rules:
// `for` and range windows divided by it (a 2m `for` holds 2 s; a [5m]
// window spans 5 s, five scrapes). The expressions are the shipped ones;
// promtool's tests check the rules at their real durations.
const drillClock = 60

var rangeRE = regexp.MustCompile(`\[(\d+[smh])\]`)

// compressed is the rule file with every duration divided by drillClock
// (`for` at least 1 s, windows at least 3 s: three scrapes).
func compressed(t *testing.T, text string) string {
	t.Helper()
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(text), &rf); err != nil {
		t.Fatal(err)
	}
	scale := func(s string, floor time.Duration) string {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return fmt.Sprintf("%ds", int(max(d/drillClock, floor)/time.Second))
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if f, ok := r["for"].(string); ok {
				r["for"] = scale(f, time.Second)
			}
			r["expr"] = rangeRE.ReplaceAllStringFunc(r["expr"].(string), func(m string) string {
				return "[" + scale(m[1:len(m)-1], 3*time.Second) + "]"
			})
		}
	}
	b, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// prometheus is a real Prometheus scraping meshdns processes every second
// and evaluating the rules every second.
type prometheus struct {
	t    *testing.T
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	log  syncBuffer
}

// startPrometheus runs Prometheus with the rules, scraping targets (job
// meshdns, instance = the name given).
func startPrometheus(t *testing.T, rules string, targets map[string]string) *prometheus {
	t.Helper()
	bin := RequireTool(t, "prometheus", "prometheus")
	p := &prometheus{t: t, dir: t.TempDir(), addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), done: make(chan struct{})}
	var sc strings.Builder
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&sc, "  - targets: [%q]\n    labels: {instance: %q}\n", targets[n], n)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
- job_name: meshdns
  static_configs:
%s`, sc.String())
	for name, content := range map[string]string{"prometheus.yml": cfg, "rules.yaml": rules} {
		if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(p.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(p.dir, "data"), "--web.listen-address="+p.addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		stopProcess(p.cmd, p.done, 5*time.Second)
		if t.Failed() {
			t.Logf("prometheus log:\n%s", tail(p.log.String(), 4000))
		}
	})
	Eventually(t, 30*time.Second, func() string {
		resp, err := http.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return resp.Status
		}
		return ""
	})
	return p
}

// api GETs a Prometheus API path into out's data.
func (p *prometheus) api(path string, out any) error {
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// firing is the set of firing alerts, each "Name{instance}" (instance
// omitted where the alert has none).
func (p *prometheus) firing() map[string]bool { return p.alerts("firing") }

// active is the set of pending or firing alerts.
func (p *prometheus) active() map[string]bool { return p.alerts("pending", "firing") }

// alerts is the set of alerts in one of states.
func (p *prometheus) alerts(states ...string) map[string]bool {
	var d struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", &d); err != nil {
		p.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, a := range d.Alerts {
		if contains(states, a.State) {
			out[a.Labels["alertname"]+"{"+a.Labels["instance"]+"}"] = true
		}
	}
	return out
}

// waitAlerts waits until every alert of want fires (fire) or none does
// (!fire).
func (p *prometheus) waitAlerts(fire bool, timeout time.Duration, want ...string) {
	p.t.Helper()
	Eventually(p.t, timeout, func() string {
		f := p.firing()
		for _, w := range want {
			if f[w] != fire {
				return fmt.Sprintf("%s firing=%v, want %v; firing: %v", w, f[w], fire, keys(f))
			}
		}
		return ""
	})
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// metricNames is every metric name in Prometheus's storage.
func (p *prometheus) metricNames() map[string]bool {
	var names []string
	if err := p.api("/api/v1/label/__name__/values", &names); err != nil {
		p.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// ruleMetricNames is every metric name the rules' expressions use.
func ruleMetricNames(t *testing.T, text string) []string {
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(text), &rf); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	re := regexp.MustCompile(`\b((?:coredns_|up\b)[a-z0-9_]*)`)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			for _, m := range re.FindAllStringSubmatch(r["expr"].(string), -1) {
				seen[m[1]] = true
			}
		}
	}
	return keys(seen)
}

// alertsDrillCorefile is one meshdns beside a Consul agent (8500 → its
// HTTP port, misses to its DNS port 8600) that also holds a Weave-style
// record database whose container updater follows an engine that is not
// there.
const alertsDrillCorefile = `consul.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    virtualconsul {
        source consul 127.0.0.1:8500
        snapshot vc-snapshot.json
    }
    forward . 127.0.0.1:8600 {
        health_check 200ms
    }
}
weave.local.:1053 {
    bind 127.0.0.1
    prometheus 127.0.0.1:9153
    mdnsfallback {
        api 127.0.0.1:6785
        snapshot records.json
        updater docker unix://%s
    }
}
`

// TestAlertsDrill: the alerts fire during each fault and resolve after
// it, on a real Prometheus scraping real processes; the time from fault
// to firing is logged (at the drill's clock, drillClock times real time).
// It runs in parallel with TestAPIReturn (after the serial tests): both
// mostly wait, on processes of their own.
func TestAlertsDrill(t *testing.T) {
	t.Parallel()
	RequireTool(t, "dig", "dnsutils")
	k := startKubeAPI(t)
	createNS(t, k, "shop")
	createNS(t, k, "dns")
	replicaObjects(t, k, "shop", 5)
	leader := Start(t, replicaLeaderCorefile(t, k.Kubeconfig), Options{Env: []string{"POD_NAME=meshdns-e2e", "POD_NAMESPACE=dns"}, Files: replicaTokenFiles})
	follower := startReplicaFollower(t, leader.Addr(9155))
	consul := startConsul(t, false)
	consul.Register("web", 8080)
	engine := filepath.Join(t.TempDir(), "no-engine.sock")
	side := Start(t, fmt.Sprintf(alertsDrillCorefile, engine), Options{Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	if code, body := httpDo(t, "PUT", "http://"+side.Addr(6785)+"/name/c1/10.32.0.10?domain=web.weave.local", "", "", ""); code != 200 {
		t.Fatalf("record API PUT: %d %s", code, body)
	}
	// answers of every plugin, and a miss forward sends to the agent
	for _, q := range []struct{ addr, name string }{
		{leader.DNS(), "svc1.shop.svc.cluster.local"}, {follower.DNS(), "svc1.shop.svc.cluster.local"},
		{side.DNS(), "web.virtual.consul"}, {side.DNS(), "web.service.consul"}, {side.DNS(), "web.weave.local"},
	} {
		Eventually(t, 10*time.Second, func() string {
			if m, err := TryQuery(q.addr, q.name, 1, "udp"); err != nil || len(m.Answer) == 0 {
				return fmt.Sprintf("%s at %s: %v %v", q.name, q.addr, m, err)
			}
			return ""
		})
	}
	// a slice change with a trigger time, so that the DNS programming
	// latency histogram (the dashboard's) is in both endpointsvc scrapes
	annotateSlice(t, k, "shop", "svc0-a", time.Now(), endpoint("10.244.0.9", "n1", true, false))
	waitProgrammed(t, "leader", leader, "cluster_ip", 1)
	waitProgrammed(t, "follower", follower, "cluster_ip", 1)
	rules := monitoringFile(t, "meshdns-rules.yaml")
	p := startPrometheus(t, compressed(t, rules), map[string]string{
		"leader": leader.directiveAddr("prometheus"), "follower": follower.directiveAddr("prometheus"), "side": side.directiveAddr("prometheus"),
	})
	const timeout = 60 * time.Second

	// Before any fault: the engine is absent from the start, so only its
	// alert fires.
	p.waitAlerts(true, timeout, "MeshdnsUpdaterDisconnected{side}")
	quiet := []string{"MeshdnsDown{leader}", "MeshdnsConsulSourceFailing{side}", "MeshdnsTableStale{leader}", "MeshdnsTableStale{follower}", "MeshdnsReplicaDisconnected{follower}"}
	p.waitAlerts(false, timeout, quiet...)

	// idle: a fault's alerts are not even pending before it
	idle := func(t *testing.T, names ...string) {
		t.Helper()
		Eventually(t, timeout, func() string {
			a := p.active()
			for _, n := range names {
				if a[n] {
					return n + " active before the fault: " + strings.Join(keys(a), ", ")
				}
			}
			return ""
		})
	}

	t.Run("ConsulFrozen", func(t *testing.T) {
		idle(t, "MeshdnsConsulSourceFailing{side}", "CoreDNSForwardHealthcheckFailing{side}", "MeshdnsConsulTableStale{side}")
		t0 := time.Now()
		consul.Pause()
		resumed := false
		defer func() {
			if !resumed {
				consul.Resume()
			}
		}()
		// misses go to the frozen agent: forward's health checks fail
		stop := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
					_, _ = TryQuery(side.DNS(), fmt.Sprintf("miss%d.service.consul", i), 1, "udp")
				}
			}
		}()
		p.waitAlerts(true, timeout, "MeshdnsConsulSourceFailing{side}", "CoreDNSForwardHealthcheckFailing{side}")
		t.Logf("agent frozen: MeshdnsConsulSourceFailing and CoreDNSForwardHealthcheckFailing fire %v after the fault", time.Since(t0).Round(time.Second))
		p.waitAlerts(true, timeout, "MeshdnsConsulTableStale{side}")
		t.Logf("MeshdnsConsulTableStale %v after it", time.Since(t0).Round(time.Second))
		close(stop)
		t0 = time.Now()
		consul.Resume()
		resumed = true
		p.waitAlerts(false, timeout, "MeshdnsConsulSourceFailing{side}", "MeshdnsConsulTableStale{side}", "CoreDNSForwardHealthcheckFailing{side}")
		t.Logf("agent resumed: resolved %v after", time.Since(t0).Round(time.Second))
	})

	t.Run("APIServerStopped", func(t *testing.T) {
		idle(t, "MeshdnsTableStale{leader}", "MeshdnsTableStale{follower}")
		t0 := time.Now()
		k.StopAPI()
		p.waitAlerts(true, timeout, "MeshdnsTableStale{leader}", "MeshdnsTableStale{follower}")
		t.Logf("API server stopped: MeshdnsTableStale on the leader and its follower %v after the fault", time.Since(t0).Round(time.Second))
		t0 = time.Now()
		k.StartAPI()
		p.waitAlerts(false, timeout, "MeshdnsTableStale{leader}", "MeshdnsTableStale{follower}")
		t.Logf("API server back: resolved %v after", time.Since(t0).Round(time.Second))
	})

	t.Run("LeaderKilled", func(t *testing.T) {
		idle(t, "MeshdnsDown{leader}", "MeshdnsReplicaDisconnected{follower}", "MeshdnsTableStale{follower}")
		t0 := time.Now()
		leader.Stop()
		p.waitAlerts(true, timeout, "MeshdnsDown{leader}", "MeshdnsReplicaDisconnected{follower}", "MeshdnsTableStale{follower}")
		t.Logf("leader stopped: MeshdnsDown, MeshdnsReplicaDisconnected and the follower's MeshdnsTableStale %v after the fault", time.Since(t0).Round(time.Second))
		t0 = time.Now()
		leader.start()
		p.waitAlerts(false, timeout, "MeshdnsDown{leader}", "MeshdnsReplicaDisconnected{follower}", "MeshdnsTableStale{follower}")
		t.Logf("leader back: resolved %v after", time.Since(t0).Round(time.Second))
	})

	t.Run("MetricNamesExist", func(t *testing.T) {
		have := p.metricNames()
		var missing []string
		for _, n := range append(ruleMetricNames(t, rules), dashboard.Names()...) {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("metrics the rules or the dashboard name but no process exported: %v", missing)
		}
		// every dashboard query is valid PromQL (Prometheus parses it)
		for _, panel := range dashboard.Build().Panels {
			for _, q := range panel.Targets {
				expr := strings.NewReplacer("$__rate_interval", "5s", `"$instance"`, `".*"`).Replace(q.Expr)
				var out any
				if err := p.api("/api/v1/query?query="+url.QueryEscape(expr), &out); err != nil {
					t.Errorf("panel %q: %v", panel.Title, err)
				}
			}
		}
	})
}
