package test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMdnsfallbackBesideAvahi: Avahi and meshdns share port 5353 in each
// of two network namespaces ("hosts"), started in either order. On each
// host Avahi publishes 10 names and meshdns holds 10 of its own. Every
// name resolves everywhere: meshdns on B finds A's Avahi names and A's
// meshdns names over mDNS, Avahi on B resolves A's meshdns names, and
// meshdns on A finds the names of the Avahi beside it.
func TestMdnsfallbackBesideAvahi(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	RequireTool(t, "avahi-publish", "avahi-utils")
	for _, meshdnsFirst := range []bool{true, false} {
		name := "avahi-first"
		if meshdnsFirst {
			name = "meshdns-first"
		}
		t.Run(name, func(t *testing.T) {
			a, b := newHostPair(t)
			busA, busB := startDBus(t), startDBus(t)
			var ma, mb *nsMeshdns
			if meshdnsFirst {
				ma, mb = a.startMeshdns(t, ""), b.startMeshdns(t, "")
				a.startAvahi(t, busA, "")
				b.startAvahi(t, busB, "")
			} else {
				a.startAvahi(t, busA, "")
				b.startAvahi(t, busB, "")
				ma, mb = a.startMeshdns(t, ""), b.startMeshdns(t, "")
			}
			for _, h := range []struct {
				host string
				m    *nsMeshdns
				net  *netHost
				bus  []string
				oct  int
			}{{"a", ma, a, busA, 1}, {"b", mb, b, busB, 2}} {
				var pubs []*bgProc
				for i := range 10 {
					pubs = append(pubs, startBG(t, h.net, h.bus, "avahi-publish", "-a", "-R", fmt.Sprintf("av%s%d.weave.local", h.host, i), fmt.Sprintf("10.33.%d.%d", h.oct, i+1)))
				}
				for _, p := range pubs {
					p.waitLog(t, "Established", 15*time.Second)
				}
				for i := range 10 {
					if code, body := h.m.api(t, "PUT", fmt.Sprintf("/name/c%d/10.34.%d.%d", i, h.oct, i+1), "-d", fmt.Sprintf("domain=md%s%d.weave.local", h.host, i)); code != 200 {
						t.Fatalf("PUT on %s: %d %s", h.host, code, body)
					}
				}
			}
			digs := func(m *nsMeshdns, names, prefix string) {
				t.Helper()
				for i := range 10 {
					n, want := fmt.Sprintf("%s%d.weave.local", names, i), fmt.Sprintf("%s.%d", prefix, i+1)
					Eventually(t, 5*time.Second, func() string {
						if got := m.dig(t, n, "A"); strings.Join(got, ",") != want {
							return fmt.Sprintf("%s at %s: %v, want %s", n, m.h.ns, got, want)
						}
						return ""
					})
				}
			}
			digs(mb, "ava", "10.33.1") // A's Avahi, from B's meshdns
			digs(mb, "mda", "10.34.1") // A's meshdns, from B's meshdns
			digs(ma, "avb", "10.33.2") // B's Avahi, from A's meshdns
			digs(ma, "ava", "10.33.1") // the Avahi beside it
			for i := range 10 {
				n, want := fmt.Sprintf("mda%d.weave.local", i), fmt.Sprintf("10.34.1.%d", i+1)
				Eventually(t, 10*time.Second, func() string {
					out, err := b.exec(t, busB, "avahi-resolve", "-4", "-n", n)
					if err != nil || !strings.Contains(out, want) {
						return fmt.Sprintf("avahi-resolve %s at b: %v %s", n, err, out)
					}
					return ""
				})
			}
		})
	}
}

// TestMdnsfallbackInterfaceRecreated: the veth between the hosts is deleted
// and created again (a bridge that restarts: new interfaces, new indexes,
// the group memberships gone with the old ones). Without a reload, meshdns
// on A joins again: B's meshdns resolves A's names and A resolves B's.
func TestMdnsfallbackInterfaceRecreated(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	a, b := newHostPair(t)
	ma, mb := a.startMeshdns(t, ""), b.startMeshdns(t, "")
	put := func(m *nsMeshdns, id, ip, name string) {
		t.Helper()
		if code, body := m.api(t, "PUT", "/name/"+id+"/"+ip, "-d", "domain="+name); code != 200 {
			t.Fatalf("PUT: %d %s", code, body)
		}
	}
	put(ma, "c1", "10.35.1.1", "before.weave.local")
	if got := mb.dig(t, "before.weave.local", "A"); strings.Join(got, ",") != "10.35.1.1" {
		t.Fatalf("before: %v", got)
	}
	// delete the pair (deleting one end removes both) and create it again
	mustRun(t, "ip", "-n", a.ns, "link", "del", a.veth)
	time.Sleep(1500 * time.Millisecond) // meshdns sees it gone
	mustRun(t, "ip", "link", "add", a.veth, "netns", a.ns, "type", "veth", "peer", "name", b.veth, "netns", b.ns)
	for _, h := range []*netHost{a, b} {
		mustRun(t, "ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", h.veth)
		mustRun(t, "ip", "-n", h.ns, "link", "set", h.veth, "multicast", "on", "up")
		mustRun(t, "ip", "-n", h.ns, "route", "add", "224.0.0.0/4", "dev", h.veth)
	}
	put(ma, "c2", "10.35.1.2", "after.weave.local")
	put(mb, "c3", "10.35.2.3", "peer.weave.local")
	Eventually(t, 10*time.Second, func() string {
		if got := mb.dig(t, "after.weave.local", "A"); strings.Join(got, ",") != "10.35.1.2" {
			return fmt.Sprintf("B resolving A's name after the veth came back: %v", got)
		}
		if got := ma.dig(t, "peer.weave.local", "A"); strings.Join(got, ",") != "10.35.2.3" {
			return fmt.Sprintf("A resolving B's name after the veth came back: %v", got)
		}
		return ""
	})
	if n := ma.metric(t, "coredns_mdnsfallback_mdns_interface_rejoins_total"); n < 1 {
		t.Fatalf("rejoins = %v", n)
	}
	if strings.Contains(ma.proc.log.String(), "Reloading") {
		t.Fatal("a reload happened")
	}
}

