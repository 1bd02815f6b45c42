package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 29 item 4: every interface a host has — IPv6 (ff02::fb) on links
// with no IPv4 address, peers of another IPv4 subnet on the same link,
// and an interface that appears after meshdns started.

// lanSwitch is a bridge in a namespace of its own; hosts (namespaces)
// are plugged into it one at a time, so a host's link may come after its
// meshdns. Everything goes with the namespaces when the test ends.
type lanSwitch struct {
	ns, tag string
	subnet  int
	ports   int
}

func newLANSwitch(t testing.TB) *lanSwitch {
	t.Helper()
	RequireTool(t, "ip", "iproute2")
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	seq := int(nsSeq.Add(1))
	s := &lanSwitch{tag: fmt.Sprintf("mdl%d%d", os.Getpid()%10000, seq), subnet: 100 + (os.Getpid()+seq)%150}
	s.ns = s.tag + "s"
	mustRun(t, "ip", "netns", "add", s.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", s.ns).Run() })
	mustRun(t, "ip", "-n", s.ns, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	mustRun(t, "ip", "-n", s.ns, "link", "set", "br0", "up")
	return s
}

// host makes a namespace with its loopback up and no link yet; its link
// will be named ifname.
func (s *lanSwitch) host(t testing.TB, name, ifname string) *netHost {
	t.Helper()
	h := &netHost{ns: s.tag + name, veth: ifname}
	mustRun(t, "ip", "netns", "add", h.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.ns).Run() })
	mustRun(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
	return h
}

// plug gives h its link: a veth named h.veth whose peer is a port of the
// bridge, multicast on, with the IPv4 addresses cidrs (none: an IPv6-only
// link) and a default route through gw when not empty; ipv6 false turns
// IPv6 off on the link (no link-local address).
func (s *lanSwitch) plug(t testing.TB, h *netHost, cidrs []string, gw string, ipv6 bool) {
	t.Helper()
	s.ports++
	port := fmt.Sprintf("p%d", s.ports)
	mustRun(t, "ip", "link", "add", h.veth, "netns", h.ns, "type", "veth", "peer", "name", port, "netns", s.ns)
	mustRun(t, "ip", "-n", s.ns, "link", "set", port, "master", "br0", "up")
	if !ipv6 {
		mustRun(t, "ip", "netns", "exec", h.ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/"+h.veth+"/disable_ipv6")
	}
	for _, c := range cidrs {
		mustRun(t, "ip", "-n", h.ns, "addr", "add", c, "dev", h.veth)
		if h.ip == "" {
			h.ip = strings.Split(c, "/")[0]
		}
	}
	mustRun(t, "ip", "-n", h.ns, "link", "set", h.veth, "multicast", "on", "up")
	if gw != "" {
		mustRun(t, "ip", "-n", h.ns, "route", "add", "default", "via", gw, "dev", h.veth)
	}
}

// mdnsInterfaces reads /status's mdns_interfaces as "name state
// families" lines.
func (m *nsMeshdns) mdnsInterfaces(t testing.TB) string {
	t.Helper()
	code, body := m.api(t, "GET", "/status")
	if code != 200 {
		t.Fatalf("GET /status: %d %s", code, body)
	}
	var st struct {
		Ifaces []struct {
			Name, State string
			Families    []string
		} `json:"mdns_interfaces"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("GET /status: %v: %s", err, body)
	}
	var out []string
	for _, i := range st.Ifaces {
		out = append(out, i.Name+" "+i.State+" "+strings.Join(i.Families, ","))
	}
	return strings.Join(out, "; ")
}

// waitInterfaces waits until /status says want.
func (m *nsMeshdns) waitInterfaces(t testing.TB, want string, d time.Duration) {
	t.Helper()
	Eventually(t, d, func() string {
		if got := m.mdnsInterfaces(t); got != want {
			return fmt.Sprintf("%s: mdns_interfaces %q, want %q", m.h.ns, got, want)
		}
		return ""
	})
}

func (m *nsMeshdns) put(t testing.TB, id, ip, name string) {
	t.Helper()
	if code, body := m.api(t, "PUT", "/name/"+id+"/"+ip, "-d", "domain="+name); code != 200 {
		t.Fatalf("PUT %s %s on %s: %d %s", id, ip, m.h.ns, code, body)
	}
}

// waitAnswer waits until m answers name/qtype with want (sorted, comma
// separated).
func (m *nsMeshdns) waitAnswer(t testing.TB, name, qtype, want string, d time.Duration) {
	t.Helper()
	Eventually(t, d, func() string {
		if got := sortedJoin(m.dig(t, name, qtype)); got != want {
			return fmt.Sprintf("%s: %s %s answers %q, want %q", m.h.ns, name, qtype, got, want)
		}
		return ""
	})
}

// TestMdnsfallbackIPv6Only: two hosts whose links have only their IPv6
// link-local addresses (no IPv4 at all) resolve each other's names over
// mDNS on ff02::fb — A and AAAA records alike — and /status says the
// link is joined over IPv6 only.
func TestMdnsfallbackIPv6Only(t *testing.T) {
	sw := newLANSwitch(t)
	a, b := sw.host(t, "a", "eth0"), sw.host(t, "b", "eth0")
	sw.plug(t, a, nil, "", true)
	sw.plug(t, b, nil, "", true)
	// A's names are put before B's meshdns starts (B asks for them); B's
	// after A's started (A hears them announced).
	ma := a.startMeshdns(t, "")
	ma.waitInterfaces(t, "eth0 joined ipv6", 10*time.Second) // DAD over
	ma.put(t, "ca", "fd00:77::a", "a6.weave.local")
	ma.put(t, "ca", "10.77.0.10", "a6.weave.local")
	time.Sleep(1500 * time.Millisecond) // its two announcements are over
	mb := b.startMeshdns(t, "")
	mb.waitInterfaces(t, "eth0 joined ipv6", 10*time.Second)
	mb.put(t, "cb", "fd00:77::b", "b6.weave.local")
	start := time.Now()
	mb.waitAnswer(t, "a6.weave.local", "AAAA", "fd00:77::a", 5*time.Second)
	mb.waitAnswer(t, "a6.weave.local", "A", "10.77.0.10", 5*time.Second)
	ma.waitAnswer(t, "b6.weave.local", "AAAA", "fd00:77::b", 5*time.Second)
	t.Logf("resolved both ways over IPv6 in %v", time.Since(start).Round(time.Millisecond))
}

// TestMdnsfallbackOtherSubnet: two hosts on one link in different IPv4
// subnets, each with a default route through a router of its own subnet
// (none is there), IPv6 off: each resolves the other's names, asked (the
// answer to a query) or announced. Queries carry IP TTL 255 (on the
// link); the answers go by multicast (a unicast reply to the other subnet
// would go to the router).
func TestMdnsfallbackOtherSubnet(t *testing.T) {
	sw := newLANSwitch(t)
	a, b := sw.host(t, "a", "eth0"), sw.host(t, "b", "eth0")
	sw.plug(t, a, []string{fmt.Sprintf("10.248.%d.1/24", sw.subnet)}, fmt.Sprintf("10.248.%d.254", sw.subnet), false)
	sw.plug(t, b, []string{fmt.Sprintf("10.247.%d.1/24", sw.subnet)}, fmt.Sprintf("10.247.%d.254", sw.subnet), false)
	// A's name is put before B's meshdns starts: B asks for it, and A's
	// answer must reach B's subnet. B's is put after A's started: A hears
	// it announced from B's subnet.
	ma := a.startMeshdns(t, "")
	ma.waitInterfaces(t, "eth0 joined ipv4", 5*time.Second)
	ma.put(t, "ca", "10.78.0.1", "sa.weave.local")
	time.Sleep(1500 * time.Millisecond) // its two announcements are over
	mb := b.startMeshdns(t, "")
	mb.waitInterfaces(t, "eth0 joined ipv4", 5*time.Second)
	mb.put(t, "cb", "10.78.0.2", "sb.weave.local")
	start := time.Now()
	mb.waitAnswer(t, "sa.weave.local", "A", "10.78.0.1", 5*time.Second)
	ma.waitAnswer(t, "sb.weave.local", "A", "10.78.0.2", 5*time.Second)
	t.Logf("resolved both ways across subnets in %v", time.Since(start).Round(time.Millisecond))
}

// TestMdnsfallbackInterfaceLater: meshdns started with `interface weave0`
// before weave0 exists starts, is ready, says it waits for weave0; once
// the test creates weave0 (and plugs it into the LAN), the other host
// resolves the names put before, and this one resolves the other's.
func TestMdnsfallbackInterfaceLater(t *testing.T) {
	sw := newLANSwitch(t)
	a, b := sw.host(t, "a", "weave0"), sw.host(t, "b", "eth0")
	sw.plug(t, b, []string{fmt.Sprintf("10.246.%d.2/24", sw.subnet)}, "", true)
	mb := b.startMeshdns(t, "")
	ma := a.startMeshdns(t, "") // weave0 does not exist yet
	if got := ma.mdnsInterfaces(t); got != "weave0 missing " {
		t.Fatalf("before weave0 exists: mdns_interfaces %q", got)
	}
	if !strings.Contains(ma.proc.log.String(), "Interface weave0 does not exist yet") {
		t.Fatalf("no log of the wait:\n%s", ma.proc.log.String())
	}
	ma.put(t, "ca", "10.79.0.1", "early.weave.local")
	mb.put(t, "cb", "10.79.0.2", "other.weave.local")
	sw.plug(t, a, []string{fmt.Sprintf("10.246.%d.1/24", sw.subnet)}, "", true)
	start := time.Now()
	mb.waitAnswer(t, "early.weave.local", "A", "10.79.0.1", 8*time.Second)
	took := time.Since(start)
	ma.waitAnswer(t, "other.weave.local", "A", "10.79.0.2", 5*time.Second)
	if got := ma.mdnsInterfaces(t); !strings.HasPrefix(got, "weave0 joined ipv4") {
		t.Fatalf("after weave0 came: mdns_interfaces %q", got)
	}
	t.Logf("the LAN resolved a name of the late interface %v after it was created", took.Round(time.Millisecond))
}

// TestMdnsfallbackIPv6BesideAvahi: on a link with IPv6 link-local
// addresses only, meshdns resolves a name Avahi (use-ipv6=yes,
// use-ipv4=no) publishes, and Avahi resolves a name meshdns holds: the
// two stacks speak mDNS over ff02::fb with each other.
func TestMdnsfallbackIPv6BesideAvahi(t *testing.T) {
	RequireTool(t, "avahi-publish", "avahi-utils")
	sw := newLANSwitch(t)
	a, b := sw.host(t, "a", "eth0"), sw.host(t, "b", "eth0")
	sw.plug(t, a, nil, "", true)
	sw.plug(t, b, nil, "", true)
	bus := startDBus(t)
	b.startAvahiOver(t, bus, "", "no", "yes")
	pub := startBG(t, b, bus, "avahi-publish", "-a", "-R", "av6.weave.local", "fd00:78::b")
	pub.waitLog(t, "Established", 15*time.Second)
	ma := a.startMeshdns(t, "")
	ma.waitInterfaces(t, "eth0 joined ipv6", 10*time.Second)
	ma.put(t, "ca", "fd00:78::a", "m6.weave.local")
	ma.waitAnswer(t, "av6.weave.local", "AAAA", "fd00:78::b", 8*time.Second)
	Eventually(t, 8*time.Second, func() string {
		out, err := b.exec(t, bus, "avahi-resolve", "-6", "-n", "m6.weave.local")
		if err != nil || !strings.Contains(out, "fd00:78::a") {
			return fmt.Sprintf("avahi-resolve m6.weave.local at b: %v %s", err, out)
		}
		return ""
	})
}
