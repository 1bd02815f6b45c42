package test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestEndpointsvcTransfer: `transfer { to * }` beside endpointsvc (schema
// kubernetes) serves AXFR of the cluster zone from its table, as beside the
// stock kubernetes plugin: SOA first and last, the Services' records
// between; IXFR at an old serial gives the same.
func TestEndpointsvcTransfer(t *testing.T) {
	state, err := filepath.Abs("../corefile/data/cluster.snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	s := Start(t, `.:1053 {
    bind 127.0.0.1
    endpointsvc cluster.local in-addr.arpa ip6.arpa {
        source file `+state+`
        schema kubernetes
        ttl 30
    }
    transfer {
        to *
    }
}
`)
	for _, qtype := range []uint16{dns.TypeAXFR, dns.TypeIXFR} {
		m := new(dns.Msg)
		if qtype == dns.TypeAXFR {
			m.SetAxfr("cluster.local.")
		} else {
			m.SetIxfr("cluster.local.", 1, "ns.dns.cluster.local.", "hostmaster.cluster.local.")
		}
		ch, err := new(dns.Transfer).In(m, s.DNS())
		if err != nil {
			t.Fatal(err)
		}
		var rrs []string
		for env := range ch {
			if env.Error != nil {
				t.Fatalf("%s: %v", dns.TypeToString[qtype], env.Error)
			}
			for _, rr := range env.RR {
				rrs = append(rrs, strings.ReplaceAll(rr.String(), "\t", " "))
			}
		}
		if len(rrs) < 2 || !strings.Contains(rrs[0], " SOA ") || rrs[0] != rrs[len(rrs)-1] {
			t.Fatalf("%s: not SOA first and last: %q", dns.TypeToString[qtype], rrs)
		}
		all := strings.Join(rrs, "\n")
		for _, want := range []string{
			"web.shop.svc.cluster.local. 30 IN A 10.96.0.20",
			"_http._tcp.web.shop.svc.cluster.local. 30 IN SRV 0 100 80 web.shop.svc.cluster.local.",
			"db-0.db.shop.svc.cluster.local. 30 IN A 10.244.1.6",
			"_pg._tcp.db.shop.svc.cluster.local. 30 IN SRV 0 50 5432 db-0.db.shop.svc.cluster.local.",
		} {
			if !strings.Contains(all, want) {
				t.Errorf("%s lacks %q:\n%s", dns.TypeToString[qtype], want, all)
			}
		}
	}
	// another zone is not transferred
	m := new(dns.Msg)
	m.SetAxfr("example.org.")
	ch, err := new(dns.Transfer).In(m, s.DNS())
	if err == nil {
		for env := range ch {
			if env.Error == nil {
				t.Errorf("AXFR example.org. answered: %v", env.RR)
			}
		}
	}
}
