package test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Options says how Start runs the binary. The zero value is fine.
type Options struct {
	// Dir is the working directory (data paths in the Corefile are relative
	// to it). Default: a new temporary directory.
	Dir string
	// Files are written into Dir (name relative to Dir → content) before start.
	Files map[string]string
	// Ports pre-assigns the rewrite of Corefile ports (original → actual),
	// e.g. to point a forward at a port another test server already uses.
	// Ports not listed get a free loopback port.
	Ports map[int]int
	// Env is added to the binary's environment.
	Env []string
	// WaitDNS waits for the first server port to answer any DNS reply
	// instead of waiting on the ready endpoint.
	WaitDNS bool
	// NoWait returns right after the process started.
	NoWait bool
	// Bin is the binary to run instead of meshdns (stock CoreDNS for a
	// differential); it takes the same -conf and -dns.port flags.
	Bin string
}

// Server is one running meshdns process started by a test.
type Server struct {
	t        testing.TB
	Dir      string
	Corefile string // the Corefile as written, with ports rewritten
	opts     Options
	ports    map[int]int
	order    []int // original ports in order of first appearance
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	log      *syncBuffer
}

// portRE matches a ":PORT" that follows a host, an address or a zone name in a
// Corefile (127.0.0.1:1053, .:1053, consul.:1053, [::1]:53, dns://.:53).
var portRE = regexp.MustCompile(`([0-9A-Za-z.\]]):(\d{2,5})\b`)

// Start runs meshdns with corefile, every port in it rewritten to a free
// loopback port, and waits until it is ready. It stops the process by PID when
// the test ends and prints its log when the test failed.
func Start(t testing.TB, corefile string, opts ...Options) *Server {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	for name, content := range o.Files {
		p := filepath.Join(o.Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{t: t, Dir: o.Dir, opts: o, ports: map[int]int{}}
	for k, v := range o.Ports {
		s.ports[k] = v
	}
	s.Corefile = s.rewrite(corefile)
	if _, ok := s.ports[53]; !ok {
		s.ports[53] = freePort(t)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "Corefile.e2e"), []byte(s.Corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("meshdns log (%s):\n%s", s.Dir, s.Log())
		}
	})
	s.start()
	return s
}

// rewrite maps every port of the Corefile onto a free loopback port.
func (s *Server) rewrite(corefile string) string {
	return portRE.ReplaceAllStringFunc(corefile, func(m string) string {
		sub := portRE.FindStringSubmatch(m)
		orig, _ := strconv.Atoi(sub[2])
		if _, ok := s.ports[orig]; !ok {
			s.ports[orig] = freePort(s.t)
		}
		s.noteOrder(orig)
		return sub[1] + ":" + strconv.Itoa(s.ports[orig])
	})
}

func (s *Server) noteOrder(p int) {
	for _, q := range s.order {
		if q == p {
			return
		}
	}
	s.order = append(s.order, p)
}

func (s *Server) start() {
	t := s.t
	t.Helper()
	s.mu.Lock()
	s.log = &syncBuffer{}
	bin := meshdnsBin
	if s.opts.Bin != "" {
		bin = s.opts.Bin
	}
	cmd := exec.Command(bin, "-conf", filepath.Join(s.Dir, "Corefile.e2e"), "-dns.port", strconv.Itoa(s.ports[53]))
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.opts.Env...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		t.Fatalf("starting meshdns: %v", err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	done := s.done
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Unlock()
	if !s.opts.NoWait {
		s.waitReady()
	}
}

// Restart stops the process and starts it again with the same Corefile,
// ports and directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Stop sends SIGTERM to the process (by PID), waits up to 5s, then SIGKILL.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	stopProcess(cmd, done, 5*time.Second)
}

