package test

// `meshdns -node-local-setup` (internal/nodelocal) in two network
// namespaces the test creates: a "node" with a kube-proxy stand-in (an
// iptables-nft DNAT of 10.96.0.10:53 to a "replica" meshdns on the node's
// veth address, port 5353) and a "pod" routed through it. A query from the
// pod reaches the node-local meshdns bound to 10.96.0.10 untracked while
// that meshdns runs, and the replica through the DNAT, tracked, whenever it
// does not: before it starts, after it is killed (from the very source port
// whose queries it answered a moment before), and while another server
// listens on the wildcard address.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/internal/nodelocal"
)

const (
	nlClusterDNS = "10.96.0.10"
	nlLinkLocal  = "169.254.20.10"
	nlName       = "who.test."
	nlNodeLocal  = "192.0.2.1" // who.test as the node-local answers it
	nlReplica    = "192.0.2.2" // … as the replica behind the DNAT answers it
	nlWildcard   = "192.0.2.3" // … as a server on the wildcard address answers it
	nlClientPort = 40053       // the pod's fixed UDP source port
)

// nsDo runs f on a thread in the named network namespace, so that the
// sockets f creates live there. The thread is never unlocked: it ends with
// the goroutine instead of going back to the pool in the wrong namespace.
func nsDo(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// nlPod is the pod side: a UDP socket on a fixed source port.
type nlPod struct {
	ns  string
	udp *net.UDPConn
}

// askUDP asks server:53 for who.test from the pod's fixed port and returns
// the address answered.
func (p *nlPod) askUDP(server string) (string, error) {
	m := new(dns.Msg)
	m.SetQuestion(nlName, dns.TypeA)
	b, _ := m.Pack()
	if _, err := p.udp.WriteToUDP(b, &net.UDPAddr{IP: net.ParseIP(server), Port: 53}); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	_ = p.udp.SetReadDeadline(time.Now().Add(time.Second))
	for {
		n, from, err := p.udp.ReadFromUDP(buf)
		if err != nil {
			return "", err
		}
		r := new(dns.Msg)
		if r.Unpack(buf[:n]) != nil || r.Id != m.Id {
			continue // a late answer to an earlier question
		}
		if from.IP.String() != server || from.Port != 53 {
			return "", fmt.Errorf("answer from %v", from)
		}
		return firstA(r)
	}
}

// askTCP asks server:53 for who.test over a new TCP connection from the pod.
func (p *nlPod) askTCP(server string) (string, error) {
	var r *dns.Msg
	err := nsDo(p.ns, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(server, "53"), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		m := new(dns.Msg)
		m.SetQuestion(nlName, dns.TypeA)
		dc := &dns.Conn{Conn: c}
		if err := dc.WriteMsg(m); err != nil {
			return err
		}
		r, err = dc.ReadMsg()
		return err
	})
	if err != nil {
		return "", err
	}
	return firstA(r)
}

func firstA(r *dns.Msg) (string, error) {
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", fmt.Errorf("no A record: %v", r)
}

// nlNode is the node side and what runs there.
type nlNode struct {
	host *netHost
	dir  string
}

// startServer runs a meshdns in the node namespace answering who.test with
// addr, on listen ("host:port" of the server block and bind).
func (n *nlNode) startServer(t *testing.T, name, bind string, port int, addr string) *bgProc {
	t.Helper()
	bindLine := ""
	if bind != "" {
		bindLine = "bind " + bind
	}
	conf := filepath.Join(n.dir, name+".Corefile")
	corefile := fmt.Sprintf(".:%d {\n    %s\n    hosts {\n        %s %s\n    }\n}\n", port, bindLine, addr, nlName)
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBG(t, n.host, nil, meshdnsBin, "-conf", conf)
	p.waitLog(t, "CoreDNS-", 10*time.Second)
	return p
}

