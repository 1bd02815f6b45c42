package test

// End-to-end tests of the mdnsfallback container updater and of the meshdns
// image against a real dockerd in a network namespace (see
// mdnsupdater_helpers_test.go).

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// updaterCorefile: meshdns in the namespace, DNS on the namespace's loopback
// and veth address (queried from the host side), the updater following the
// engine named by DOCKER_HOST.
const updaterCorefile = `weave.local.:1053 {
    bind 127.0.0.1 %s
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    mdnsfallback {
        api 127.0.0.1:6785
        ttl 5s
        negative_ttl 0s
        interface %s
        updater docker {
            network wnet
            check_interval 500ms
            check_timeout 300ms
        }
    }
}
`

// runCtr starts a busybox container on wnet with an init (so docker stop is
// quick) and returns its ID.
func runCtr(t *testing.T, d *dockerNS, name, hostname, domain string, extra ...string) string {
	t.Helper()
	args := []string{"run", "-d", "--init", "--name", name, "--hostname", hostname, "--network", "wnet"}
	if domain != "" {
		args = append(args, "--domainname", domain)
	}
	args = append(args, extra...)
	args = append(args, "local/busybox", "sleep", "3600")
	return d.docker(t, args...)
}

// waitName waits until name answers want (an IP), or NXDOMAIN when want is "".
func waitName(t *testing.T, addr, name, want string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() string {
		rc, ans, err := rcode(addr, name)
		switch {
		case err != nil:
			return err.Error()
		case want == "" && rc == "NXDOMAIN":
			return ""
		case want != "" && rc == "NOERROR" && len(ans) == 1 && ans[0] == want:
			return ""
		}
		return fmt.Sprintf("%s: %s %v, want %q", name, rc, ans, want)
	})
}

