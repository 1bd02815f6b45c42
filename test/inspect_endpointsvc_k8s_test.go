package test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
)

// k8sListedEndpoint is a ready endpoint in the schema kubernetes listing.
type k8sListedEndpoint struct {
	Addresses []string
	Hostname  string
}

// TestEndpointsvcInspectKubernetes reads the listing of the shipped
// cluster-DNS Corefile (schema kubernetes) on a real kube-apiserver with a
// generated cluster, and checks it against the answers: every generated
// Service is listed; a listed name answers exactly its listed addresses (A
// and AAAA) or CNAME target, or NXDOMAIN when listed so; a headless
// Service's addresses are its listed ready endpoints'; an endpoint's
// hostname answers its addresses; the generation is the SOA serial; the
// namespace filter lists that namespace's Services.
func TestEndpointsvcInspectKubernetes(t *testing.T) {
	k := startKubeAPI(t)
	cfg := clustergen.Small()
	c := clustergen.Generate(11, cfg)
	genCreate(t, k, c)
	cf := genQuickStop(t, shippedClusterCorefile(t, k.Kubeconfig))
	cf = strings.Replace(cf, "    errors\n", "    errors\n    inspect 127.0.0.1:8182\n", 1)
	s := genStart(t, cf, Options{Ports: map[int]int{5301: genUpstream(t)}})
	genMark(t, k, 0, cfg.Zone, s) // synced up to the mark's Service

	l := getESVCListing(t, s.Addr(8182), "", 200)
	if len(l.Instances) != 1 || l.Instances[0].Schema != "kubernetes" || l.Instances[0].Generation == 0 {
		t.Fatalf("listing %+v", l)
	}
	in := l.Instances[0]
	listed, shapes := map[string]esvcListed{}, map[string]int{}
	for _, sv := range in.Services {
		listed[sv.Namespace+"/"+sv.Name] = sv
		checkK8sListed(t, s.DNS(), cfg.Zone, sv, shapes)
	}
	for _, shape := range []string{"ClusterIP", "Headless", "ExternalName", "cname", "hostname"} {
		if shapes[shape] == 0 {
			t.Errorf("the generated cluster listed no %s (shapes %v): pick another seed", shape, shapes)
		}
	}
	want := map[string]bool{"default/kubernetes": true, "mark-0/m": true} // the API server's own, the mark's
	for _, sv := range c.Services {
		want[sv.Namespace+"/"+sv.Name] = true
	}
	for key := range want {
		if _, ok := listed[key]; !ok && key != "default/kubernetes" {
			t.Fatalf("Service %s is not listed", key)
		}
	}
	for key := range listed {
		if !want[key] {
			t.Fatalf("Service %s is listed but was never made", key)
		}
	}
	if in.Count != len(in.Services) {
		t.Fatalf("%d Services listed, header %d", len(in.Services), in.Count)
	}
	soa := Query(t, s.DNS(), cfg.Zone+".", dns.TypeSOA, "udp")
	if len(soa.Answer) != 1 || soa.Answer[0].(*dns.SOA).Serial != in.Generation {
		t.Fatalf("SOA %v, generation %d", soa.Answer, in.Generation)
	}
	ns := c.Services[0].Namespace
	var inNS []string
	for _, sv := range in.Services {
		if sv.Namespace == ns {
			inNS = append(inNS, sv.Name)
		}
	}
	var got []string
	for _, sv := range getESVCListing(t, s.Addr(8182), "?namespace="+ns, 200).Instances[0].Services {
		got = append(got, sv.Name)
	}
	if len(inNS) == 0 || !slices.Equal(got, inNS) {
		t.Fatalf("?namespace=%s lists %v, want %v", ns, got, inNS)
	}
}

// checkK8sListed asks meshdns for a listed Service's name and its ready
// endpoints' hostnames.
func checkK8sListed(t *testing.T, addr, zone string, sv esvcListed, shapes map[string]int) {
	t.Helper()
	shapes[sv.Kind]++
	name := fmt.Sprintf("%s.%s.svc.%s.", sv.Name, sv.Namespace, zone)
	var eps []k8sListedEndpoint
	if err := json.Unmarshal(sv.Endpoints, &eps); err != nil {
		t.Fatalf("%s: endpoints %s: %v", name, sv.Endpoints, err)
	}
	switch {
	case sv.NXDomain:
		if r := Query(t, addr, name, dns.TypeA, "udp"); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s listed NXDOMAIN, answers %s", name, dns.RcodeToString[r.Rcode])
		}
		return
	case sv.CNAME != "" && len(sv.Addresses) == 0:
		shapes["cname"]++
		r := Query(t, addr, name, dns.TypeCNAME, "udp")
		if len(r.Answer) != 1 || !strings.EqualFold(r.Answer[0].(*dns.CNAME).Target, dns.Fqdn(sv.CNAME)) {
			t.Fatalf("%s CNAME = %v, listed %s", name, r.Answer, sv.CNAME)
		}
	default:
		checkFamilies(t, addr, name, sv.Addresses, true)
	}
	if sv.Kind == "Headless" && len(sv.Addresses) > 0 {
		var all []string
		for _, ep := range eps {
			for _, a := range ep.Addresses {
				if _, err := netip.ParseAddr(a); err == nil { // FQDNs beside IPs: the IPs answer
					all = append(all, a)
				}
			}
		}
		slices.Sort(all)
		if all = slices.Compact(all); !slices.Equal(all, sortedCopy(sv.Addresses)) {
			t.Fatalf("%s: addresses %v, its listed ready endpoints' %v", name, sv.Addresses, all)
		}
	}
	if sv.Kind == "ExternalName" {
		return
	}
	for _, ep := range eps {
		if _, err := netip.ParseAddr(ep.Addresses[0]); ep.Hostname == "" || err != nil {
			continue // no hostname, or an FQDN endpoint
		}
		shapes["hostname"]++
		checkFamilies(t, addr, ep.Hostname+"."+name, ep.Addresses, false)
	}
}

// checkFamilies asks name for A and AAAA: the answers are exactly addrs
// (exact), or hold every one of them.
func checkFamilies(t *testing.T, addr, name string, addrs []string, exact bool) {
	t.Helper()
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		var want []string
		for _, a := range addrs {
			if strings.Contains(a, ":") == (qt == dns.TypeAAAA) {
				want = append(want, a)
			}
		}
		got, err := answersOf(addr, name, qt)
		if err != nil {
			t.Fatal(err)
		}
		ok := slices.Equal(got, sortedCopy(want))
		if !exact {
			ok = true
			for _, w := range want {
				ok = ok && slices.Contains(got, w)
			}
		}
		if !ok {
			t.Fatalf("%s %s = %v, listed %v", name, dns.TypeToString[qt], got, want)
		}
	}
}
