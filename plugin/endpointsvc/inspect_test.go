package endpointsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/inspect"

	"github.com/miekg/dns"
)

type testListing struct {
	Generation uint32
	Count      int `json:"services_count"`
	Services   []struct {
		Namespace, Name string
		Addresses       []string
	}
}

func listEsvc(t *testing.T, e *Endpointsvc, q url.Values) testListing {
	t.Helper()
	var b bytes.Buffer
	if err := e.List(&b, q); err != nil {
		t.Fatal(err)
	}
	var l testListing
	if err := json.Unmarshal(b.Bytes(), &l); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	return l
}

// TestList lists an instance before its first table (generation 0, no
// services) and after (generation = the SOA serial): every listed
// service's name answers exactly its listed addresses, the filters select
// what they say, and an unknown filter is refused.
func TestList(t *testing.T) {
	e := orchPlugin(30, &syncer{}, "svc.orch.")
	if l := listEsvc(t, e, nil); l.Generation != 0 || len(l.Services) != 0 {
		t.Fatalf("before a table: %+v", l)
	}
	e.apply(context.Background(), "test", loadState(t, stateFile), false)
	l := listEsvc(t, e, nil)
	if l.Generation != e.tbl.Load().serial || l.Count != len(l.Services) || len(l.Services) < 2 {
		t.Fatalf("listing %+v, serial %d", l, e.tbl.Load().serial)
	}
	for _, s := range l.Services {
		var got []string
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			m := new(dns.Msg)
			m.SetQuestion(s.Name+"."+s.Namespace+".svc.orch.", qt)
			rec := dnstest.NewRecorder(&test.ResponseWriter{})
			if _, err := e.ServeDNS(context.Background(), rec, m); err != nil {
				t.Fatal(err)
			}
			for _, rr := range rec.Msg.Answer {
				switch rr := rr.(type) {
				case *dns.A:
					got = append(got, rr.A.String())
				case *dns.AAAA:
					got = append(got, rr.AAAA.String())
				}
			}
		}
		if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(s.Addresses))) {
			t.Errorf("%s.%s answers %v, listed %v", s.Name, s.Namespace, got, s.Addresses)
		}
	}
	one := l.Services[len(l.Services)-1]
	f := listEsvc(t, e, url.Values{"namespace": {one.Namespace}, "name": {one.Name}})
	if len(f.Services) != 1 || f.Services[0].Name != one.Name || f.Generation != l.Generation {
		t.Fatalf("?namespace=%s&name=%s: %+v", one.Namespace, one.Name, f)
	}
	var bad *inspect.BadRequest
	for _, q := range []url.Values{{"node": {"x"}}, {"name": {"a", "b"}}} {
		if err := e.List(&bytes.Buffer{}, q); !errors.As(err, &bad) {
			t.Fatalf("%v: %v", q, err)
		}
	}
}
