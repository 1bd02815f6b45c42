package test

// Helpers for the container updater and image tests: a real dockerd in a
// network namespace the test creates (joined to the host by a veth pair),
// a busybox image imported from Debian's static busybox, a unix socket
// proxy in front of the engine that the test can cut, and meshdns inside
// the namespace. Everything is stopped by PID and removed at the end.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dockerNS is a network namespace running its own dockerd.
type dockerNS struct {
	ns       string
	hostIP   string // the root namespace's end of the veth pair
	nsIP     string // the namespace's end
	subnet   int    // S of 10.253.S.0/24, also used for container networks
	dir      string // data-root, exec-root, socket, pidfile
	sock     string
	dockerd  *bgProc
	stopOnce sync.Once
	flags    []string // extra dockerd flags
}

// newDockerNS creates the namespace and the veth pair and starts dockerd in
// it with the PEERS.md recipe; it waits for _ping.
func newDockerNS(t *testing.T, dockerdFlags ...string) *dockerNS {
	t.Helper()
	RequireTool(t, "ip", "iproute2")
	RequireTool(t, "nsenter", "util-linux")
	RequireTool(t, "dockerd", "docker.io")
	RequireTool(t, "docker", "docker.io")
	RequireTool(t, "busybox", "busybox-static")
	seq := int(nsSeq.Add(1))
	d := &dockerNS{ns: fmt.Sprintf("mdu%d%d", os.Getpid()%10000, seq), flags: dockerdFlags}
	d.subnet = 10 + (os.Getpid()+seq*7)%200
	d.hostIP = fmt.Sprintf("10.253.%d.1", d.subnet)
	d.nsIP = fmt.Sprintf("10.253.%d.2", d.subnet)
	dir, err := os.MkdirTemp("", "mdu-docker-")
	if err != nil {
		t.Fatal(err)
	}
	d.dir, d.sock = dir, filepath.Join(dir, "docker.sock")
	// Cleanups run last-in first-out: containers, dockerd (and what it
	// left), the namespace, the directory.
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	mustRun(t, "ip", "netns", "add", d.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", d.ns).Run() })
	veth := d.ns + "h"
	mustRun(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", d.ns+"n", "netns", d.ns)
	mustRun(t, "ip", "addr", "add", d.hostIP+"/24", "dev", veth)
	mustRun(t, "ip", "link", "set", veth, "up")
	mustRun(t, "ip", "-n", d.ns, "link", "set", "lo", "up")
	mustRun(t, "ip", "-n", d.ns, "addr", "add", d.nsIP+"/24", "dev", d.ns+"n")
	mustRun(t, "ip", "-n", d.ns, "link", "set", d.ns+"n", "multicast", "on", "up")
	mustRun(t, "ip", "-n", d.ns, "route", "add", "224.0.0.0/4", "dev", d.ns+"n")
	t.Cleanup(func() { d.stopDockerd(t) })
	d.startDockerd(t)
	return d
}

// veth is the namespace's end of the veth pair (meshdns speaks mDNS on it).
func (d *dockerNS) veth() string { return d.ns + "n" }

func (d *dockerNS) startDockerd(t *testing.T) {
	t.Helper()
	args := append([]string{"--net=/run/netns/" + d.ns, "dockerd",
		"--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "exec"),
		"-H", "unix://" + d.sock, "--pidfile", filepath.Join(d.dir, "dockerd.pid"),
		"--bip", fmt.Sprintf("172.29.%d.1/24", d.subnet)}, d.flags...)
	d.dockerd = startBG(t, nil, nil, "nsenter", args...)
	// Runs before this dockerd's own stop (cleanups are LIFO), also after a
	// restart, so no container outlives the test (live-restore keeps them).
	t.Cleanup(func() { d.removeContainers(t) })
	Eventually(t, 30*time.Second, func() string {
		if d.dockerd.exited() {
			t.Fatalf("dockerd exited:\n%s", d.dockerd.log.String())
		}
		if err := d.ping(); err != nil {
			return "dockerd not answering _ping: " + err.Error()
		}
		return ""
	})
}

// ping calls the engine's _ping over its socket.
func (d *dockerNS) ping() error {
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", d.sock)
		},
	}}
	resp, err := c.Get("http://docker/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// stopDockerd stops dockerd by PID and then, by PID, the containerd and
// shims it started (found by our private exec-root in their command line).
func (d *dockerNS) stopDockerd(t *testing.T) {
	d.stopOnce.Do(func() {
		d.dockerd.stop()
		deadline := time.Now().Add(5 * time.Second)
		for {
			pids := procsMentioning(d.dir)
			if len(pids) == 0 {
				break
			}
			sig := syscall.SIGTERM
			if time.Now().After(deadline) {
				sig = syscall.SIGKILL
			}
			for _, p := range pids {
				_ = syscall.Kill(p, sig)
			}
			if sig == syscall.SIGKILL {
				time.Sleep(200 * time.Millisecond)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		d.unmountLeftovers()
	})
}

// unmountLeftovers lazily unmounts whatever an interrupted dockerd left
// mounted under our directory, deepest first, so it can be removed.
func (d *dockerNS) unmountLeftovers() {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var mounts []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], d.dir+"/") {
			mounts = append(mounts, f[1])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

// procsMentioning returns the PIDs whose command line holds s.
func procsMentioning(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, pid)
		}
	}
	return out
}

