package clustergen

import (
	"slices"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cnameCluster is a hand-made cluster with one Service per shape of the
// CNAME conflict rule, in namespace ns.
func cnameCluster() *Cluster {
	c := &Cluster{cfg: Small()}
	no, yes := false, true
	fqdn, v4 := discoveryv1.AddressTypeFQDN, discoveryv1.AddressTypeIPv4
	port := func(name string) discoveryv1.EndpointPort { return discoveryv1.EndpointPort{Name: &name} }
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	slice := func(svc string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) {
		c.Slices = append(c.Slices, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: svc + "-" + string(at),
				Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: at, Ports: ports, Endpoints: eps})
	}
	for _, name := range []string{"one", "two-fqdn", "two-ports", "beside-ip", "not-ready-fqdn",
		"one-ready-of-two", "unset-ready", "ip-only"} {
		c.Services = append(c.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})
	}
	slice("one", fqdn, []discoveryv1.EndpointPort{port("a")}, ep(&yes, "a.example.test"))
	slice("two-fqdn", fqdn, nil, ep(nil, "a.example.test"), ep(nil, "b.example.test"))
	slice("two-ports", fqdn, []discoveryv1.EndpointPort{port("a"), port("b")}, ep(nil, "a.example.test"))
	slice("beside-ip", fqdn, nil, ep(nil, "a.example.test"))
	slice("beside-ip", v4, nil, ep(nil, "10.244.0.1"))
	slice("not-ready-fqdn", fqdn, nil, ep(&no, "a.example.test"))
	slice("not-ready-fqdn", v4, nil, ep(nil, "10.244.0.2"), ep(nil, "10.244.0.3"))
	slice("one-ready-of-two", fqdn, nil, ep(&no, "a.example.test"), ep(&yes, "b.example.test"))
	slice("unset-ready", fqdn, nil, ep(&yes, "a.example.test"), ep(nil, "b.example.test"))
	slice("ip-only", v4, nil, ep(nil, "10.244.0.4"), ep(nil, "10.244.0.5"))
	return c
}

// TestCNAMEConflicts: a Service is conflicted when its ready endpoints give
// an FQDN item (address × port) beside any other item; not-ready ones do
// not count, unset ready counts as ready.
func TestCNAMEConflicts(t *testing.T) {
	got := cnameCluster().CNAMEConflicts().Services()
	want := []string{"two-fqdn.ns", "two-ports.ns", "beside-ip.ns", "unset-ready.ns"}
	if !slices.Equal(got, want) {
		t.Fatalf("conflicted: %v, want %v", got, want)
	}
}

// TestCNAMEConflictsCovers: the rule covers A, AAAA and CNAME questions of
// a conflicted Service's names (any letter case) and of names whose stock
// answer chains through one, and nothing else.
func TestCNAMEConflictsCovers(t *testing.T) {
	cc := cnameCluster().CNAMEConflicts()
	chain := new(dns.Msg)
	chain.Answer = []dns.RR{
		&dns.CNAME{Hdr: dns.RR_Header{Name: "x.one.ns.svc.cluster.local.", Rrtype: dns.TypeCNAME}, Target: "Two-Fqdn.ns.svc.cluster.local."},
		&dns.CNAME{Hdr: dns.RR_Header{Name: "Two-Fqdn.ns.svc.cluster.local.", Rrtype: dns.TypeCNAME}, Target: "a.example.test."},
	}
	for _, tc := range []struct {
		q     Question
		stock *dns.Msg
		want  bool
	}{
		{Question{"two-fqdn.ns.svc.cluster.local.", dns.TypeA}, nil, true},
		{Question{"TWO-PORTS.ns.svc.Cluster.Local.", dns.TypeCNAME}, nil, true},
		{Question{"a-example-test.beside-ip.ns.svc.cluster.local.", dns.TypeAAAA}, nil, true},
		{Question{"_a._tcp.unset-ready.ns.svc.cluster.local.", dns.TypeA}, nil, true},
		{Question{"two-fqdn.ns.svc.cluster.local.", dns.TypeSRV}, nil, false},
		{Question{"two-fqdn.ns.svc.cluster.local.", dns.TypeTXT}, nil, false},
		{Question{"one.ns.svc.cluster.local.", dns.TypeCNAME}, nil, false},
		{Question{"not-ready-fqdn.ns.svc.cluster.local.", dns.TypeA}, nil, false},
		{Question{"ns.svc.cluster.local.", dns.TypeA}, nil, false},
		{Question{"two-fqdn.other.svc.cluster.local.", dns.TypeA}, nil, false},
		{Question{"x.one.ns.svc.cluster.local.", dns.TypeA}, chain, true},
		{Question{"x.one.ns.svc.cluster.local.", dns.TypeA}, nil, false},
	} {
		if got := cc.Covers(tc.q, tc.stock); got != tc.want {
			t.Errorf("Covers(%s, chain %v) = %v, want %v", tc.q, tc.stock != nil, got, tc.want)
		}
	}
}

// TestOneCNAME: an answer passes with at most one CNAME per name and no
// other record beside one; no reply never passes.
func TestOneCNAME(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	msg := func(rrs ...string) *dns.Msg {
		m := new(dns.Msg)
		for _, s := range rrs {
			m.Answer = append(m.Answer, rr(s))
		}
		return m
	}
	for _, tc := range []struct {
		m    *dns.Msg
		want bool
	}{
		{msg(), true}, // NODATA
		{msg("a.ns.svc.cluster.local. 30 IN A 10.244.0.1", "a.ns.svc.cluster.local. 30 IN A 10.244.0.2"), true},
		{msg("a.ns.svc.cluster.local. 30 IN CNAME x.example.test.", "x.example.test. 30 IN A 192.0.2.1"), true},
		{msg("b.ns.svc.cluster.local. 30 IN CNAME a.ns.svc.cluster.local.", "a.ns.svc.cluster.local. 30 IN CNAME x.example.test."), true},
		{msg("a.ns.svc.cluster.local. 30 IN CNAME x.example.test.", "A.ns.svc.cluster.local. 30 IN CNAME x.example.test."), false},
		{msg("a.ns.svc.cluster.local. 30 IN CNAME x.example.test.", "a.ns.svc.cluster.local. 30 IN A 10.244.0.1"), false},
		{nil, false},
	} {
		if got := OneCNAME(tc.m); got != tc.want {
			t.Errorf("OneCNAME(%v) = %v, want %v", tc.m, got, tc.want)
		}
	}
	cc := cnameCluster().CNAMEConflicts()
	q := Question{"two-fqdn.ns.svc.cluster.local.", dns.TypeA}
	if !cc.Deliberate(q, nil, msg("two-fqdn.ns.svc.cluster.local. 30 IN CNAME a.example.test.")) ||
		cc.Deliberate(q, nil, msg("two-fqdn.ns.svc.cluster.local. 30 IN CNAME a.example.test.", "two-fqdn.ns.svc.cluster.local. 30 IN CNAME b.example.test.")) ||
		cc.Deliberate(Question{"one.ns.svc.cluster.local.", dns.TypeA}, nil, msg()) {
		t.Error("Deliberate is not Covers and OneCNAME")
	}
}
