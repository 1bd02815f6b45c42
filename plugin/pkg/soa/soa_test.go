package soa

import (
	"testing"

	"github.com/miekg/dns"
)

func TestForPacks(t *testing.T) {
	for _, tc := range []struct{ zone, ns, mbox string }{
		{"consul.", "ns.dns.consul.", "hostmaster.ns.dns.consul."},
		{"svc.orch.", "ns.dns.svc.orch.", "hostmaster.ns.dns.svc.orch."},
		{".", "ns.dns.", "hostmaster.ns.dns."},
	} {
		n := For(tc.zone)
		if n.Ns != tc.ns || n.Mbox != tc.mbox {
			t.Errorf("For(%q) = %+v, want ns %q mbox %q", tc.zone, n, tc.ns, tc.mbox)
		}
		m := new(dns.Msg)
		m.SetQuestion("x."+tc.zone, dns.TypeA)
		if tc.zone == "." {
			m.SetQuestion("x.", dns.TypeA)
		}
		m.Ns = []dns.RR{n.New(5, 7)}
		if _, err := m.Pack(); err != nil {
			t.Errorf("zone %q: SOA does not pack: %v", tc.zone, err)
		}
		if soa := m.Ns[0].(*dns.SOA); soa.Minttl != 5 || soa.Hdr.Ttl != 5 || soa.Serial != 7 || soa.Hdr.Name != tc.zone {
			t.Errorf("zone %q: SOA %v", tc.zone, soa)
		}
	}
}
