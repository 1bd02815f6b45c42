package test

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// newBridgeHosts creates n namespaces ("hosts") whose veths are ports of
// one bridge in a namespace of its own (the "switch"), addresses
// 10.249.S.1..n/24, multicast on and a multicast route in each. Everything
// goes with the namespaces when the test ends.
func newBridgeHosts(t testing.TB, n int) []*netHost {
	t.Helper()
	RequireTool(t, "ip", "iproute2")
	seq := int(nsSeq.Add(1))
	tag := fmt.Sprintf("mdb%d%d", os.Getpid()%10000, seq)
	subnet := 100 + (os.Getpid()+seq)%150
	sw := tag + "s"
	mustRun(t, "ip", "netns", "add", sw)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", sw).Run() })
	mustRun(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	mustRun(t, "ip", "-n", sw, "link", "set", "br0", "up")
	var hosts []*netHost
	for i := 1; i <= n; i++ {
		h := &netHost{ns: fmt.Sprintf("%s%c", tag, 'a'+i-1), veth: fmt.Sprintf("%s%c0", tag, 'a'+i-1), ip: fmt.Sprintf("10.249.%d.%d", subnet, i)}
		mustRun(t, "ip", "netns", "add", h.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.ns).Run() })
		port := fmt.Sprintf("p%d", i)
		mustRun(t, "ip", "link", "add", h.veth, "netns", h.ns, "type", "veth", "peer", "name", port, "netns", sw)
		mustRun(t, "ip", "-n", sw, "link", "set", port, "master", "br0", "up")
		mustRun(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		mustRun(t, "ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", h.veth)
		mustRun(t, "ip", "-n", h.ns, "link", "set", h.veth, "multicast", "on", "up")
		mustRun(t, "ip", "-n", h.ns, "route", "add", "224.0.0.0/4", "dev", h.veth)
		hosts = append(hosts, h)
	}
	return hosts
}

func sortedJoin(s []string) string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// TestMdnsfallbackSharedName: three hosts on one bridge. A name held by
// containers on hosts A and B (B's put 1.5 s after A's, past the 1 s an
// mDNS cache-flush would spare) is asked from host C for a minute: once C
// has heard both holders, every answer holds both addresses, through the
// cache's refreshes (TTL 10 s) and after A and then B announce the name
// again; A and B answer both too. (C's first, cold lookup may end before
// the second holder's answer on a loaded machine: the collection window
// is as long again as the first answer took, by design; that answer
// enters the cache for the next lookup, which is what the warm-up waits
// for.) Deleting A's record leaves B's. A dual-stack name asked A then AAAA back to back from C gets
// both.
func TestMdnsfallbackSharedName(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	hosts := newBridgeHosts(t, 3)
	ma, mb := hosts[0].startMeshdns(t, "ttl 10s\n"), hosts[1].startMeshdns(t, "ttl 10s\n")
	put := func(m *nsMeshdns, id, ip, name string) {
		t.Helper()
		if code, body := m.api(t, "PUT", "/name/"+id+"/"+ip, "-d", "domain="+name); code != 200 {
			t.Fatalf("PUT: %d %s", code, body)
		}
	}
	put(ma, "ca", "10.36.0.1", "svc.weave.local")
	time.Sleep(1500 * time.Millisecond)
	put(mb, "cb", "10.36.0.2", "svc.weave.local")
	put(ma, "cd", "10.36.1.1", "ds.weave.local") // asked by C at the end
	put(ma, "cd", "fd00::36:1", "ds.weave.local")
	// A timeout of 1 s, not 250 ms, for a loaded machine: the lookups end
	// at the first answer's collection window, not at the timeout.
	mc := hosts[2].startMeshdns(t, "timeout 1s\n")

	const both = "10.36.0.1,10.36.0.2"
	Eventually(t, 3*time.Second, func() string {
		if got := mc.dig(t, "svc.weave.local", "A"); sortedJoin(got) != both {
			return fmt.Sprintf("C, warming up: %v, want %s", got, both)
		}
		return ""
	})
	end := time.Now().Add(time.Minute)
	reannounced := 0
	for i := 0; time.Now().Before(end); i++ {
		if got := mc.dig(t, "svc.weave.local", "A"); sortedJoin(got) != both {
			t.Fatalf("query %d from C: %v, want %s", i, got, both)
		}
		// At 20 s A announces the name again (another identifier puts the
		// same address), at 40 s B does.
		left := time.Until(end)
		if reannounced == 0 && left < 40*time.Second {
			put(ma, "ca2", "10.36.0.1", "svc.weave.local")
			reannounced++
		} else if reannounced == 1 && left < 20*time.Second {
			put(mb, "cb2", "10.36.0.2", "svc.weave.local")
			reannounced++
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The holders answer the union too: their own address and the other's.
	for _, m := range []*nsMeshdns{ma, mb} {
		Eventually(t, 3*time.Second, func() string {
			if got := m.dig(t, "svc.weave.local", "A"); sortedJoin(got) != both {
				return fmt.Sprintf("holder %s: %v, want %s", m.h.ns, got, both)
			}
			return ""
		})
	}
	for _, id := range []string{"ca", "ca2"} {
		if code, body := ma.api(t, "DELETE", "/name/"+id); code != 200 {
			t.Fatalf("DELETE: %d %s", code, body)
		}
	}
	Eventually(t, 5*time.Second, func() string {
		if got := mc.dig(t, "svc.weave.local", "A"); sortedJoin(got) != "10.36.0.2" {
			return fmt.Sprintf("after A's delete, C answers %v, want B's 10.36.0.2", got)
		}
		return ""
	})
	for range 5 {
		if got := mc.dig(t, "svc.weave.local", "A"); sortedJoin(got) != "10.36.0.2" {
			t.Fatalf("after A's delete: %v", got)
		}
	}

	// Dual stack, put on A before C started: A then AAAA back to back
	// (one dig, two questions).
	out, err := hosts[2].exec(t, nil, "dig", "@127.0.0.1", "-p", "1053", "+time=3", "+tries=1", "+short",
		"ds.weave.local", "A", "ds.weave.local", "AAAA")
	if err != nil {
		t.Fatalf("dig: %v %s", err, out)
	}
	if got := strings.Join(lines(out), ","); got != "10.36.1.1,fd00::36:1" {
		t.Fatalf("dual-stack name from C: %q, want 10.36.1.1 then fd00::36:1", got)
	}
}
