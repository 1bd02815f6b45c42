package test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// esvcListing is GET /endpointsvc as a client reads it (both schemas'
// fields).
type esvcListing struct {
	Plugin    string
	Instances []struct {
		Zones      []string
		Schema     string
		Source     string
		Generation uint32
		Count      int `json:"services_count"`
		Endpoints  int `json:"endpoints_count"`
		Services   []esvcListed
	}
}

type esvcListed struct {
	Namespace, Name, Kind string
	Addresses             []string
	CNAME                 string `json:"cname"`
	NXDomain              bool   `json:"nxdomain"`
	// orch: endpoints admitted and SRV targets; kubernetes: ready endpoints
	Endpoints json.RawMessage
	SRV       []struct {
		Node string
		Port uint16
	}
}

// getESVCListing reads GET /endpointsvc?query of inspect at addr; a status
// other than want fails the test.
func getESVCListing(t *testing.T, addr, query string, want int) esvcListing {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/endpointsvc" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var l esvcListing
	if resp.StatusCode != want || (want == 200 && json.Unmarshal(b, &l) != nil) {
		t.Fatalf("GET /endpointsvc%s: %s (want %d): %s", query, resp.Status, want, b)
	}
	return l
}

// genOrchState is a seeded orchestrator state: services in three
// namespaces (some inactive), nodes with IPv4 or IPv6 advertise addresses
// (some down), tasks of every desired and actual status, some with a host
// port. It returns the state and every service as "name.namespace".
func genOrchState(seed uint64) (string, []string) {
	r := rand.New(rand.NewPCG(seed, 7))
	statuses := []string{"running", "running", "healthy", "unhealthy", "pending", "failed", "stopped"}
	var nodes []esvcNode
	for i := range 2 + r.IntN(6) {
		addr := fmt.Sprintf("10.%d.0.%d", seed%200, i+1)
		if r.IntN(3) == 0 {
			addr = fmt.Sprintf("fd00::%x:%d", seed%200, i+1)
		}
		st := "ready"
		if r.IntN(6) == 0 {
			st = "down"
		}
		nodes = append(nodes, esvcNode{fmt.Sprintf("n%d", i), addr, st})
	}
	var services []string
	var tasks []esvcTask
	for i := range 5 + r.IntN(20) {
		svc := fmt.Sprintf("s%d.ns%d", i, r.IntN(3))
		if r.IntN(3) == 0 {
			svc = fmt.Sprintf("s%d", i) // namespace default
		}
		services = append(services, svc)
		for j := range r.IntN(5) {
			port := 0
			if r.IntN(2) == 0 {
				port = 30000 + r.IntN(1000)
			}
			tasks = append(tasks, esvcTask{fmt.Sprintf("t%d-%d", i, j), svc, nodes[r.IntN(len(nodes))].name,
				statuses[r.IntN(2)], statuses[r.IntN(len(statuses))], port})
		}
	}
	full := make([]string, len(services))
	for i, s := range services {
		if !strings.Contains(s, ".") {
			s += ".default"
		}
		full[i] = s
	}
	return esvcState(services, nodes, tasks), full
}

// TestEndpointsvcInspect reads the listing of the real binary (schema orch,
// a generated state file) and checks it against the answers: every listed
// service's name answers exactly its listed addresses (A and AAAA) and SRV
// targets, every service of the state that is not listed is NXDOMAIN, the
// generation is the SOA serial, the filters select what they say, and a
// new state lists with a higher generation. Three seeds.
func TestEndpointsvcInspect(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			state, all := genOrchState(seed)
			corefile := strings.Replace(esvcCorefile("source file state.json 100ms"), "    errors\n", "    errors\n    inspect 127.0.0.1:8182\n", 1)
			s := Start(t, corefile, Options{Files: map[string]string{"state.json": state}})
			l := getESVCListing(t, s.Addr(8182), "", 200)
			if l.Plugin != "endpointsvc" || len(l.Instances) != 1 {
				t.Fatalf("listing %+v", l)
			}
			in := l.Instances[0]
			if in.Schema != "orch" || in.Generation == 0 || in.Count != len(in.Services) || !slices.Equal(in.Zones, []string{"svc.orch."}) {
				t.Fatalf("instance %+v", in)
			}
			checkOrchListed(t, s.DNS(), in.Services, all, in.Endpoints)
			soa := Query(t, s.DNS(), "svc.orch.", dns.TypeSOA, "udp")
			if len(soa.Answer) != 1 || soa.Answer[0].(*dns.SOA).Serial != in.Generation {
				t.Fatalf("SOA %v, generation %d", soa.Answer, in.Generation)
			}
			checkOrchFilters(t, s.Addr(8182), in.Services)

			// A new state: a higher generation, listed as answered.
			state2, all2 := genOrchState(seed + 100)
			writeAtomic(t, filepath.Join(s.Dir, "state.json"), state2)
			var l2 esvcListing
			Eventually(t, 5*time.Second, func() string {
				l2 = getESVCListing(t, s.Addr(8182), "", 200)
				if g := l2.Instances[0].Generation; g <= in.Generation {
					return fmt.Sprintf("generation %d (was %d)", g, in.Generation)
				}
				return ""
			})
			checkOrchListed(t, s.DNS(), l2.Instances[0].Services, append(all, all2...), l2.Instances[0].Endpoints)
		})
	}
}

