package test

// Helpers for the mdnsfallback end-to-end tests: two "hosts" as network
// namespaces joined by a veth pair, a private D-Bus, avahi-daemon per
// namespace (own /run/avahi-daemon through unshare -m), and meshdns started
// inside a namespace. Everything is stopped by PID and the namespaces are
// deleted when the test ends.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var nsSeq atomic.Int32

// netHost is one network namespace with one end of the veth pair.
type netHost struct {
	ns, veth, ip string
}

// newHostPair creates two namespaces joined by a veth pair with multicast
// on, addresses 10.250.N.1/24 and 10.250.N.2/24 and a multicast route.
func newHostPair(t *testing.T) (a, b *netHost) {
	t.Helper()
	RequireTool(t, "ip", "iproute2")
	RequireTool(t, "unshare", "util-linux")
	seq := int(nsSeq.Add(1))
	tag := fmt.Sprintf("mdf%d%d", os.Getpid()%10000, seq)
	subnet := 100 + (os.Getpid()+seq)%150
	a = &netHost{ns: tag + "a", veth: tag + "a0", ip: fmt.Sprintf("10.250.%d.1", subnet)}
	b = &netHost{ns: tag + "b", veth: tag + "b0", ip: fmt.Sprintf("10.250.%d.2", subnet)}
	for _, h := range []*netHost{a, b} {
		h := h
		mustRun(t, "ip", "netns", "add", h.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.ns).Run() })
	}
	mustRun(t, "ip", "link", "add", a.veth, "netns", a.ns, "type", "veth", "peer", "name", b.veth, "netns", b.ns)
	for _, h := range []*netHost{a, b} {
		mustRun(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		mustRun(t, "ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", h.veth)
		mustRun(t, "ip", "-n", h.ns, "link", "set", h.veth, "multicast", "on", "up")
		mustRun(t, "ip", "-n", h.ns, "route", "add", "224.0.0.0/4", "dev", h.veth)
	}
	// The links settle before a test starts: each veth's IPv6 link-local
	// address ends duplicate address detection (a second or two after the
	// link is up). Otherwise IPv6 comes up on meshdns's interface while a
	// test runs, and meshdns rightly announces every record again on the
	// new link, which a test counting announcements (or starting a peer
	// once they are over) does not expect.
	for _, h := range []*netHost{a, b} {
		off, _ := exec.Command("ip", "netns", "exec", h.ns, "cat", "/proc/sys/net/ipv6/conf/"+h.veth+"/disable_ipv6").Output()
		if strings.TrimSpace(string(off)) != "0" {
			continue // no IPv6 on this machine's links: nothing to settle
		}
		Eventually(t, 10*time.Second, func() string {
			all := mustRun(t, "ip", "-n", h.ns, "-6", "addr", "show", "dev", h.veth, "scope", "link")
			tentative := mustRun(t, "ip", "-n", h.ns, "-6", "addr", "show", "dev", h.veth, "tentative")
			if !strings.Contains(all, "fe80::") || strings.TrimSpace(tentative) != "" {
				return fmt.Sprintf("%s: IPv6 link-local address not ready:\n%s", h.veth, all)
			}
			return ""
		})
	}
	return a, b
}

func mustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// exec runs a command inside the namespace and returns its output.
func (h *netHost) exec(t testing.TB, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bgProc is a background process started by a test.
type bgProc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// startBG starts name in the namespace (or on the host when h is nil) and
// stops it by PID when the test ends.
func startBG(t testing.TB, h *netHost, env []string, name string, args ...string) *bgProc {
	t.Helper()
	argv := append([]string{name}, args...)
	if h != nil {
		argv = append([]string{"ip", "netns", "exec", h.ns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := &bgProc{cmd: cmd, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", strings.Join(argv, " "), p.log.String())
		}
	})
	return p
}

// stop sends SIGTERM to the process by PID, then SIGKILL after 5 s.
func (p *bgProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	stopProcess(p.cmd, p.done, 5*time.Second)
}

func (p *bgProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitLog waits until the process printed want.
func (p *bgProc) waitLog(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() string {
		if strings.Contains(p.log.String(), want) {
			return ""
		}
		if p.exited() {
			t.Fatalf("process exited before printing %q:\n%s", want, p.log.String())
		}
		return fmt.Sprintf("no %q in:\n%s", want, p.log.String())
	})
}

// startDBus runs a private system bus and returns the environment that
// points Avahi and its tools at it.
func startDBus(t testing.TB) []string {
	t.Helper()
	RequireTool(t, "dbus-daemon", "dbus")
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	conf := `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=` + sock + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/><allow send_type="signal"/><allow send_type="method_return"/><allow send_type="error"/>
    <allow receive_type="method_call"/><allow receive_type="signal"/><allow receive_type="method_return"/><allow receive_type="error"/>
  </policy>
</busconfig>
`
	cf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startBG(t, nil, nil, "dbus-daemon", "--config-file="+cf, "--nofork")
	Eventually(t, 5*time.Second, func() string {
		if _, err := os.Stat(sock); err != nil {
			return "dbus socket not there: " + err.Error()
		}
		return ""
	})
	return []string{"DBUS_SYSTEM_BUS_ADDRESS=unix:path=" + sock}
}

// startAvahi runs avahi-daemon in the namespace on its veth only, with its
// own /run/avahi-daemon; hosts, when not empty, becomes its static hosts
// file (/etc/avahi/hosts inside its mount namespace).
func (h *netHost) startAvahi(t testing.TB, bus []string, hosts string) *bgProc {
	t.Helper()
	return h.startAvahiOver(t, bus, hosts, "yes", "no")
}

// startAvahiOver is startAvahi with its use-ipv4 and use-ipv6 settings.
func (h *netHost) startAvahiOver(t testing.TB, bus []string, hosts, ipv4, ipv6 string) *bgProc {
	t.Helper()
	RequireTool(t, "avahi-daemon", "avahi-daemon")
	dir := t.TempDir()
	conf := filepath.Join(dir, "avahi-daemon.conf")
	if err := os.WriteFile(conf, []byte(`[server]
host-name=`+h.ns+`
domain-name=local
allow-interfaces=`+h.veth+`
use-ipv4=`+ipv4+`
use-ipv6=`+ipv6+`
enable-dbus=yes
[wide-area]
enable-wide-area=no
[publish]
publish-hinfo=no
publish-workstation=no
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/avahi-daemon", 0o755); err != nil {
		t.Fatal(err)
	}
	script := "mount -t tmpfs tmpfs /run/avahi-daemon && "
	if hosts != "" {
		hf := filepath.Join(dir, "hosts")
		if err := os.WriteFile(hf, []byte(hosts), 0o644); err != nil {
			t.Fatal(err)
		}
		script += "mount --bind " + hf + " /etc/avahi/hosts && "
	}
	script += "exec avahi-daemon -f " + conf + " --no-chroot --no-drop-root --no-rlimits"
	p := startBG(t, h, bus, "unshare", "-m", "sh", "-c", script)
	p.waitLog(t, "Server startup complete", 15*time.Second)
	return p
}

// nsMeshdns is meshdns running inside a namespace on fixed loopback ports
// (the namespace's loopback is private): DNS 1053, API 6785, ready 8181,
// metrics 9153.
type nsMeshdns struct {
	h    *netHost
	dir  string
	bin  string // the binary; meshdnsBin when empty
	proc *bgProc
	args []string
}

const nsCorefile = `%s:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    mdnsfallback {
        api 127.0.0.1:6785
        interface VETH
%s    }
}
`

// startMeshdns runs meshdns in the namespace with the mdnsfallback stanza
// on its veth plus extra options, and waits until it is ready.
func (h *netHost) startMeshdns(t testing.TB, extra string) *nsMeshdns {
	t.Helper()
	return h.startMeshdnsBlock(t, "weave.local.", extra)
}

// startMeshdnsBlock is startMeshdns with the server block's zones (the
// mdnsfallback stanza keeps its default zone, weave.local.).
func (h *netHost) startMeshdnsBlock(t testing.TB, zones, extra string) *nsMeshdns {
	t.Helper()
	m := &nsMeshdns{h: h, dir: t.TempDir()}
	cf := strings.Replace(fmt.Sprintf(nsCorefile, zones, extra), "VETH", h.veth, 1)
	if err := os.WriteFile(filepath.Join(m.dir, "Corefile"), []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	return m
}

// startMeshdnsWith runs bin (meshdnsBin when "") in the namespace with
// the stanza's extra options and a snapshot holding recs (id, ip, domain),
// and waits until it is ready.
func (h *netHost) startMeshdnsWith(t testing.TB, bin, extra string, recs [][3]string) *nsMeshdns {
	t.Helper()
	m := &nsMeshdns{h: h, dir: t.TempDir(), bin: bin}
	var b strings.Builder
	b.WriteString(`{"version":1,"records":[`)
	for i, r := range recs {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%q,"ip":%q,"domain":%q}`, r[0], r[1], r[2])
	}
	b.WriteString("]}")
	if err := os.WriteFile(filepath.Join(m.dir, "records.json"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cf := strings.Replace(fmt.Sprintf(nsCorefile, "weave.local.", extra+"        snapshot records.json\n"), "VETH", h.veth, 1)
	if err := os.WriteFile(filepath.Join(m.dir, "Corefile"), []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	return m
}

func (m *nsMeshdns) start(t testing.TB) {
	t.Helper()
	bin := m.bin
	if bin == "" {
		bin = meshdnsBin
	}
	m.proc = startBG(t, m.h, nil, "sh", "-c", "cd "+m.dir+" && exec "+bin+" -conf Corefile")
	Eventually(t, 20*time.Second, func() string {
		if m.proc.exited() {
			t.Fatalf("meshdns in %s exited:\n%s", m.h.ns, m.proc.log.String())
		}
		out, err := m.h.exec(t, nil, "curl", "-sf", "http://127.0.0.1:8181/ready")
		if err != nil {
			return "not ready: " + out
		}
		return ""
	})
}

// dig runs dig inside the namespace against meshdns and returns the
// +short lines.
func (m *nsMeshdns) dig(t testing.TB, args ...string) []string {
	t.Helper()
	out, err := m.h.exec(t, nil, "dig", append([]string{"@127.0.0.1", "-p", "1053", "+time=3", "+tries=1", "+short"}, args...)...)
	if err != nil {
		t.Fatalf("dig %v in %s: %v\n%s", args, m.h.ns, err, out)
	}
	return lines(out)
}

// digStatus returns the rcode dig reports (NOERROR, NXDOMAIN, …).
func (m *nsMeshdns) digStatus(t testing.TB, args ...string) string {
	t.Helper()
	out, err := m.h.exec(t, nil, "dig", append([]string{"@127.0.0.1", "-p", "1053", "+time=3", "+tries=1"}, args...)...)
	if err != nil {
		t.Fatalf("dig %v in %s: %v\n%s", args, m.h.ns, err, out)
	}
	if i := strings.Index(out, "status: "); i >= 0 {
		return strings.TrimRight(strings.Fields(out[i+len("status: "):])[0], ",")
	}
	return out
}

// api calls the record API inside the namespace with curl and returns the
// status code and body.
func (m *nsMeshdns) api(t testing.TB, method, path string, curlArgs ...string) (int, string) {
	t.Helper()
	args := append([]string{"-s", "-X", method, "-w", "\n%{http_code}"}, curlArgs...)
	out, err := m.h.exec(t, nil, "curl", append(args, "http://127.0.0.1:6785"+path)...)
	if err != nil {
		t.Fatalf("curl %s %s: %v\n%s", method, path, err, out)
	}
	i := strings.LastIndex(out, "\n")
	code, _ := strconv.Atoi(strings.TrimSpace(out[i+1:]))
	return code, out[:i]
}

// metric reads one metric from meshdns's prometheus endpoint.
func (m *nsMeshdns) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	out, err := m.h.exec(t, nil, "curl", "-sf", "http://127.0.0.1:9153/metrics")
	if err != nil {
		t.Fatalf("metrics in %s: %v", m.h.ns, err)
	}
	return metricValue(out, name, labels...)
}

// inNetns runs f on an OS thread switched into the namespace, so sockets f
// opens in its own goroutine live there (used for timing from Go).
func inNetns(t testing.TB, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			return // leave the thread locked: it dies with the goroutine
		}
		runtime.UnlockOSThread()
	}()
	f()
}