// removeContainers kills every container at once, so dockerd's shutdown
// does not wait on their stop timeouts.
func (d *dockerNS) removeContainers(t *testing.T) {
	if d.dockerd.exited() {
		return
	}
	out, err := d.tryDocker("ps", "-aq")
	if err != nil || strings.TrimSpace(out) == "" {
		return
	}
	_, _ = d.tryDocker(append([]string{"rm", "-f"}, strings.Fields(out)...)...)
}

// tryDocker runs the docker CLI against this engine.
func (d *dockerNS) tryDocker(args ...string) (string, error) {
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+d.sock)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// docker runs the docker CLI and fails the test on error.
func (d *dockerNS) docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := d.tryDocker(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// importBusybox makes the image local/busybox from the static busybox
// (no registry is reachable).
func (d *dockerNS) importBusybox(t testing.TB) {
	t.Helper()
	root := filepath.Join(d.dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, "cp", bb, filepath.Join(root, "bin", "busybox"))
	for _, a := range []string{"sh", "sleep", "nc", "httpd", "mkdir", "echo", "cat", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", "tar -C "+root+" -c . | docker import - local/busybox")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+d.sock)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
}

// ipOn returns the container's IPv4 address on network.
func (d *dockerNS) ipOn(t testing.TB, name, network string) string {
	t.Helper()
	return d.docker(t, "inspect", "--format", "{{(index .NetworkSettings.Networks \""+network+"\").IPAddress}}", name)
}

// sockProxy forwards a unix socket to the engine's; cut breaks every
// connection and refuses new ones until restore.
type sockProxy struct {
	path   string
	target string
	ln     net.Listener
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newSockProxy(t *testing.T, path, target string) *sockProxy {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &sockProxy{path: path, target: target, ln: ln, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *sockProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("unix", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, up); up.Close(); c.Close() }()
	}
}

// cut closes every proxied connection and refuses new ones.
func (p *sockProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *sockProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// startMeshdnsEnv runs meshdns inside the namespace with corefile and extra
// environment, and waits until it is ready (ready on 127.0.0.1:8181 of the
// namespace).
func (d *dockerNS) startMeshdns(t *testing.T, corefile string, env []string) *nsMeshdns {
	t.Helper()
	h := &netHost{ns: d.ns}
	m := &nsMeshdns{h: h, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(m.dir, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	m.proc = startBG(t, h, env, "sh", "-c", "cd "+m.dir+" && exec "+meshdnsBin+" -conf Corefile")
	Eventually(t, 20*time.Second, func() string {
		if m.proc.exited() {
			t.Fatalf("meshdns in %s exited:\n%s", d.ns, m.proc.log.String())
		}
		if out, err := h.exec(t, nil, "curl", "-sf", "http://127.0.0.1:8181/ready"); err != nil {
			return "not ready: " + out
		}
		return ""
	})
	return m
}

// rcode asks addr for name A and returns the rcode name and the answers.
func rcode(addr, name string) (string, []string, error) {
	r, err := TryQuery(addr, name, 1, "udp")
	if err != nil {
		return "", nil, err
	}
	return rcodeName(r.Rcode), Rdata(r), nil
}

func rcodeName(rc int) string {
	switch rc {
	case 0:
		return "NOERROR"
	case 3:
		return "NXDOMAIN"
	case 2:
		return "SERVFAIL"
	}
	return strconv.Itoa(rc)
}
