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

// vcForms are the forms of a service's virtual name that meshdns answers
// (short, with the datacenter, full, a named port), each with the form
// Consul's DNS is asked for its answer: the same, except the full one,
// which Consul CE refuses (NXDOMAIN for .ns and .ap): its answer is the
// short form's. (Consul ignores the datacenter of a virtual name and
// answers a named port with the service's VIP: measured on v1.16.3.)
func vcForms(svc, dc string) [][2]string {
	short := svc + ".virtual.consul."
	return [][2]string{
		{short, short},
		{svc + ".virtual." + dc + ".dc.consul.", svc + ".virtual." + dc + ".dc.consul."},
		{svc + ".virtual.default.ns.default.ap." + dc + ".dc.consul.", short},
		{"http." + svc + ".virtual.consul.", "http." + svc + ".virtual.consul."},
	}
}

// answersOf returns the records of type qtype in the answer to name at addr
// (Consul's DNS answers a virtual name's AAAA question with its A record:
// only records of the asked type count).
func answersOf(addr, name string, qtype uint16) ([]string, error) {
	got, _, err := answerOf(addr, name, qtype)
	return got, err
}

// answerOf is answersOf with the answer's rcode.
func answerOf(addr, name string, qtype uint16) ([]string, int, error) {
	r, err := TryQuery(addr, name, qtype, "udp")
	if err != nil {
		return nil, 0, err
	}
	var out []string
	for _, rr := range r.Answer {
		if rr.Header().Rrtype == qtype {
			out = append(out, rrData(rr))
		}
	}
	sort.Strings(out)
	return out, r.Rcode, nil
}

// vcAnswers are Consul's answers per asked name and type ("name A" →
// rcode and records, joined by commas).
type vcAnswers map[string]string

// consulAnswers asks Consul's DNS for every form of every service of the
// world.
func consulAnswers(consulDNS string, names []string, dc string) (vcAnswers, error) {
	out := vcAnswers{}
	for _, n := range names {
		for _, f := range vcForms(n, dc) {
			for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
				k := f[1] + " " + dns.TypeToString[qt]
				if _, ok := out[k]; ok {
					continue
				}
				got, rcode, err := answerOf(consulDNS, f[1], qt)
				if err != nil {
					return nil, fmt.Errorf("consul %s: %w", f[1], err)
				}
				out[k] = dns.RcodeToString[rcode] + " " + strings.Join(got, ",")
			}
		}
	}
	return out, nil
}

// vcVIP is Consul's A answer for service n's short name ("" for none).
func (a vcAnswers) vip(n string) string {
	_, recs, _ := strings.Cut(a[n+".virtual.consul. A"], " ")
	return recs
}

// meshDiffers says "" when meshdns answers every form of every service as
// want says (rcode and records of the asked type), else the first
// difference.
func meshDiffers(mesh string, want vcAnswers, names []string, dc string) string {
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			for _, f := range vcForms(n, dc) {
				w := want[f[1]+" "+dns.TypeToString[qt]]
				got, rcode, err := answerOf(mesh, f[0], qt)
				if err != nil {
					return fmt.Sprintf("meshdns %s %s: %v", f[0], dns.TypeToString[qt], err)
				}
				if g := dns.RcodeToString[rcode] + " " + strings.Join(got, ","); g != w {
					return fmt.Sprintf("%s %s: meshdns %q, consul %q", f[0], dns.TypeToString[qt], g, w)
				}
			}
		}
	}
	return ""
}
