package k8sdns

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// TestFlipRewritesOneRef: a readiness flip of one endpoint of a slice of
// ten rewrites the reverse entry of that endpoint's address only; the
// nine others keep theirs (a ref names its entry, it does not point at
// it), and they still answer PTR from the new entry.
func TestFlipRewritesOneRef(t *testing.T) {
	slice := func(unready int) *Slice {
		sl := &Slice{Namespace: "ns", Name: "web-1", Service: "web", Type: IPv4}
		for i := range 10 {
			ready := True
			if i == unready {
				ready = False
			}
			if err := sl.Add(EndpointSpec{Ready: ready, Hostname: fmt.Sprintf("web-%d", i), Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)}}); err != nil {
				t.Fatal(err)
			}
		}
		return sl
	}
	svc := &Service{Namespace: "ns", Name: "web", Kind: Headless}
	old := Build(&Cluster{Namespaces: []string{"ns"}, Services: []*Service{svc}, Slices: []*Slice{slice(-1)}})
	cur := old.Patched(&Patch{Changes: []Change{{Key: Key{Namespace: "ns", Name: "web"}, Service: svc, Slices: []*Slice{slice(3)}}}})
	changed := 0
	for a, was := range old.rev.All() {
		if is, ok := cur.rev.Get(a); !ok || is != was {
			changed++
		}
	}
	if changed != 1 || cur.rev.Len() != 9 {
		t.Errorf("a flip rewrote %d reverse entries (%d left), want 1 (9 left)", changed, cur.rev.Len())
	}
	if g, w := cur.Describe(), Build(&Cluster{Namespaces: []string{"ns"}, Services: []*Service{svc}, Slices: []*Slice{slice(3)}}).Describe(); g != w {
		t.Errorf("patched table:\n%s\nwant the whole build's:\n%s", g, w)
	}
	m := new(dns.Msg)
	m.SetQuestion("5.0.0.10.in-addr.arpa.", dns.TypePTR)
	r := ask(testServer(), cur, m)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "web-4.web.ns.svc.cluster.local." {
		t.Errorf("PTR of a kept ref: %v", r.Answer)
	}
}
