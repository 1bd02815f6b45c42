package endpointsvc

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/transfer"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
)

// axfr reads a transfer whole, each record as text (SOA serial zeroed).
func axfr(t testing.TB, tr transfer.Transferer, zone string, serial uint32) []string {
	t.Helper()
	ch, err := tr.Transfer(zone, serial)
	if err != nil {
		t.Fatalf("Transfer(%s): %v", zone, err)
	}
	var out []string
	for rrs := range ch {
		for _, rr := range rrs {
			c := dns.Copy(rr)
			if soa, ok := c.(*dns.SOA); ok {
				soa.Serial = 0
			}
			out = append(out, strings.ReplaceAll(c.String(), "\t", " "))
		}
	}
	return out
}

// serviceOf is the Service a transferred record belongs to: <svc>.<ns> of
// its owner in zone.
func serviceOf(rr, zone string) string {
	owner := strings.Fields(rr)[0]
	rest, ok := strings.CutSuffix(owner, ".svc."+zone)
	if !ok {
		return ""
	}
	ls := strings.Split(rest, ".")
	return strings.Join(ls[max(len(ls)-2, 0):], ".")
}

// TestTransferAgainstStock: the AXFR of cluster.local on generated clusters
// is the stock plugin's: SOA first and last, every Service's records in
// the same order (Services by name; the stock plugin leaves the order of
// equal names and of a Service's slices to its informer, so those are
// compared as sets), but for the SRV records with target "." the stock
// plugin writes for FQDN endpoints.
func TestTransferAgainstStock(t *testing.T) {
	const zone = "cluster.local."
	for _, seed := range genSeeds(t, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := clustergen.Generate(seed, clustergen.Small())
			stock := axfr(t, stockPlugin(t, c), zone, 0)
			ours := axfr(t, ourPlugin(t, clusterModel(c)), zone, 0)
			stock = slices.DeleteFunc(stock, func(s string) bool { return strings.HasSuffix(s, " .") && strings.Contains(s, " SRV ") })
			if len(ours) < 2 || ours[0] != stock[0] || ours[len(ours)-1] != stock[len(stock)-1] || !strings.Contains(ours[0], " SOA ") {
				t.Fatalf("SOA first and last: ours %q…%q, stock %q…%q", ours[0], ours[len(ours)-1], stock[0], stock[len(stock)-1])
			}
			group := func(rrs []string) (order []string, by map[string][]string) {
				by = map[string][]string{}
				for _, rr := range rrs[1 : len(rrs)-1] {
					k := serviceOf(rr, zone)
					if _, ok := by[k]; !ok {
						order = append(order, k)
					}
					by[k] = append(by[k], rr)
				}
				return order, by
			}
			so, sb := group(stock)
			oo, ob := group(ours)
			if len(so) != len(oo) {
				t.Fatalf("%d Services transferred, stock %d", len(oo), len(so))
			}
			name := func(k string) string { return strings.Split(k, ".")[0] }
			for i := range oo {
				if name(oo[i]) != name(so[i]) {
					t.Fatalf("Service %d: %s, stock %s", i, oo[i], so[i])
				}
				if i > 0 && oo[i-1] >= oo[i] && name(oo[i-1]) == name(oo[i]) {
					t.Errorf("Services %s, %s out of order", oo[i-1], oo[i])
				}
			}
			services, records := 0, 0
			for k, want := range sb {
				got := ob[k]
				if !slices.Equal(got, want) {
					g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
					if !slices.Equal(g, w) {
						t.Errorf("%s:\n ours  %q\n stock %q", k, got, want)
					}
				}
				services++
				records += len(got)
			}
			if services < 20 || records < 100 {
				t.Fatalf("only %d Services, %d records transferred", services, records)
			}
			t.Logf("%d Services, %d records", services, records)
		})
	}
}

// TestTransferNotAuthoritative: another zone, and a zone before the first
// table, are not ours; IXFR of the current serial is the SOA alone.
func TestTransferNotAuthoritative(t *testing.T) {
	c := clustergen.Generate(1, clustergen.Small())
	if _, err := ourPlugin(t, nil).Transfer("cluster.local.", 0); err != transfer.ErrNotAuthoritative {
		t.Errorf("before the first table: %v", err)
	}
	e := ourPlugin(t, clusterModel(c))
	if _, err := e.Transfer("example.org.", 0); err != transfer.ErrNotAuthoritative {
		t.Errorf("example.org.: %v", err)
	}
	serial := e.tbl.Load().serial
	if got := axfr(t, e, "cluster.local.", serial); len(got) != 1 || !strings.Contains(got[0], " SOA ") {
		t.Errorf("IXFR at the current serial: %q", got)
	}
	if got := axfr(t, e, "cluster.local.", serial-1); len(got) < 10 {
		t.Errorf("IXFR at an older serial: %d records", len(got))
	}
}

// BenchmarkTransfer: AXFR of a 5,000-Service cluster.local, ours and the
// stock plugin's, read whole.
func BenchmarkTransfer(b *testing.B) {
	cfg := clustergen.Small()
	cfg.Namespaces, cfg.Services = 50, 5000
	c := clustergen.Generate(1, cfg)
	for _, x := range []struct {
		name string
		tr   transfer.Transferer
	}{{"ours", ourPlugin(b, clusterModel(c))}, {"stock", stockPlugin(b, c)}} {
		b.Run(x.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				ch, err := x.tr.Transfer("cluster.local.", 0)
				if err != nil {
					b.Fatal(err)
				}
				n = 0
				for rrs := range ch {
					n += len(rrs)
				}
			}
			b.ReportMetric(float64(n), "records")
		})
	}
}
