package orch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"

	"github.com/miekg/dns"
)

// listed is one service of a listing as a client reads it.
type listed struct {
	Namespace, Name string
	Addresses       []string
	CNAME           string `json:"cname"`
	SRV             []struct {
		Node string
		Port uint16
	}
}

func listTable(t *testing.T, tbl *Table, f Filter) ([]listed, string) {
	t.Helper()
	var b bytes.Buffer
	w := jsonw.NewWriter(&b)
	w.Buf = append(w.Buf, '[')
	if _, err := List(w, tbl, f); err != nil {
		t.Fatal(err)
	}
	w.Buf = append(w.Buf, ']')
	if err := w.Flush(true); err != nil {
		t.Fatal(err)
	}
	var out []listed
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return out, b.String()
}

// TestListAnswers: on a churning generated state (node and endpoint
// address modes), every listed service answers exactly its listed
// addresses (or CNAME) and SRV targets, the table's services are all
// listed, the patched table lists what the whole build lists, and a
// filter on namespace and name lists that service alone.
func TestListAnswers(t *testing.T) {
	zones := []string{"svc.test."}
	s := &Server{Zones: zones, Namespace: DefaultNamespace, TTL: 30}
	s.Init()
	for _, endpointMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("endpoint=%v", endpointMode), func(t *testing.T) {
			m := newChurnModel(11)
			tbl := BuildTable(m.state(), zones, false, endpointMode, nil)
			for i := range 30 {
				p, removed, dirty := m.step()
				tbl = tbl.Patched(&Patch{State: p, Removed: removed, DirtyNodes: dirty}, zones, false, endpointMode, nil)
				got, text := listTable(t, tbl, Filter{})
				if _, want := listTable(t, BuildTable(m.state(), zones, false, endpointMode, nil), Filter{}); text != want {
					t.Fatalf("step %d: the patched table lists\n%s\nthe whole build\n%s", i, text, want)
				}
				if len(got) != tbl.Services() {
					t.Fatalf("step %d: %d listed of %d", i, len(got), tbl.Services())
				}
				for _, l := range got {
					checkListed(t, s, tbl, l)
				}
				one := got[len(got)/2]
				if f, _ := listTable(t, tbl, Filter{one.Namespace, one.Name}); len(f) != 1 || f[0].Name != one.Name {
					t.Fatalf("filter %s/%s: %+v", one.Namespace, one.Name, f)
				}
			}
		})
	}
}

func checkListed(t *testing.T, s *Server, tbl *Table, l listed) {
	t.Helper()
	name := l.Name + "." + l.Namespace + ".svc.test."
	var got, want []string
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV} {
		m := new(dns.Msg)
		m.SetQuestion(name, qt)
		answer, _, nx := s.Serve(context.Background(), request.Request{W: &test.ResponseWriter{}, Req: m}, 0, tbl, 1)
		if nx {
			t.Fatalf("%s is listed but NXDOMAIN", name)
		}
		for _, rr := range answer {
			switch rr := rr.(type) {
			case *dns.A:
				got = append(got, rr.A.String())
			case *dns.AAAA:
				got = append(got, rr.AAAA.String())
			case *dns.CNAME:
				got = append(got, "cname "+rr.Target)
			case *dns.SRV:
				got = append(got, fmt.Sprintf("srv %s %d", rr.Target, rr.Port))
			}
		}
	}
	want = append(want, l.Addresses...)
	if l.CNAME != "" {
		want = append(want, "cname "+l.CNAME, "cname "+l.CNAME, "cname "+l.CNAME) // every type: the CNAME (no upstream)
	}
	for _, sv := range l.SRV {
		want = append(want, fmt.Sprintf("srv %s.node.svc.test. %d", sv.Node, sv.Port))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s answers %v, listed %+v", name, got, l)
	}
}
