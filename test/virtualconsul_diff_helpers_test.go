package test

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// The kinds of service the differential generator registers, each a way
// Consul v1.16.3 gives (or does not give) a service a virtual IP.
const (
	kindSidecar = "sidecar" // a service with a transparent-proxy sidecar: the sidecar's entry holds its VIP
	kindNative  = "native"  // a Connect-native service: its own entry holds its VIP
	kindLinked  = "linked"  // a plain service linked to the terminating gateway: the gateway's entries hold its VIP
	kindPlain   = "plain"   // a plain service: no VIP
	kindGhost   = "ghost"   // linked to the gateway, never registered: a VIP all the same
)

// vcWorld is a generated catalog on a real Consul agent: which services
// exist, of which kind, and which names the terminating gateway links.
type vcWorld struct {
	t      *testing.T
	rng    *rand.Rand
	consul *consulAgent
	kinds  map[string]string // every name ever used → its kind
	live   map[string]bool   // registered now (for ghosts: linked now)
	sides  map[string]bool   // sidecar services whose sidecar is registered now
	links  map[string]bool   // names the gateway's config entry lists
	port   int
	log    []string // what the generator did, for a failure's message
	// fresh: within a burst (burstMutate), the names registered or linked
	// in it, which it does not take away alone again; nil outside one.
	fresh map[string]bool
}

func newVCWorld(t *testing.T, seed int64, consul *consulAgent) *vcWorld {
	return &vcWorld{t: t, rng: rand.New(rand.NewSource(seed)), consul: consul, kinds: map[string]string{},
		live: map[string]bool{}, sides: map[string]bool{}, links: map[string]bool{}, port: 9000}
}

// name returns a new service name: lowercase DNS labels, as Consul's DNS
// finds a VIP only under the registered name's exact letters.
func (w *vcWorld) name() string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	const rest = letters + "0123456789-"
	for {
		n := []byte{letters[w.rng.Intn(len(letters))]}
		for i, l := 0, 2+w.rng.Intn(7); i < l; i++ {
			n = append(n, rest[w.rng.Intn(len(rest))])
		}
		n = append(n, letters[w.rng.Intn(len(letters))])
		if s := string(n); w.kinds[s] == "" && !strings.Contains(s, "sidecar") && s != "tgw" {
			return s
		}
	}
}