// TestMdnsfallbackAvahiFirstSameHost: Avahi shares port 5353 with meshdns
// on host A, bound before it or after it, its three names published (and
// announced) before meshdns asks. meshdns sees the port shared and asks for
// multicast replies (QM): a unicast reply to the shared port would reach
// one socket only (RFC 6762 §15.1); it sends the same questions as a
// one-shot query from an ephemeral port too, which Avahi answers by
// unicast to meshdns alone (its multicast replies do not reliably loop
// back to its own host). With a cache of two entries and the three names
// asked in turn, each answer has left the cache before its name is asked
// again (Avahi's TTL of 120 s is too long to wait for): every query goes
// to the network, and every answer arrives. PTR: meshdns on B holds
// 10.32.9.9; A asks its reverse name and gets the name over mDNS.
func TestMdnsfallbackAvahiFirstSameHost(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	RequireTool(t, "avahi-publish", "avahi-utils")
	t.Run("avahi-first", func(t *testing.T) { avahiSameHost(t, true) })
	// meshdns bound first: a unicast reply to port 5353 goes to the socket
	// bound last, Avahi's, so asking QU here loses every reply.
	t.Run("meshdns-first", func(t *testing.T) { avahiSameHost(t, false) })
}

func avahiSameHost(t *testing.T, avahiFirst bool) {
	a, b := newHostPair(t)
	bus := startDBus(t)
	const stanza = "        cache 2\n        reverse 10.32.0.0/12\n"
	var ma *nsMeshdns
	if !avahiFirst {
		ma = a.startMeshdnsBlock(t, "weave.local.:1053 32.10.in-addr.arpa.", stanza)
	}
	a.startAvahi(t, bus, "")
	names := []string{"beside1.weave.local", "beside2.weave.local", "beside3.weave.local"}
	for i, n := range names {
		p := startBG(t, a, bus, "avahi-publish", "-a", "-R", n, fmt.Sprintf("10.37.0.%d", i+1))
		p.waitLog(t, "Established", 15*time.Second)
	}
	mb := b.startMeshdns(t, "")
	if code, body := mb.api(t, "PUT", "/name/cp/10.32.9.9", "-d", "domain=pt.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// Avahi announces a new record up to four times, the intervals
	// doubling from one second; B announces its record twice. meshdns on A
	// starts after all of them, so nothing but its own queries fills its
	// cache.
	time.Sleep(7 * time.Second)
	if avahiFirst {
		ma = a.startMeshdnsBlock(t, "weave.local.:1053 32.10.in-addr.arpa.", stanza)
	}
	ma.proc.waitLog(t, "shared with another mDNS stack: true", 5*time.Second)
	base := ma.metric(t, "coredns_mdnsfallback_requests_total", `result="mdns"`) // meshdns-first: what it learnt meanwhile
	const asks = 24
	for i := range asks {
		n := names[i%3]
		if got := ma.dig(t, n, "A"); strings.Join(got, ",") != fmt.Sprintf("10.37.0.%d", i%3+1) {
			t.Fatalf("query %d for %s beside Avahi: %v", i, n, got)
		}
		time.Sleep(400 * time.Millisecond) // each name asked every 1.2 s: past the limit of one query a second
	}
	if n := ma.metric(t, "coredns_mdnsfallback_requests_total", `result="mdns"`) - base; n != asks {
		t.Fatalf("%v of %d answers over mDNS: the cache answered the rest", n, asks)
	}
	if got := ma.dig(t, "-x", "10.32.9.9"); strings.Join(got, ",") != "pt.weave.local." {
		t.Fatalf("PTR of B's record, asked at A: %v", got)
	}
}
