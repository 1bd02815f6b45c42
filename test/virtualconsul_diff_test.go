package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// vcDiffCorefile follows a real Consul agent (8500 → its HTTP port) in a
// datacenter of its own, with no datacenter option: short names must
// expand with the agent's. authoritative: a name not in the table is
// NXDOMAIN at once, so that while the agent is frozen no query waits on it.
const vcDiffCorefile = `consul.:1053 {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    inspect 127.0.0.1:8182
    virtualconsul {
        source consul 127.0.0.1:8500
        snapshot vc-snapshot.json
        authoritative
    }
    forward . 127.0.0.1:8600
}
`

// vcDiffSeeds are the seeds of the normal suite; MESHDNS_VC_DIFF_SEEDS=n
// runs n more (from 100, or MESHDNS_VC_DIFF_FIRST), MESHDNS_VC_DIFF_SEED=s
// seed s alone. A seed that failed becomes a named case here: seed 1 once
// caught a terminating gateway whose catalog entry still held a service
// unlinked since (written back by the agent), whose VIP Consul had freed.
var vcDiffSeeds = []int64{1, 2, 3}

// TestVirtualConsulConsulGenerated is the differential test against
// Consul's own DNS on generated catalogs: a seeded generator registers, on
// a real Consul v1.16.3 agent in datacenter dc2, services with
// transparent-proxy sidecars, Connect-native services, plain services, a
// terminating gateway with linked (and never registered) services, then
// deregisters, registers again, removes sidecars alone, links and unlinks.
// After every phase, for every service, meshdns answers A and AAAA for the
// short, the datacenter and the full form exactly as Consul's DNS answers
// the short one; with the agent frozen (SIGSTOP) it answers the same from
// its table, and again after a restart during the freeze (from the
// snapshot).
func TestVirtualConsulConsulGenerated(t *testing.T) {
	for _, seed := range envSeeds(t, "MESHDNS_VC_DIFF", vcDiffSeeds) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { vcDiffSeed(t, seed) })
	}
}

// vcDiffStart starts a Consul agent in datacenter dc with seed's generated
// catalog (a sidecar service warm, a terminating gateway tgw, adds to
// adds+spread-1 more services) and meshdns following it (vcDiffCorefile); converge waits
// until meshdns answers every form of the given names as Consul's DNS
// answers them, and returns those answers.
func vcDiffStart(t *testing.T, seed int64, dc string, adds, spread int) (w *vcWorld, consul *consulAgent, s *Server, converge func(phase string, names []string) vcAnswers) {
	consul = startConsulWith(t, false, "datacenter = \""+dc+"\"\n", "")
	w = newVCWorld(t, seed, consul)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d did:\n  %s", seed, strings.Join(w.log, "\n  "))
		}
	})
	// A first sidecar service waits until the leader turned virtual IPs on.
	w.kinds["warm"] = kindSidecar
	w.register("warm")
	consul.put("/v1/agent/service/register", `{"Name": "tgw", "Kind": "terminating-gateway", "Port": 8443}`)
	for range adds + w.rng.Intn(spread) {
		w.add()
	}
	s = Start(t, vcDiffCorefile, Options{Ports: map[int]int{8500: portOf(consul.HTTP()), 8600: portOf(consul.DNS())}})
	converge = func(phase string, names []string) (want vcAnswers) {
		t.Helper()
		start := time.Now()
		Eventually(t, 20*time.Second, func() string {
			var err error
			if want, err = consulAnswers(consul.DNS(), w.names(), dc); err != nil {
				return err.Error()
			}
			if d := meshDiffers(s.DNS(), want, names, dc); d != "" {
				return phase + ": " + d
			}
			return ""
		})
		t.Logf("%s: alike after %v (%d services)", phase, time.Since(start).Round(time.Millisecond), len(w.kinds))
		return want
	}
	return w, consul, s, converge
}

func vcDiffSeed(t *testing.T, seed int64) {
	const dc = "dc2"
	w, consul, s, converge := vcDiffStart(t, seed, dc, 4, 5)
	want := converge("generated", w.names())
	// One change at a time: meshdns learns a VIP from the catalog entries
	// that carry it, so a sidecar registered and removed alone within one
	// round (its service staying, and with it the VIP in Consul) is never
	// seen (docs/consul.md, "With a Consul agent").
	for i := range 4 + w.rng.Intn(4) {
		w.mutate()
		want = converge(fmt.Sprintf("change %d (%s)", i+1, w.log[len(w.log)-1]), w.names())
	}
	vips := 0
	for _, n := range w.names() {
		if want.vip(n) != "" {
			vips++
		}
	}
	if vips < 2 {
		t.Fatalf("only %d services with a VIP: the generator made nothing to compare", vips)
	}
	// The listing holds exactly the VIPs Consul answers.
	listed := map[string]string{}
	for _, e := range getListing(t, s.Addr(8182)).Instances[0].Entries {
		listed[e.Key] = strings.Join(e.Addresses, ",")
	}
	for _, n := range w.names() {
		key := n + ".virtual.default.ns.default.ap." + dc + ".dc.consul"
		if listed[key] != want.vip(n) {
			t.Fatalf("listing: %s = %q, consul answers %q", key, listed[key], want.vip(n))
		}
		delete(listed, key)
	}
	if len(listed) != 0 {
		t.Fatalf("listing holds entries Consul does not answer: %v", listed)
	}
	time.Sleep(1500 * time.Millisecond) // the snapshot is written at most once a second

	// Consul freezes: the table answers as Consul did.
	consul.Pause()
	defer consul.Resume()
	if d := meshDiffers(s.DNS(), want, w.names(), dc); d != "" {
		t.Fatalf("agent frozen: %s", d)
	}
	// meshdns restarts during the freeze: the snapshot answers, with the
	// agent's datacenter for the short names.
	s.Restart()
	// ready can say so a moment before the DNS socket is bound (CoreDNS
	// runs the start-up hooks, ready's among them, before it serves): the
	// first answer is waited for, briefly; then every answer must match.
	Eventually(t, 2*time.Second, func() string {
		if _, err := TryQuery(s.DNS(), "warm.virtual.consul.", dns.TypeA, "udp"); err != nil {
			return "restarted meshdns not answering: " + err.Error()
		}
		return ""
	})
	if d := meshDiffers(s.DNS(), want, w.names(), dc); d != "" {
		t.Fatalf("restarted with the agent frozen: %s", d)
	}
	t.Logf("seed %d: %d services, %d with a VIP, alike frozen and after a restart", seed, len(w.kinds), vips)
}