func TestMdnsupdaterDocker(t *testing.T) {
	d := newDockerNS(t)
	d.importBusybox(t)
	d.docker(t, "network", "create", "--subnet", fmt.Sprintf("10.77.%d.0/24", d.subnet), "wnet")
	proxy := newSockProxy(t, filepath.Join(d.dir, "proxy.sock"), d.sock)

	// A container running before meshdns starts comes from the first list.
	runCtr(t, d, "early", "early", "weave.local")
	m := d.startMeshdns(t, fmt.Sprintf(updaterCorefile, d.nsIP, d.veth()), []string{"DOCKER_HOST=unix://" + proxy.path})
	addr := d.nsIP + ":1053" // from the host side of the namespace
	waitName(t, addr, "early.weave.local", d.ipOn(t, "early", "wnet"), 10*time.Second)

	// A record written by someone else through the API, under its own
	// identifier and under a container-like one; the updater never touches it.
	if code, body := m.api(t, "PUT", "/name/weave:extern/10.9.9.9", "-d", "domain=ext.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}

	t.Run("names appear", func(t *testing.T) {
		runCtr(t, d, "web", "web", "weave.local")
		runCtr(t, d, "db", "db.weave.local", "") // the hostname is the full name
		runCtr(t, d, "other", "other", "example.org")
		waitName(t, addr, "web.weave.local", d.ipOn(t, "web", "wnet"), 10*time.Second)
		waitName(t, addr, "db.weave.local", d.ipOn(t, "db", "wnet"), 10*time.Second)
		got := DigShort(t, addr, "web.weave.local", "A")
		if len(got) != 1 || got[0] != d.ipOn(t, "web", "wnet") {
			t.Errorf("dig web.weave.local = %v", got)
		}
		// On the default bridge only: no address on wnet, no record — until
		// it is connected to wnet (a network connect event).
		d.docker(t, "run", "-d", "--init", "--name", "multi", "--hostname", "multi", "--domainname", "weave.local", "local/busybox", "sleep", "3600")
		time.Sleep(300 * time.Millisecond)
		if rc, ans, _ := rcode(addr, "multi.weave.local"); rc != "NXDOMAIN" {
			t.Errorf("multi answers %s %v with no address on wnet", rc, ans)
		}
		d.docker(t, "network", "connect", "wnet", "multi")
		waitName(t, addr, "multi.weave.local", d.ipOn(t, "multi", "wnet"), 10*time.Second)
		code, body := m.api(t, "GET", "/status")
		if code != 200 || !strings.Contains(body, `"state":"connected"`) || !strings.Contains(body, `"domain":"web.weave.local."`) ||
			strings.Contains(body, "other.example.org") {
			t.Errorf("status: %d %s", code, body)
		}
	})

	t.Run("stop removes the name", func(t *testing.T) {
		// The API neither takes over nor releases the container's record
		// (README "Ownership"): a PUT of the very same record is
		// acknowledged and stays the updater's, a DELETE keeps it.
		cid := d.docker(t, "inspect", "--format", "{{.Id}}", "web")
		webIP := d.ipOn(t, "web", "wnet")
		code, body := m.api(t, "PUT", "/name/"+cid+"/"+webIP, "-d", "domain=web.weave.local")
		if code != 200 || !strings.Contains(body, `"owner":"docker"`) || !strings.Contains(body, `"created":false`) {
			t.Fatalf("PUT of the container's own record: %d %s", code, body)
		}
		code, body = m.api(t, "DELETE", "/name/"+cid)
		if code != 200 || !strings.Contains(body, `"deleted":[]`) || !strings.Contains(body, `"kept":[{`) {
			t.Fatalf("DELETE of the container's records through the API: %d %s", code, body)
		}
		waitName(t, addr, "web.weave.local", webIP, time.Second)
		byes := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="goodbye"`)
		d.docker(t, "stop", "-t", "1", "web")
		waitName(t, addr, "web.weave.local", "", 10*time.Second)
		if n := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="goodbye"`); n <= byes {
			t.Errorf("no mDNS goodbye multicast for web (goodbyes %v → %v)", byes, n)
		}
		out := Dig(t, addr, "web.weave.local", "A")
		if !strings.Contains(out, "status: NXDOMAIN") {
			t.Errorf("dig after stop:\n%s", out)
		}
		if n := m.metric(t, "coredns_mdnsfallback_updater_events_total", `action="die"`); n < 1 {
			t.Errorf("die events = %v", n)
		}
	})

	t.Run("disconnected then reconnected", func(t *testing.T) {
		dbIP := d.ipOn(t, "db", "wnet")
		proxy.cut()
		Eventually(t, 10*time.Second, func() string {
			_, body := m.api(t, "GET", "/status")
			if strings.Contains(body, `"state":"disconnected"`) {
				return ""
			}
			return "status: " + body
		})
		if m.metric(t, "coredns_mdnsfallback_updater_connected") != 0 {
			t.Error("updater_connected is not 0 while cut off")
		}
		// Meanwhile: a new container starts, db vanishes.
		runCtr(t, d, "late", "late", "weave.local")
		d.docker(t, "rm", "-f", "db")
		time.Sleep(time.Second)
		if rc, ans, _ := rcode(addr, "db.weave.local"); rc != "NOERROR" || len(ans) != 1 || ans[0] != dbIP {
			t.Fatalf("records must stay while the engine is away: db %s %v", rc, ans)
		}
		if rc, _, _ := rcode(addr, "late.weave.local"); rc != "NXDOMAIN" {
			t.Fatalf("late resolves while the updater is cut off: %s", rc)
		}
		before := m.metric(t, "coredns_mdnsfallback_updater_reconciles_total")
		proxy.restore()
		waitName(t, addr, "late.weave.local", d.ipOn(t, "late", "wnet"), 20*time.Second)
		waitName(t, addr, "db.weave.local", "", 5*time.Second)
		if after := m.metric(t, "coredns_mdnsfallback_updater_reconciles_total"); after <= before {
			t.Errorf("reconciles %v → %v", before, after)
		}
		_, body := m.api(t, "GET", "/status")
		if !strings.Contains(body, `"state":"connected"`) || !strings.Contains(body, `"reconnects":1`) {
			t.Errorf("status after reconnect: %s", body)
		}
	})

	t.Run("check keeps the name out until a listener appears", func(t *testing.T) {
		runCtr(t, d, "chk", "chk", "weave.local", "--label", "meshdns.check=tcp:8080")
		runCtr(t, d, "hchk", "hchk", "weave.local", "--label", "meshdns.check=http:8081/index.html")
		ip, hip := d.ipOn(t, "chk", "wnet"), d.ipOn(t, "hchk", "wnet")
		Eventually(t, 10*time.Second, func() string {
			if n := m.metric(t, "coredns_mdnsfallback_updater_checks_total", `result="fail"`); n < 6 {
				return fmt.Sprintf("%v failed checks so far", n)
			}
			return ""
		})
		for _, n := range []string{"chk.weave.local", "hchk.weave.local"} {
			if rc, ans, _ := rcode(addr, n); rc != "NXDOMAIN" {
				t.Fatalf("%s answers %s %v while nothing listens", n, rc, ans)
			}
		}
		start := time.Now()
		d.docker(t, "exec", "chk", "httpd", "-p", "8080", "-h", "/")
		d.docker(t, "exec", "hchk", "sh", "-c", "mkdir -p /www && echo ok > /www/index.html && httpd -p 8081 -h /www")
		waitName(t, addr, "chk.weave.local", ip, 10*time.Second)
		waitName(t, addr, "hchk.weave.local", hip, 10*time.Second)
		t.Logf("check passed → name resolvable in %v", time.Since(start).Round(time.Millisecond))
		if n := m.metric(t, "coredns_mdnsfallback_updater_checks_total", `result="pass"`); n < 2 {
			t.Errorf("passed checks = %v", n)
		}
	})

	t.Run("reload keeps checked names and acknowledged writes", func(t *testing.T) {
		ip := d.ipOn(t, "chk", "wnet")
		byes := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="goodbye"`)
		stop := make(chan struct{})
		var mu sync.Mutex
		var bad []string
		var acked []string
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // the checked name answers all along
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if rc, ans, err := rcode(addr, "chk.weave.local"); err == nil && (rc != "NOERROR" || len(ans) != 1 || ans[0] != ip) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s %v", rc, ans))
					mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		go func() { // writes through the API, before, during and after the reload
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("rl%d.weave.local", i)
				out, err := m.h.exec(t, nil, "curl", "-s", "-m", "2", "-X", "PUT", "-w", "\n%{http_code}", "-d", "domain="+name,
					fmt.Sprintf("http://127.0.0.1:6785/name/rl%d/10.9.8.%d", i, i%250+1))
				if err == nil && strings.HasSuffix(strings.TrimSpace(out), "200") {
					mu.Lock()
					acked = append(acked, name)
					mu.Unlock()
				}
			}
		}()
		time.Sleep(500 * time.Millisecond)
		if err := m.proc.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		m.proc.waitLog(t, "Reloading complete", 10*time.Second)
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		if len(bad) > 0 {
			t.Fatalf("the checked name did not answer through the reload: %v", bad)
		}
		if n := m.metric(t, "coredns_mdnsfallback_mdns_responses_sent_total", `kind="goodbye"`); n != byes {
			t.Fatalf("goodbyes rose through the reload: %v → %v", byes, n)
		}
		for _, name := range acked {
			if rc, _, _ := rcode(addr, name); rc != "NOERROR" {
				t.Fatalf("%s, written and acknowledged around the reload, is %s after it", name, rc)
			}
		}
		t.Logf("%d writes acknowledged around the reload, all kept", len(acked))
	})

	// The API record survived everything.
	if got := DigShort(t, addr, "ext.weave.local", "A"); len(got) != 1 || got[0] != "10.9.9.9" {
		t.Errorf("ext.weave.local = %v: the updater touched a record it does not own", got)
	}
}

// TestMdnsupdaterEngineRestart stops and restarts a real dockerd (with
// live-restore, so the containers outlive it) under the updater: the
// records stay while the engine is gone; after the restart the updater
// reconnects and reconciles, a container started right after the restart
// appears, and events are followed again.
func TestMdnsupdaterEngineRestart(t *testing.T) {
	d := newDockerNS(t, "--live-restore")
	d.importBusybox(t)
	d.docker(t, "network", "create", "--subnet", fmt.Sprintf("10.77.%d.0/24", d.subnet), "wnet")
	runCtr(t, d, "keep", "keep", "weave.local")
	keepIP := d.ipOn(t, "keep", "wnet")
	cf := strings.Replace(fmt.Sprintf(updaterCorefile, d.nsIP, d.veth()), "updater docker {", "updater docker unix://"+d.sock+" {", 1)
	m := d.startMeshdns(t, cf, nil)
	addr := d.nsIP + ":1053"
	waitName(t, addr, "keep.weave.local", keepIP, 10*time.Second)

	d.dockerd.stop() // SIGTERM by PID; the container lives on
	Eventually(t, 10*time.Second, func() string {
		if _, body := m.api(t, "GET", "/status"); !strings.Contains(body, `"state":"disconnected"`) {
			return "status: " + body
		}
		return ""
	})
	time.Sleep(time.Second)
	if rc, ans, _ := rcode(addr, "keep.weave.local"); rc != "NOERROR" || len(ans) != 1 || ans[0] != keepIP {
		t.Fatalf("keep while the engine is down: %s %v", rc, ans)
	}

	d.startDockerd(t)
	runCtr(t, d, "fresh", "fresh", "weave.local")
	waitName(t, addr, "fresh.weave.local", d.ipOn(t, "fresh", "wnet"), 20*time.Second)
	Eventually(t, 20*time.Second, func() string {
		if _, body := m.api(t, "GET", "/status"); !strings.Contains(body, `"state":"connected"`) || !strings.Contains(body, `"reconnects":1`) {
			return "status: " + body
		}
		return ""
	})
	if rc, ans, _ := rcode(addr, "keep.weave.local"); rc != "NOERROR" || len(ans) != 1 || ans[0] != keepIP {
		t.Errorf("keep after the restart: %s %v", rc, ans)
	}
	// And the engine is followed again: a stop after the restart removes.
	d.docker(t, "stop", "-t", "1", "keep")
	waitName(t, addr, "keep.weave.local", "", 10*time.Second)

	// A reload that removes the updater line releases its records (nobody
	// would ever delete them); the API's stay.
	runCtr(t, d, "late", "late", "weave.local")
	waitName(t, addr, "late.weave.local", d.ipOn(t, "late", "wnet"), 10*time.Second)
	if code, body := m.api(t, "PUT", "/name/weave:extern/10.9.9.9", "-d", "domain=ext.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	i := strings.Index(cf, "        updater docker")
	j := strings.Index(cf[i:], "\n        }\n")
	if i < 0 || j < 0 {
		t.Fatalf("no updater sub-block in:\n%s", cf)
	}
	if err := os.WriteFile(filepath.Join(m.dir, "Corefile"), []byte(cf[:i]+cf[i+j+len("\n        }\n"):]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.proc.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitName(t, addr, "late.weave.local", "", 10*time.Second)
	waitName(t, addr, "ext.weave.local", "10.9.9.9", time.Second)
}

// TestMdnsupdaterLatency measures docker run → resolvable and docker stop →
// NXDOMAIN for a bounded number of containers, and reports the medians.
func TestMdnsupdaterLatency(t *testing.T) {
	const n = 10
	d := newDockerNS(t)
	d.importBusybox(t)
	d.docker(t, "network", "create", "--subnet", fmt.Sprintf("10.77.%d.0/24", d.subnet), "wnet")
	// The endpoint given in the Corefile this time (DOCKER_HOST elsewhere).
	// No mDNS interface: an unknown name would otherwise wait the mDNS
	// timeout (250 ms) before its NXDOMAIN, which is not the updater's time.
	cf := strings.Replace(fmt.Sprintf(updaterCorefile, d.nsIP, d.veth()), "updater docker {", "updater docker unix://"+d.sock+" {", 1)
	cf = strings.Replace(cf, "interface "+d.veth()+"\n", "", 1)
	m := d.startMeshdns(t, cf, []string{"DOCKER_HOST=unix:///nonexistent.sock"})
	if _, body := m.api(t, "GET", "/status"); !strings.Contains(body, `"endpoint":"unix://`+d.sock+`"`) {
		t.Fatalf("status does not show the Corefile's endpoint: %s", body)
	}
	addr := d.nsIP + ":1053"
	var up, down, runCmd, stopCmd []time.Duration
	poll := func(name string, wantUp bool, from time.Time) time.Duration {
		deadline := from.Add(10 * time.Second)
		for time.Now().Before(deadline) {
			rc, ans, err := rcode(addr, name)
			if err == nil && ((wantUp && rc == "NOERROR" && len(ans) == 1) || (!wantUp && rc == "NXDOMAIN")) {
				return time.Since(from)
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("%s: not %v after 10 s", name, wantUp)
		return 0
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("lat%d", i)
		t0 := time.Now()
		runCtr(t, d, name, name, "weave.local")
		runCmd = append(runCmd, time.Since(t0))
		up = append(up, poll(name+".weave.local", true, t0))
		t1 := time.Now()
		d.docker(t, "stop", "-t", "1", name)
		stopCmd = append(stopCmd, time.Since(t1))
		down = append(down, poll(name+".weave.local", false, t1))
	}
	var upAfter, downAfter []time.Duration // from the command's return
	for i := range up {
		upAfter = append(upAfter, up[i]-runCmd[i])
		downAfter = append(downAfter, down[i]-stopCmd[i])
	}
	report := fmt.Sprintf("containers: %d; docker run → resolvable: median %.0f ms (max %.0f; the docker run command itself %.0f ms, "+
		"resolvable %.1f ms after it returned); docker stop → NXDOMAIN: median %.0f ms (max %.0f; docker stop itself %.0f ms, "+
		"NXDOMAIN %.1f ms after it returned)",
		n, ms(median(up)), ms(maxDur(up)), ms(median(runCmd)), ms(median(upAfter)),
		ms(median(down)), ms(maxDur(down)), ms(median(stopCmd)), ms(median(downAfter)))
	t.Log(report)
	if f := os.Getenv("MESHDNS_UPDATER_REPORT"); f != "" {
		_ = os.WriteFile(f, []byte(report+"\n"), 0o644)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// TestMdnsupdaterImage builds the scratch image with build/image.sh (what
// `make image` runs) on the namespace's engine, runs it with its ports
// published, and queries the meshdns inside it from the host side. Its
// record API takes no write from outside the container: neither through
// the published port nor from another container. The same image with a
// Corefile that binds the API wider with token_file (as images/Corefile
// says) takes a write from another container that carries the token, and
// refuses one that does not.
func TestMdnsupdaterImage(t *testing.T) {
	d := newDockerNS(t)
	d.importBusybox(t)
	cmd := exec.Command(filepath.Join(repoRoot, "build", "image.sh"), "prebuilt")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+d.sock, "MESHDNS_BIN="+meshdnsBin, "IMAGE=meshdns:e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build/image.sh: %v\n%s", err, out)
	}
	if u := d.docker(t, "image", "inspect", "--format", "{{.Config.User}}", "meshdns:e2e"); u != "65532:65532" {
		t.Errorf("image user = %q, want non-root 65532:65532", u)
	}
	d.docker(t, "run", "-d", "--name", "meshdns", "-p", "1053:53/udp", "-p", "1053:53/tcp",
		"-p", "6785:6785", "-p", "8181:8181", "meshdns:e2e")
	waitReady := func(port string) {
		t.Helper()
		Eventually(t, 20*time.Second, func() string {
			resp, err := http.Get("http://" + d.nsIP + ":" + port + "/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return ""
				}
			}
			logs, _ := d.tryDocker("logs", "meshdns")
			return fmt.Sprintf("ready: %v\n%s", err, logs)
		})
	}
	waitReady("8181")
	// a write through the published port: nothing listens behind it
	req, _ := http.NewRequest("PUT", "http://"+d.nsIP+":6785/name/demo/10.32.0.5", strings.NewReader("domain=img.weave.local"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("PUT through the published API port answered %s", resp.Status)
	}
	// a write from another container to the meshdns container's address
	ip := d.ipOn(t, "meshdns", "bridge")
	put := func(target, token, name string) string {
		body := "domain=" + name
		req := "PUT /name/demo/10.32.0.6 HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\n"
		if token != "" {
			req += "Authorization: Bearer " + token + "\r\n"
		}
		req += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
		out, _ := d.tryDocker("run", "--rm", "local/busybox", "sh", "-c", fmt.Sprintf("printf '%s' | nc -w 3 %s 6785; echo nc-exit=$?", req, target))
		return out
	}
	if out := put(ip, "", "img.weave.local"); strings.Contains(out, "HTTP/1.") {
		t.Fatalf("another container wrote to the image's API:\n%s", out)
	}
	if rc, _, _ := rcode(d.nsIP+":1053", "img.weave.local"); rc != "NXDOMAIN" {
		t.Fatalf("img.weave.local after the refused writes: %s", rc)
	}
	addr := d.nsIP + ":1053"
	if rc, _, _ := rcode(addr, "nobody.weave.local"); rc != "NXDOMAIN" {
		t.Errorf("nobody.weave.local: %s", rc)
	}
	if top := d.docker(t, "top", "meshdns", "-o", "pid,uid,args"); !strings.Contains(top, "65532") {
		t.Errorf("meshdns does not run as 65532:\n%s", top)
	}

	// Exposed with a token, as images/Corefile says.
	conf := filepath.Join(d.dir, "exposed")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "images", "Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	exposed := strings.Replace(string(b), "api 127.0.0.1:6785", "api :6785\n        token_file /etc/meshdns/api-token", 1)
	if exposed == string(b) {
		t.Fatal("images/Corefile has no 'api 127.0.0.1:6785' line")
	}
	for name, content := range map[string]string{"Corefile": exposed, "api-token": "s3cret\n"} {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.docker(t, "run", "-d", "--name", "meshdns-exposed", "-p", "2053:53/udp", "-p", "2053:53/tcp", "-p", "18181:8181",
		"-v", filepath.Join(conf, "Corefile")+":/etc/meshdns/Corefile:ro", "-v", filepath.Join(conf, "api-token")+":/etc/meshdns/api-token:ro", "meshdns:e2e")
	waitReady("18181")
	ip2 := d.ipOn(t, "meshdns-exposed", "bridge")
	if out := put(ip2, "", "tok.weave.local"); !strings.Contains(out, "401") {
		t.Fatalf("a write without the token: %s", out)
	}
	if out := put(ip2, "wrong", "tok.weave.local"); !strings.Contains(out, "401") {
		t.Fatalf("a write with a wrong token: %s", out)
	}
	if out := put(ip2, "s3cret", "tok.weave.local"); !strings.Contains(out, "200 OK") {
		t.Fatalf("a write with the token: %s", out)
	}
	if got := DigShort(t, d.nsIP+":2053", "tok.weave.local", "A"); len(got) != 1 || got[0] != "10.32.0.6" {
		t.Errorf("dig tok.weave.local = %v", got)
	}
	if got := DigShort(t, d.nsIP+":2053", "+tcp", "tok.weave.local", "A"); len(got) != 1 || got[0] != "10.32.0.6" {
		t.Errorf("dig (tcp) tok.weave.local = %v", got)
	}
}