// checkOrchListed asks meshdns for every listed service and every other
// name of names ("service.namespace").
func checkOrchListed(t *testing.T, addr string, listed []esvcListed, names []string, endpoints int) {
	t.Helper()
	seen, sum := map[string]bool{}, 0
	for _, sv := range listed {
		key := sv.Name + "." + sv.Namespace
		seen[key] = true
		var n int
		if err := json.Unmarshal(sv.Endpoints, &n); err != nil {
			t.Fatalf("%s: endpoints %s", key, sv.Endpoints)
		}
		sum += n
		name := key + ".svc.orch."
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			var want []string
			for _, a := range sv.Addresses {
				if strings.Contains(a, ":") == (qt == dns.TypeAAAA) {
					want = append(want, a)
				}
			}
			got, err := answersOf(addr, name, qt)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s %s = %v, listed %v", name, dns.TypeToString[qt], got, want)
			}
		}
		r := Query(t, addr, name, dns.TypeSRV, "udp")
		var got, want []string
		for _, rr := range r.Answer {
			got = append(got, fmt.Sprintf("%s:%d", rr.(*dns.SRV).Target, rr.(*dns.SRV).Port))
		}
		for _, tg := range sv.SRV {
			want = append(want, fmt.Sprintf("%s.node.svc.orch.:%d", tg.Node, tg.Port))
		}
		slices.Sort(got)
		slices.Sort(want)
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
			t.Fatalf("%s SRV = %s %v, listed %v", name, dns.RcodeToString[r.Rcode], got, want)
		}
	}
	if sum != endpoints {
		t.Fatalf("listed services hold %d endpoints, the header says %d", sum, endpoints)
	}
	for _, key := range names {
		if !seen[key] {
			if r := Query(t, addr, key+".svc.orch.", dns.TypeA, "udp"); r.Rcode != dns.RcodeNameError {
				t.Fatalf("%s is not listed but answers %s %v", key, dns.RcodeToString[r.Rcode], r.Answer)
			}
		}
	}
}

// checkOrchFilters reads the listing with ?namespace=, ?name= and both, and
// a filter it does not offer.
func checkOrchFilters(t *testing.T, addr string, all []esvcListed) {
	t.Helper()
	pick := func(f func(esvcListed) bool) []string {
		var out []string
		for _, sv := range all {
			if f(sv) {
				out = append(out, sv.Namespace+"/"+sv.Name)
			}
		}
		return out
	}
	keys := func(l esvcListing) []string {
		var out []string
		for _, sv := range l.Instances[0].Services {
			out = append(out, sv.Namespace+"/"+sv.Name)
		}
		return out
	}
	one := all[len(all)/2]
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"?namespace=" + one.Namespace, pick(func(s esvcListed) bool { return s.Namespace == one.Namespace })},
		{"?name=" + strings.ToUpper(one.Name), pick(func(s esvcListed) bool { return s.Name == one.Name })},
		{"?namespace=" + one.Namespace + "&name=" + one.Name, []string{one.Namespace + "/" + one.Name}},
		{"?namespace=nowhere", nil},
	} {
		if got := keys(getESVCListing(t, addr, c.query, 200)); !slices.Equal(got, c.want) || (c.want != nil && len(got) == 0) {
			t.Fatalf("GET /endpointsvc%s lists %v, want %v", c.query, got, c.want)
		}
	}
	getESVCListing(t, addr, "?node=n1", 400)
	getESVCListing(t, addr, "?name=a&name=b", 400)
}
