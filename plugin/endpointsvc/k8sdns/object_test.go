package k8sdns

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSliceEqualIsTextEqual: Slice.Equal says two slices are equal
// exactly when every field and every endpoint's addresses written as text
// are (what it compared before it compared addresses as they are), over
// generated pairs of IPv4, IPv6 and FQDN slices: a slice and a copy with
// one field or address drawn anew (often the same), or two drawn apart
// (seeded).
func TestSliceEqualIsTextEqual(t *testing.T) {
	addrs := map[AddressType][]string{
		IPv4: {"10.0.0.1", "10.0.0.2", "10.1.0.1"},
		IPv6: {"fd00::1", "fd00::2", "2001:db8::1"},
		FQDN: {"a.example", "b.example"},
	}
	words := []string{"", "web-0", "web-1"}
	conds := []Condition{Unset, False, True}
	type spec struct {
		name  string
		typ   AddressType
		port  int32 // 0: no ports
		eps   []EndpointSpec
		dense bool // Compact after the adds
	}
	gen := func(r *rand.Rand, typ AddressType) spec {
		sp := spec{name: "web-" + words[r.IntN(2)+1], typ: typ, dense: r.IntN(2) == 0}
		if r.IntN(4) == 0 {
			sp.port = int32(80 + r.IntN(2))
		}
		for range r.IntN(3) {
			e := EndpointSpec{Hostname: words[r.IntN(3)], TargetRef: words[r.IntN(3)], NodeName: words[r.IntN(3)],
				Ready: conds[r.IntN(3)], Serving: conds[r.IntN(3)], Terminating: conds[r.IntN(3)]}
			for range 1 + r.IntN(2) {
				e.Addresses = append(e.Addresses, addrs[typ][r.IntN(len(addrs[typ]))])
			}
			sp.eps = append(sp.eps, e)
		}
		return sp
	}
	// mutate changes one field of sp, or an address, to a value drawn
	// anew (often the same one).
	mutate := func(r *rand.Rand, sp spec) spec {
		sp.eps = append([]EndpointSpec(nil), sp.eps...)
		if len(sp.eps) == 0 || r.IntN(8) == 0 {
			sp.name, sp.port = "web-"+words[r.IntN(2)+1], int32(r.IntN(2)*80)
			return sp
		}
		e := &sp.eps[r.IntN(len(sp.eps))]
		e.Addresses = append([]string(nil), e.Addresses...)
		switch r.IntN(8) {
		case 0:
			e.Hostname = words[r.IntN(3)]
		case 1:
			e.TargetRef = words[r.IntN(3)]
		case 2:
			e.NodeName = words[r.IntN(3)]
		case 3:
			e.Ready = conds[r.IntN(3)]
		case 4:
			e.Serving = conds[r.IntN(3)]
		case 5:
			e.Terminating = conds[r.IntN(3)]
		default:
			e.Addresses[r.IntN(len(e.Addresses))] = addrs[sp.typ][r.IntN(len(addrs[sp.typ]))]
		}
		return sp
	}
	build := func(sp spec, dense bool) *Slice {
		s := &Slice{Namespace: "shop", Name: sp.name, Service: "web", Type: sp.typ}
		if sp.port != 0 {
			s.Ports = []Port{{Name: "http", Protocol: "TCP", Port: sp.port}}
		}
		for _, e := range sp.eps {
			if err := s.Add(e); err != nil {
				t.Fatal(err)
			}
		}
		if dense {
			s.Compact()
		}
		return s
	}
	textEqual := func(s, o *Slice) bool {
		if s.Namespace != o.Namespace || s.Name != o.Name || s.Service != o.Service || s.Type != o.Type ||
			len(s.Ports) != len(o.Ports) || len(s.Ports) > 0 && s.Ports[0] != o.Ports[0] || len(s.Endpoints) != len(o.Endpoints) {
			return false
		}
		for i := range s.Endpoints {
			a, b := &s.Endpoints[i], &o.Endpoints[i]
			if a.NodeName != b.NodeName || a.Ready != b.Ready || a.Serving != b.Serving || a.Terminating != b.Terminating ||
				a.Len() != b.Len() || s.Hostname(i) != o.Hostname(i) || s.TargetRef(i) != o.TargetRef(i) {
				return false
			}
			for j := range a.Len() {
				if s.Address(i, j) != o.Address(i, j) {
					return false
				}
			}
		}
		return true
	}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 33))
		equal := 0
		for range 20000 {
			sa := gen(r, AddressType(r.IntN(3)))
			sb := mutate(r, sa)
			if r.IntN(8) == 0 {
				sb = gen(r, AddressType(r.IntN(3)))
			}
			a, b := build(sa, sa.dense), build(sb, r.IntN(2) == 0)
			want := textEqual(a, b)
			if got := a.Equal(b); got != want {
				t.Fatalf("seed %d: Equal = %v, text equal %v:\n%s\n%s", seed, got, want, describeSlice(a), describeSlice(b))
			}
			if !a.Equal(a) {
				t.Fatalf("seed %d: a slice not equal to itself:\n%s", seed, describeSlice(a))
			}
			if want {
				equal++
			}
		}
		if equal < 200 {
			t.Fatalf("seed %d: only %d equal pairs of 20,000: the generator makes too few", seed, equal)
		}
	}
}

// describeSlice writes a slice's fields and endpoints as text.
func describeSlice(s *Slice) string {
	out := fmt.Sprintf("%s/%s service %s type %d ports %v", s.Namespace, s.Name, s.Service, s.Type, s.Ports)
	for i, e := range s.Endpoints {
		out += fmt.Sprintf("\n  %v host %q ref %q node %q ready %d serving %d terminating %d",
			s.Addresses(i), s.Hostname(i), s.TargetRef(i), e.NodeName.Value(), e.Ready, e.Serving, e.Terminating)
	}
	return out
}