// stopProcess ends a process the test started: SIGTERM to its PID, then
// SIGKILL when it has not exited (done closed) within grace.
func stopProcess(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Signal sends sig to the running process (e.g. SIGUSR1 to reload).
func (s *Server) Signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Exited reports whether the process has ended.
func (s *Server) Exited() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// PID is the process's PID.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// Log returns what the process printed so far.
func (s *Server) Log() string { return s.log.String() }

// Port returns the free port that replaced orig in the Corefile.
func (s *Server) Port(orig int) int {
	p, ok := s.ports[orig]
	if !ok {
		s.t.Fatalf("port %d is not in the Corefile", orig)
	}
	return p
}

// Ports returns the whole rewrite (original → actual).
func (s *Server) Ports() map[int]int {
	out := make(map[int]int, len(s.ports))
	for k, v := range s.ports {
		out[k] = v
	}
	return out
}

// Addr returns "127.0.0.1:<port that replaced orig>".
func (s *Server) Addr(orig int) string { return "127.0.0.1:" + strconv.Itoa(s.Port(orig)) }

// DNS returns the address of the first server block's port.
func (s *Server) DNS() string {
	for _, p := range s.order {
		if s.isServerPort(p) {
			return s.Addr(p)
		}
	}
	return s.Addr(53)
}

// isServerPort reports whether orig appears as a server block key's port.
func (s *Server) isServerPort(orig int) bool {
	re := regexp.MustCompile(`(?m)^\s*[^#\s]*:` + strconv.Itoa(s.ports[orig]) + `\b[^\n]*\{`)
	return re.MatchString(s.Corefile)
}

// directiveAddr returns the address argument of the first line that starts
// with directive (e.g. "ready", "prometheus"), or "".
func (s *Server) directiveAddr(directive string) string {
	re := regexp.MustCompile(`(?m)^\s*` + directive + `\s+(\S+:\d+)`)
	m := re.FindStringSubmatch(s.Corefile)
	if m == nil {
		return ""
	}
	return strings.Replace(m[1], "localhost", "127.0.0.1", 1)
}

func (s *Server) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	s.waitServing(deadline)
	// inspect's listener opens in its OnStartup, before the DNS servers;
	// a make test under load once found it refusing right after the DNS
	// probe answered, so a test's first listing waits for it here, within
	// the same start-up deadline.
	if addr := s.directiveAddr("inspect"); addr != "" {
		for {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("inspect %s not listening after 30s: %v\n%s", addr, err, s.Log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitServing waits until meshdns answers: ready's 200 when the Corefile
// has ready (unless WaitDNS), else any DNS answer.
func (s *Server) waitServing(deadline time.Time) {
	t := s.t
	t.Helper()
	ready := s.directiveAddr("ready")
	for time.Now().Before(deadline) {
		if s.Exited() {
			t.Fatalf("meshdns exited during start-up:\n%s", s.Log())
		}
		if ready != "" && !s.opts.WaitDNS {
			resp, err := http.Get("http://" + ready + "/ready")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		} else {
			c := dns.Client{Timeout: 200 * time.Millisecond}
			m := new(dns.Msg)
			m.SetQuestion("meshdns-start-probe.invalid.", dns.TypeA)
			if _, _, err := c.Exchange(m, s.DNS()); err == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("meshdns not ready after 30s:\n%s", s.Log())
}

// Metrics returns the Prometheus text from the Corefile's prometheus address.
func (s *Server) Metrics() string {
	s.t.Helper()
	addr := s.directiveAddr("prometheus")
	if addr == "" {
		s.t.Fatal("the Corefile has no prometheus address")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		s.t.Fatalf("fetching metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Metric returns the sum of the samples of metric name whose label set
// contains every one of labels (each like `result="hit"`); 0 when none.
func (s *Server) Metric(name string, labels ...string) float64 {
	s.t.Helper()
	return metricValue(s.Metrics(), name, labels...)
}

func metricValue(text, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// Query sends one question over proto ("udp" or "tcp") with miekg/dns.
func Query(t testing.TB, addr, name string, qtype uint16, proto string) *dns.Msg {
	t.Helper()
	r, err := TryQuery(addr, name, qtype, proto)
	if err != nil {
		t.Fatalf("query %s %s over %s to %s: %v", name, dns.TypeToString[qtype], proto, addr, err)
	}
	return r
}

// TryQuery is Query returning the error instead of failing the test.
func TryQuery(addr, name string, qtype uint16, proto string) (*dns.Msg, error) {
	c := dns.Client{Net: proto, Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(4096, false)
	r, _, err := c.Exchange(m, addr)
	return r, err
}

// Rdata returns each answer record's data (what follows the type), sorted.
func Rdata(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		out = append(out, rrData(rr))
	}
	sort.Strings(out)
	return out
}

func rrData(rr dns.RR) string {
	h := rr.Header().String()
	return strings.TrimSpace(strings.TrimPrefix(rr.String(), h))
}

// RequireTool fails the test (never skips) when a peer binary is missing.
func RequireTool(t testing.TB, tool, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s is not installed: run build/install-deps.sh (apt-get install -y %s)", tool, debianPackage)
	}
	return p
}

// peerTool returns the path of a real peer built from Go modules (consul,
// kube-apiserver, etcd) by build/peer-tools.sh, which builds it once per
// machine (a cold build takes minutes; a cached one nothing). A failed build
// fails the test.
func peerTool(t testing.TB, tool string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot, "build", "peer-tools.sh"), tool)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s is not available: build/peer-tools.sh %s: %v\n%s", tool, tool, err, errb.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if p, ok := strings.CutPrefix(l, tool+"="); ok {
			return p
		}
	}
	t.Fatalf("build/peer-tools.sh %s printed no path: %q", tool, out.String())
	return ""
}

// Dig runs the real dig against addr ("host:port") and returns its output.
func Dig(t testing.TB, addr string, args ...string) string {
	t.Helper()
	RequireTool(t, "dig", "dnsutils")
	host, port, _ := net.SplitHostPort(addr)
	full := append([]string{"@" + host, "-p", port, "+time=3", "+tries=1"}, args...)
	return runTool(t, "dig", full...)
}

// DigShort is Dig with +short, returning the non-empty output lines, sorted.
func DigShort(t testing.TB, addr string, args ...string) []string {
	t.Helper()
	return lines(Dig(t, addr, append([]string{"+short"}, args...)...))
}

// Kdig runs the real kdig (Knot) against addr and returns its output.
func Kdig(t testing.TB, addr string, args ...string) string {
	t.Helper()
	RequireTool(t, "kdig", "knot-dnsutils")
	host, port, _ := net.SplitHostPort(addr)
	full := append([]string{"@" + host, "-p", port, "+time=3", "+retry=0"}, args...)
	return runTool(t, "kdig", full...)
}

// KdigShort is Kdig with +short, returning the non-empty output lines, sorted.
func KdigShort(t testing.TB, addr string, args ...string) []string {
	t.Helper()
	return lines(Kdig(t, addr, append([]string{"+short"}, args...)...))
}

func runTool(t testing.TB, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", tool, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, ";") {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// Eventually retries cond every 50ms until it returns "" or timeout passes,
// then fails with the last message.
func Eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var msg string
	for {
		if msg = cond(); msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a loopback port free for both TCP and UDP right now,
// drawn from [20000, 30000): below the kernel's ephemeral range (32768+
// here), where an outgoing connection of a busy machine can take a port
// between this check and the process's bind (TestReplicaPrivate's leader
// port was seen refused so, beside a fleet benchmark), and below
// Kubernetes' NodePort range (30000-32767, which the one-node cluster's
// kube-proxy serves on loopback too).
func freePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(10000)))
		if err != nil {
			continue // taken
		}
		p := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err == nil {
			u.Close()
			if handOut(p) {
				return p
			}
		}
	}
	t.Fatal("no free loopback port")
	return 0
}

// handedOut holds every port freePort returned: the kernel may give a port
// that was closed again to the next bind of port 0, and two listeners of one
// Corefile (DNS and health) on one port fail start-up or answers.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// handOut records p and reports whether it was not handed out before.
func handOut(p int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[p] {
		return false
	}
	handedOut.ports[p] = true
	return true
}

// CopyDir copies the directory tree src into dst (used to run the example
// Corefiles on a private copy of their data).
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for the process's writes and our reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