func (w *vcWorld) note(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// add registers a new service of a random kind.
func (w *vcWorld) add() {
	kinds := []string{kindSidecar, kindSidecar, kindNative, kindLinked, kindPlain, kindGhost}
	n, k := w.name(), kinds[w.rng.Intn(len(kinds))]
	w.kinds[n] = k
	w.register(n)
}

// register (re-)registers service n as its kind says.
func (w *vcWorld) register(n string) {
	w.port++
	switch w.kinds[n] {
	case kindSidecar:
		w.consul.Register(n, w.port)
		w.sides[n] = true
	case kindNative:
		w.consul.put("/v1/agent/service/register", fmt.Sprintf(`{"Name": %q, "Port": %d, "Connect": {"Native": true}}`, n, w.port))
	case kindLinked:
		w.consul.RegisterPlain(n, w.port)
		w.link(n, true)
	case kindPlain:
		w.consul.RegisterPlain(n, w.port)
	case kindGhost:
		w.link(n, true)
	}
	w.live[n] = true
	if w.fresh != nil {
		w.fresh[n] = true
	}
	w.note("register %s %s", w.kinds[n], n)
}

// deregister removes service n (its sidecar first, as an orchestrator does).
func (w *vcWorld) deregister(n string) {
	switch w.kinds[n] {
	case kindSidecar:
		if w.sides[n] {
			w.consul.Deregister(n)
		} else { // its sidecar left alone before
			w.consul.put("/v1/agent/service/deregister/"+n, "")
		}
		w.sides[n] = false
	case kindGhost:
		w.link(n, false)
	default:
		w.consul.put("/v1/agent/service/deregister/"+n, "")
	}
	w.live[n] = false
	w.note("deregister %s %s", w.kinds[n], n)
}

// link adds or removes n from the terminating gateway's config entry.
func (w *vcWorld) link(n string, on bool) {
	w.links[n] = on
	if on && w.fresh != nil {
		w.fresh[n] = true
	}
	var svcs []string
	for _, l := range w.sorted(w.links) {
		svcs = append(svcs, fmt.Sprintf(`{"Name": %q}`, l))
	}
	w.consul.put("/v1/config", `{"Kind": "terminating-gateway", "Name": "tgw", "Services": [`+strings.Join(svcs, ",")+`]}`)
}

func (w *vcWorld) sorted(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// pick returns a random name among those for which ok holds, or "".
func (w *vcWorld) pick(ok func(n string) bool) string {
	var c []string
	for _, n := range w.names() {
		if ok(n) {
			c = append(c, n)
		}
	}
	if len(c) == 0 {
		return ""
	}
	return c[w.rng.Intn(len(c))]
}

// names is every service name ever used, sorted.
func (w *vcWorld) names() []string {
	out := make([]string, 0, len(w.kinds))
	for n := range w.kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// mutate makes one random change: a service added, deregistered or
// registered again, a sidecar alone deregistered (Consul keeps the VIP
// while the service has an instance), a service linked to or unlinked
// from the gateway.
func (w *vcWorld) mutate() {
	switch w.rng.Intn(6) {
	case 0:
		w.add()
	case 1:
		if n := w.pick(func(n string) bool { return w.live[n] && !(w.kinds[n] == kindGhost && w.fresh[n]) }); n != "" {
			w.deregister(n)
		}
	case 2:
		if n := w.pick(func(n string) bool { return !w.live[n] }); n != "" {
			w.register(n)
		}
	case 3:
		if n := w.pick(func(n string) bool { return w.kinds[n] == kindSidecar && w.sides[n] && !w.fresh[n] }); n != "" {
			w.consul.put("/v1/agent/service/deregister/"+n+"-sidecar-proxy", "")
			w.sides[n] = false
			w.note("deregister the sidecar of %s", n)
		}
	case 4:
		if n := w.pick(func(n string) bool { return w.kinds[n] == kindLinked && w.live[n] && w.links[n] && !w.fresh[n] }); n != "" {
			w.link(n, false)
			w.note("unlink %s", n)
		}
	case 5:
		if n := w.pick(func(n string) bool { return w.kinds[n] == kindPlain && w.live[n] && !w.links[n] }); n != "" {
			w.link(n, true)
			w.note("link %s", n)
		}
	}
}

// vcForms are the forms of a service's virtual name that meshdns answers:
// short, with the datacenter, and full. Each is checked against Consul's
// answer to the short form (Consul CE refuses the full form with .ns and
// .ap, and ignores the datacenter of a virtual name).
func vcForms(svc, dc string) []string {
	return []string{svc + ".virtual.consul.", svc + ".virtual." + dc + ".dc.consul.", svc + ".virtual.default.ns.default.ap." + dc + ".dc.consul."}
}

// answersOf returns the records of type qtype in the answer to name at addr
// (Consul's DNS answers a virtual name's AAAA question with its A record:
// only records of the asked type count).
func answersOf(addr, name string, qtype uint16) ([]string, error) {
	r, err := TryQuery(addr, name, qtype, "udp")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rr := range r.Answer {
		if rr.Header().Rrtype == qtype {
			out = append(out, rrData(rr))
		}
	}
	sort.Strings(out)
	return out, nil
}

// vcAnswers are Consul's answers per service and type ("A"/"AAAA" →
// records joined by commas).
type vcAnswers map[string]string

// consulAnswers asks Consul's DNS for every service of the world.
func consulAnswers(consulDNS string, names []string) (vcAnswers, error) {
	out := vcAnswers{}
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			got, err := answersOf(consulDNS, n+".virtual.consul.", qt)
			if err != nil {
				return nil, fmt.Errorf("consul %s: %w", n, err)
			}
			out[n+" "+dns.TypeToString[qt]] = strings.Join(got, ",")
		}
	}
	return out, nil
}

// meshDiffers says "" when meshdns answers every form of every service as
// want says, else the first difference.
func meshDiffers(mesh string, want vcAnswers, names []string, dc string) string {
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			w := want[n+" "+dns.TypeToString[qt]]
			for _, f := range vcForms(n, dc) {
				got, err := answersOf(mesh, f, qt)
				if err != nil {
					return fmt.Sprintf("meshdns %s %s: %v", f, dns.TypeToString[qt], err)
				}
				if strings.Join(got, ",") != w {
					return fmt.Sprintf("%s %s: meshdns %v, consul %q", f, dns.TypeToString[qt], got, w)
				}
			}
		}
	}
	return ""
}
