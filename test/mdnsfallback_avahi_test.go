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
