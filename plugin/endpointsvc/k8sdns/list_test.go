package k8sdns_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"

	"github.com/miekg/dns"
)

// listOf is the listing of t as List writes it.
func listOf(t *testing.T, s *k8sdns.Server, tbl *k8sdns.Table, f k8sdns.Filter) string {
	t.Helper()
	var b bytes.Buffer
	w := jsonw.NewWriter(&b)
	w.Buf = append(w.Buf, '[')
	if _, err := s.List(w, tbl, f); err != nil {
		t.Fatal(err)
	}
	w.Buf = append(w.Buf, ']')
	if err := w.Flush(true); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestListAnswers: on generated clusters, every listed Service's name
// answers exactly its listed addresses (A and AAAA) or its CNAME, or
// NXDOMAIN when listed so (with and without ignore empty_service); after
// random steps the patched table lists what the whole build lists.
func TestListAnswers(t *testing.T) {
	for _, seed := range seeds(4) {
		for _, ignoreEmpty := range []bool{false, true} {
			t.Run(fmt.Sprint(seed, ignoreEmpty), func(t *testing.T) {
				c := clustergen.Generate(seed, clustergen.Small())
				s := &k8sdns.Server{Zones: []string{"cluster.local."}, TTL: 5, IgnoreEmptyService: ignoreEmpty}
				tbl := k8sdns.Build(model(c))
				checkListAnswers(t, s, tbl)
				r := rand.New(rand.NewSource(seed))
				for range 50 {
					labels := sliceLabels(c)
					ch := c.Step(r)
					tbl = tbl.Patched(patchOf(c, ch, labels))
				}
				if got, want := listOf(t, s, tbl, k8sdns.Filter{}), listOf(t, s, k8sdns.Build(model(c)), k8sdns.Filter{}); got != want {
					t.Fatalf("the patched table lists\n%s\nthe whole build\n%s", got, want)
				}
				checkListAnswers(t, s, tbl)
			})
		}
	}
}

func checkListAnswers(t *testing.T, s *k8sdns.Server, tbl *k8sdns.Table) {
	t.Helper()
	var listed []struct {
		Namespace, Name, Kind string
		Addresses             []string
		CNAME                 string `json:"cname"`
		NXDomain              bool   `json:"nxdomain"`
	}
	out := listOf(t, s, tbl, k8sdns.Filter{})
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(listed) != tbl.Services() {
		t.Fatalf("%d listed, the table has %d Services", len(listed), tbl.Services())
	}
	for _, l := range listed {
		name := l.Name + "." + l.Namespace + ".svc.cluster.local."
		var got []string
		nx := false
		qtypes := []uint16{dns.TypeA, dns.TypeAAAA}
		if len(l.Addresses) == 0 && l.CNAME != "" && !l.NXDomain {
			qtypes = []uint16{dns.TypeCNAME} // A and AAAA follow it
		}
		for _, qt := range qtypes {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			rp := s.Serve(context.Background(), request.Request{W: &test.ResponseWriter{}, Req: m}, 0, tbl, 1)
			nx = nx || rp.NameError
			for _, rr := range rp.Answer {
				switch rr := rr.(type) {
				case *dns.A:
					got = append(got, rr.A.String())
				case *dns.AAAA:
					got = append(got, rr.AAAA.String())
				case *dns.CNAME:
					got = append(got, "cname "+rr.Target)
				}
			}
		}
		var want []string
		switch {
		case l.NXDomain:
		case len(l.Addresses) > 0:
			want = slices.Clone(l.Addresses)
		case l.CNAME != "":
			want = []string{"cname " + dns.Fqdn(l.CNAME)}
		}
		slices.Sort(got)
		slices.Sort(want)
		if nx != l.NXDomain || !slices.Equal(got, want) {
			t.Fatalf("%s answers %v (NXDOMAIN %v), listed %+v", name, got, nx, l)
		}
	}
}