// conntrackDNS returns the node's conntrack entries that name the cluster
// DNS address (either direction).
func (n *nlNode) conntrackDNS(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, proto := range []string{"udp", "tcp"} {
		text, _ := n.host.exec(t, nil, "conntrack", "-L", "-p", proto)
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, nlClusterDNS) {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return out
}

// counters returns the bypass rules' packet counts by rule text.
func (n *nlNode) counters(t *testing.T) map[string]uint64 {
	t.Helper()
	f, err := os.Open("/run/netns/" + n.host.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules, err := nodelocal.Host{NetNS: int(f.Fd())}.Counters()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, r := range rules {
		out[r.Rule] = r.Packets
	}
	return out
}

// newNodeLocalNetns builds the two namespaces, the DNAT and the replica.
func newNodeLocalNetns(t *testing.T) (*nlNode, *nlPod) {
	t.Helper()
	RequireTool(t, "iptables", "iptables")
	RequireTool(t, "conntrack", "conntrack")
	node, pod := newHostPair(t)
	mustRun(t, "ip", "-n", pod.ns, "route", "add", "default", "via", node.ip, "dev", pod.veth)
	n := &nlNode{host: node, dir: t.TempDir()}
	for _, proto := range []string{"udp", "tcp"} {
		out, err := node.exec(t, nil, "iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-d", nlClusterDNS+"/32", "-p", proto,
			"--dport", "53", "-j", "DNAT", "--to-destination", node.ip+":5353")
		if err != nil {
			t.Fatalf("the DNAT of the kube-proxy stand-in: %v\n%s", err, out)
		}
	}
	n.startServer(t, "replica", node.ip, 5353, nlReplica)
	p := &nlPod{ns: pod.ns}
	if err := nsDo(pod.ns, func() (err error) {
		p.udp, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(pod.ip), Port: nlClientPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.udp.Close() })
	return n, p
}

// wantAnswers asks over UDP (the fixed port) and TCP and checks who answered.
func wantAnswers(t *testing.T, p *nlPod, server, want, when string) {
	t.Helper()
	for proto, ask := range map[string]func(string) (string, error){"udp": p.askUDP, "tcp": p.askTCP} {
		got, err := ask(server)
		if err != nil || got != want {
			t.Errorf("%s, %s to %s: answered %q (%v), want %s", when, proto, server, got, err, want)
		}
	}
}

func TestNodeLocalSetupNetns(t *testing.T) {
	n, pod := newNodeLocalNetns(t)
	setup := func(addrs string) string {
		out, err := n.host.exec(t, nil, meshdnsBin, "-node-local-setup", addrs)
		if err != nil {
			t.Fatalf("meshdns -node-local-setup %s: %v\n%s", addrs, err, out)
		}
		return out
	}
	first := setup(nlLinkLocal + "," + nlClusterDNS)
	again := setup(nlLinkLocal + "," + nlClusterDNS)
	if !strings.Contains(first, nlClusterDNS+"/32 added to lo") || !strings.Contains(again, nlClusterDNS+"/32 already on lo") {
		t.Errorf("setup output, first:\n%s\nsecond:\n%s", first, again)
	}
	if c := n.counters(t); len(c) != 8 {
		t.Fatalf("after two runs, %d rules, want 8 (2 addresses x udp, tcp x prerouting, output): %v", len(c), c)
	}
	// an address dropped from the list leaves lo and the bypass; then back
	fewer := setup(nlLinkLocal)
	lo, _ := n.host.exec(t, nil, "ip", "-4", "addr", "show", "dev", "lo")
	if !strings.Contains(fewer, nlClusterDNS+"/32 removed from lo") || strings.Contains(lo, nlClusterDNS+"/") || !strings.Contains(lo, nlLinkLocal+"/") {
		t.Errorf("setup without %s: output\n%s\nlo:\n%s", nlClusterDNS, fewer, lo)
	}
	if c := n.counters(t); len(c) != 4 {
		t.Errorf("with one address, %d rules, want 4: %v", len(c), c)
	}
	if back := setup(nlLinkLocal + "," + nlClusterDNS); !strings.Contains(back, nlClusterDNS+"/32 added to lo") {
		t.Errorf("setup with %s again:\n%s", nlClusterDNS, back)
	}
	preUDP := fmt.Sprintf("ip %s prerouting: ip daddr %s udp dport 53 xt match socket counter notrack", nodelocal.TableName, nlClusterDNS)
	preTCP := strings.Replace(preUDP, "udp", "tcp", 1)

	wantAnswers(t, pod, nlClusterDNS, nlReplica, "no node-local yet")
	if ct := n.conntrackDNS(t); len(ct) == 0 {
		t.Errorf("no node-local: the queries to %s left no conntrack entry (they should be tracked and DNATed)", nlClusterDNS)
	}
	for rule, pkts := range n.counters(t) {
		if strings.Contains(rule, "prerouting") && pkts != 0 {
			t.Errorf("no node-local: %s matched %d packets", rule, pkts)
		}
	}

	local := n.startServer(t, "nodelocal", nlLinkLocal+" "+nlClusterDNS, 53, nlNodeLocal)
	n.host.exec(t, nil, "conntrack", "-F")
	wantAnswers(t, pod, nlClusterDNS, nlNodeLocal, "node-local running")
	wantAnswers(t, pod, nlLinkLocal, nlNodeLocal, "node-local running")
	if ct := n.conntrackDNS(t); len(ct) != 0 {
		t.Errorf("node-local running: conntrack entries for %s (want none, either way):\n%s", nlClusterDNS, strings.Join(ct, "\n"))
	}
	c := n.counters(t)
	t.Logf("counters with the node-local running: %v", c)
	if c[preUDP] == 0 || c[preTCP] < 3 {
		t.Errorf("node-local running: the bypass counted too few packets: %v", c)
	}

	local.cmd.Process.Signal(syscall.SIGKILL)
	<-local.done
	wantAnswers(t, pod, nlClusterDNS, nlReplica, "node-local killed (same UDP source port)")

	wild := n.startServer(t, "wildcard", "", 53, nlWildcard)
	wantAnswers(t, pod, nlClusterDNS, nlReplica, "a server on *:53, no node-local")
	wild.stop()

	checkTeardown(t, n)
}

// checkTeardown removes the addresses and rules (as the harness does) and
// checks that nothing is left, and that a second teardown is no error.
func checkTeardown(t *testing.T, n *nlNode) {
	t.Helper()
	f, err := os.Open("/run/netns/" + n.host.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addrs := []netip.Addr{netip.MustParseAddr(nlLinkLocal), netip.MustParseAddr(nlClusterDNS)}
	if err := (nodelocal.Host{NetNS: int(f.Fd())}).Teardown(addrs); err != nil {
		t.Fatal(err)
	}
	if c := n.counters(t); len(c) != 0 {
		t.Errorf("after teardown, rules remain: %v", c)
	}
	if lo, _ := n.host.exec(t, nil, "ip", "-4", "addr", "show", "dev", "lo"); strings.Contains(lo, nlClusterDNS) || strings.Contains(lo, nlLinkLocal) {
		t.Errorf("after teardown, lo still has an address:\n%s", lo)
	}
	if err := (nodelocal.Host{NetNS: int(f.Fd())}).Teardown(addrs); err != nil {
		t.Errorf("a second teardown: %v", err)
	}
}
