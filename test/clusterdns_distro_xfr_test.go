package test

import (
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/internal/zonexfr"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// distroCompareAXFR transfers the block's zone from both servers over TCP
// and compares the transfers as a zone: the SOA first and last on both,
// and between them the same records, each as often (a multiset: the stock
// plugin sorts Services by name alone and leaves ties, and the endpoints
// of a Service, in its informer's order, which changes from process to
// process), the SOA serials left out (each server notes the time of its
// last change on its own). Records the stock plugin transfers and
// meshdns does not are accepted only as distroXFRAllowed's; a record
// meshdns transfers and the stock plugin does not is a failure. The name
// server's own addresses may differ either way (distroXFROwnAddress).
func distroCompareAXFR(t *testing.T, p distroPhase, ours, stock string) distroCount {
	t.Helper()
	zone := p.b.axfr
	a, errA := zonexfr.AXFR(zone, ours, 10*time.Second)
	b, errB := zonexfr.AXFR(zone, stock, 10*time.Second)
	if errA != nil || errB != nil {
		t.Errorf("%s, seed %d, %s: AXFR %s: meshdns: %v, stock: %v", p.b.name, p.seed, p.name, zone, errA, errB)
		return distroCount{axfr: 1}
	}
	n := distroCount{axfr: 1, axfrRecords: len(b)}
	if len(b) < 3 {
		t.Errorf("%s, seed %d, %s: AXFR %s: the stock server gave %d records", p.b.name, p.seed, p.name, zone, len(b))
		return n
	}
	for _, x := range [][]dns.RR{a, b} {
		if len(x) < 2 || x[0].Header().Rrtype != dns.TypeSOA || x[len(x)-1].Header().Rrtype != dns.TypeSOA {
			t.Errorf("%s, seed %d, %s: AXFR %s: not framed by the SOA (%d records)", p.b.name, p.seed, p.name, zone, len(x))
			return n
		}
	}
	count := map[string]int{}
	for _, rr := range a {
		count[zonexfr.Key(rr)]++
	}
	for _, rr := range b {
		count[zonexfr.Key(rr)]--
	}
	var missing, extra []string
	for _, rr := range b {
		k := zonexfr.Key(rr)
		if count[k] >= 0 {
			continue
		}
		count[k]++
		if distroXFROwnAddress(rr, zone) {
			continue
		}
		if distroXFRAllowed(p.c, rr) {
			if n.axfrAllowed++; n.axfrAllowed <= 3 {
				t.Logf("%s, seed %d, %s: AXFR %s: accepted missing: %s", p.b.name, p.seed, p.name, zone, k)
			}
			continue
		}
		missing = append(missing, k)
	}
	for _, rr := range a {
		k := zonexfr.Key(rr)
		if count[k] <= 0 {
			continue
		}
		count[k]--
		if distroXFROwnAddress(rr, zone) {
			continue
		}
		extra = append(extra, k)
	}
	for i, k := range missing {
		if i < 10 {
			t.Errorf("%s, seed %d, %s: AXFR %s: stock transfers %s, meshdns does not", p.b.name, p.seed, p.name, zone, k)
		}
	}
	for i, k := range extra {
		if i < 10 {
			t.Errorf("%s, seed %d, %s: AXFR %s: meshdns transfers %s, stock does not", p.b.name, p.seed, p.name, zone, k)
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Errorf("%s, seed %d, %s: AXFR %s: %d records from meshdns, %d from stock: %d missing, %d extra",
			p.b.name, p.seed, p.name, zone, len(a), len(b), len(missing), len(extra))
	}
	return n
}

// distroXFROwnAddress: rr is an A or AAAA record of ns.dns.<zone>, the
// name server's own addresses, which each process takes from its
// interfaces at its start (genOwnAddresses: other tests on this machine
// add and remove veths in between).
func distroXFROwnAddress(rr dns.RR, zone string) bool {
	t := rr.Header().Rrtype
	return (t == dns.TypeA || t == dns.TypeAAAA) && strings.EqualFold(rr.Header().Name, "ns.dns."+zone)
}

// distroXFRAllowed: the stock plugin's transfer may hold rr where
// meshdns's does not - an SRV record with target "." at a named port of a
// headless Service with a ready FQDN endpoint. The stock plugin
// writes one per FQDN address and named port (its xfr.go finds no A/AAAA
// for a host that is a name and leaves the SRV's target empty); a target
// of "." says the service is decidedly not available at that name (RFC
// 2782), the opposite of what a query of the same name answers (an SRV
// to the endpoint's name), so meshdns transfers none
// (docs/cluster-dns.md).
func distroXFRAllowed(c *clustergen.Cluster, rr dns.RR) bool {
	srv, ok := rr.(*dns.SRV)
	if !ok || srv.Target != "." {
		return false
	}
	labels := dns.SplitDomainName(strings.ToLower(srv.Hdr.Name))
	// _<port>._<proto>.<service>.<namespace>.svc.cluster.local
	if len(labels) != 7 || !strings.HasPrefix(labels[0], "_") || !strings.HasPrefix(labels[1], "_") || labels[4] != "svc" {
		return false
	}
	for _, sl := range c.Slices {
		if sl.AddressType != discoveryv1.AddressTypeFQDN || sl.Namespace != labels[3] || sl.Labels[discoveryv1.LabelServiceName] != labels[2] {
			continue
		}
		for _, p := range sl.Ports {
			if p.Name == nil || "_"+strings.ToLower(*p.Name) != labels[0] {
				continue
			}
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					return true
				}
			}
		}
	}
	return false
}
