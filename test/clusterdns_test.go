package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClusterDNSSpec serves one set of Kubernetes objects on a real
// kube-apiserver + etcd through two processes of the meshdns binary: the
// shipped cluster-DNS Corefile (deploy/kubernetes/configmap.yaml:
// endpointsvc with schema kubernetes) and the stock kubernetes plugin
// with the same options. Every name and type of the list must get the same
// rcode and the same answer, authority and additional RRsets from both.
// Then the API server is frozen: meshdns keeps its answers, and restarted
// while the API server is still frozen it gives the same answers from its
// snapshot within a second of starting; thawed, it follows new objects
// within a second.
func TestClusterDNSSpec(t *testing.T) {
	k := startKubeAPI(t)
	for _, ns := range []string{"shop", "other", "kourier-system", "demo"} {
		createNS(t, k, ns)
	}
	// ours starts before the objects exist, so that its table is built by
	// patches, one change at a time; whole starts after, so that its table
	// is built whole at the first sync: both must answer as the stock plugin
	shipped := shippedClusterCorefile(t, k.Kubeconfig)
	ours := Start(t, shipped)
	objs := createSpecObjects(t, k)
	whole := Start(t, shipped)
	stock := Start(t, stockCorefile(t, shipped, k.Kubeconfig))
	list := specQuestions(t, objs)

	// all have synced once the last object answers
	for _, s := range []*Server{ours, whole, stock} {
		within(t, 5*time.Second, s.DNS(), "last.other.svc.cluster.local", dns.TypeA, objs.last)
	}
	if n := ours.Metric("coredns_endpointsvc_syncs_total", `result="patched"`); n < 1 {
		t.Errorf("meshdns started before the objects: %v patches, want some", n)
	}

	t.Run("Differential", func(t *testing.T) {
		for _, x := range []struct {
			name string
			s    *Server
		}{{"patched", ours}, {"whole", whole}} {
			same := 0
			for _, q := range list {
				a, b := ask(x.s.DNS(), q), ask(stock.DNS(), q)
				if a != b {
					t.Errorf("%s table, %s:\n  meshdns: %s\n  stock:   %s", x.name, q, a, b)
					continue
				}
				same++
			}
			t.Logf("%s table: %d of %d questions answered alike", x.name, same, len(list))
		}
	})

	// both Knative options resolve a Route's name to its ingress
	t.Run("KnativeRoutes", func(t *testing.T) {
		within(t, time.Second, ours.DNS(), "hello.demo.svc.cluster.local", dns.TypeA, "kourier.kourier-system.svc.cluster.local.", objs.routes["hello.demo"])
		within(t, time.Second, ours.DNS(), "hello2.demo.svc.cluster.local", dns.TypeA, objs.routes["hello2.demo"])
	})

	// what meshdns answers now is what it must keep answering
	want := make([]string, len(list))
	for i, q := range list {
		want[i] = ask(ours.DNS(), q)
	}
	compare := func(t *testing.T, when string) {
		t.Helper()
		bad := 0
		for i, q := range list {
			if got := ask(ours.DNS(), q); got != want[i] {
				if bad++; bad <= 10 {
					t.Errorf("%s: %s:\n  got  %s\n  want %s", when, q, got, want[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d answers changed", when, bad, len(list))
		}
	}

	t.Run("Outage", func(t *testing.T) {
		k.Freeze()
		thawed := false
		defer func() {
			if !thawed {
				k.Thaw()
			}
		}()
		time.Sleep(500 * time.Millisecond)
		compare(t, "API server frozen")

		ours.Stop() // SIGTERM: a clean stop, which writes the last state
		start := time.Now()
		ours.start() // returns once /ready answers 200
		ready := time.Since(start)
		compare(t, "restarted while frozen")
		if took := time.Since(start); took > time.Second {
			t.Errorf("restart while frozen: every answer took %v after the start (ready after %v)", took, ready)
		} else {
			t.Logf("restarted while the API server is frozen: ready after %v, all %d answers from the snapshot after %v", ready, len(list), took)
		}

		k.Thaw()
		thawed = true
		// new objects, asked for once the table has them (the Corefile's
		// cache would keep an NXDOMAIN asked for earlier for 30 s)
		// the table's services and endpoints, from its gauges
		synced := func() (n, m int) {
			return int(ours.Metric("coredns_endpointsvc_services")), int(ours.Metric("coredns_endpointsvc_endpoints"))
		}
		n0, m0 := synced()
		start = time.Now()
		late := createService(t, k, "shop", "late", corev1.ServiceTypeClusterIP, nil)
		specSlice(t, k, "shop", "db-more", "db", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("pg", corev1.ProtocolTCP, 5432)},
			specEndpoint("10.244.9.3", "db-3", true, true, false))
		Eventually(t, time.Second, func() string {
			if n, m := synced(); n != n0+1 || m != m0+1 {
				return fmt.Sprintf("synced %d services, %d endpoints; want %d, %d", n, m, n0+1, m0+1)
			}
			return ""
		})
		t.Logf("thawed: the new objects were in the table %v after they were created", time.Since(start).Round(time.Millisecond))
		Eventually(t, time.Second, func() string {
			for _, c := range []struct {
				q    question
				want string
			}{
				{question{"late.shop.svc.cluster.local.", dns.TypeA}, "late.shop.svc.cluster.local. 0 IN A " + late.Spec.ClusterIP},
				{question{"db-3.db.shop.svc.cluster.local.", dns.TypeA}, "db-3.db.shop.svc.cluster.local. 0 IN A 10.244.9.3"},
				{question{ptrName(t, "10.244.9.3"), dns.TypePTR}, "PTR db-3.db.shop.svc.cluster.local."},
			} {
				if got := ask(ours.DNS(), c.q); !strings.Contains(got, c.want) {
					return fmt.Sprintf("%s: %s, want %s", c.q, got, c.want)
				}
			}
			return ""
		})
	})
}

// specObjects is what createSpecObjects made, for the question list.
type specObjects struct {
	clusterIPs map[string][]string // "name.ns" → cluster IPs
	endpoints  []string            // addresses of ready endpoints, for PTR
	last       string              // last.other's cluster IP
	routes     map[string]string   // Knative Route "name.ns" → the ingress's ClusterIP it resolves to
}

// createSpecObjects creates Services and EndpointSlices that cover every
// case of the specification.
func createSpecObjects(t *testing.T, k *kubeAPI) *specObjects {
	t.Helper()
	o := &specObjects{clusterIPs: map[string][]string{}}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	svc := func(ns, name string, typ corev1.ServiceType, ports []corev1.ServicePort, mod func(*corev1.Service)) {
		s := createService(t, k, ns, name, typ, func(s *corev1.Service) {
			s.Spec.Ports = ports
			if mod != nil {
				mod(s)
			}
		})
		if s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
			o.clusterIPs[name+"."+ns] = s.Spec.ClusterIPs
		}
	}
	headless := func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }
	http8080 := []discoveryv1.EndpointPort{slicePort("http", tcp, 8080)}

	// a ClusterIP Service whose port differs from the pods' port, two
	// slices, a not-ready and a terminating endpoint
	svc("shop", "web", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, nil)
	specSlice(t, k, "shop", "web-a", "web", discoveryv1.AddressTypeIPv4, http8080,
		specEndpoint("10.244.1.5", "", true, true, false), specEndpoint("10.244.1.6", "", false, false, false))
	specSlice(t, k, "shop", "web-b", "web", discoveryv1.AddressTypeIPv4, http8080,
		specEndpoint("10.244.2.9", "", true, true, false), specEndpoint("10.244.2.10", "", false, true, true))
	o.endpoints = append(o.endpoints, "10.244.1.5", "10.244.2.9", "10.244.1.6", "10.244.2.10")
	// the same name in another namespace
	svc("other", "web", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 80)}, nil)
	// NodePort, multi-port with named and unnamed... (Kubernetes wants names
	// once there are several ports: one unnamed port on its own Service)
	svc("shop", "np", corev1.ServiceTypeNodePort, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, nil)
	svc("shop", "plain", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("", tcp, 9000, 9000)}, nil)
	svc("shop", "multi", corev1.ServiceTypeClusterIP, []corev1.ServicePort{
		svcPort("http", tcp, 80, 8080), svcPort("dns", udp, 53, 5353), svcPort("dns-tcp", tcp, 53, 5353)}, nil)
	specSlice(t, k, "shop", "multi-a", "multi", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePort("http", tcp, 8080), slicePort("dns", udp, 5353), slicePort("dns-tcp", tcp, 5353)},
		specEndpoint("10.244.3.1", "", true, true, false))
	o.endpoints = append(o.endpoints, "10.244.3.1")
	// dual-stack
	svc("shop", "dual", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, func(s *corev1.Service) {
		p := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &p
	})
	// a ClusterIP Service without endpoints
	svc("shop", "empty", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, nil)
	// headless with hostnames (a StatefulSet), one not ready
	svc("shop", "db", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("pg", tcp, 5432, 5432)}, headless)
	specSlice(t, k, "shop", "db-a", "db", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("pg", tcp, 5432)},
		specEndpoint("10.244.4.1", "db-0", true, true, false), specEndpoint("10.244.4.2", "db-1", true, true, false),
		specEndpoint("10.244.4.3", "db-2", false, false, false))
	o.endpoints = append(o.endpoints, "10.244.4.1", "10.244.4.2", "10.244.4.3")
	// headless without hostnames, IPv4 and IPv6 slices, a terminating endpoint
	svc("shop", "hl", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, headless)
	specSlice(t, k, "shop", "hl-4", "hl", discoveryv1.AddressTypeIPv4, http8080,
		specEndpoint("10.244.5.1", "", true, true, false), specEndpoint("10.244.5.2", "", false, true, true))
	specSlice(t, k, "shop", "hl-6", "hl", discoveryv1.AddressTypeIPv6, http8080,
		specEndpoint("fd00:10:244::5", "", true, true, false))
	o.endpoints = append(o.endpoints, "10.244.5.1", "10.244.5.2", "fd00:10:244::5")
	// publishNotReadyAddresses: the EndpointSlice controller publishes
	// every endpoint of such a Service as ready
	svc("shop", "pnra", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("peer", tcp, 7000, 7000)}, func(s *corev1.Service) {
		headless(s)
		s.Spec.PublishNotReadyAddresses = true
	})
	specSlice(t, k, "shop", "pnra-a", "pnra", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("peer", tcp, 7000)},
		specEndpoint("10.244.6.1", "pnra-0", true, false, false), specEndpoint("10.244.6.2", "pnra-1", true, true, false))
	o.endpoints = append(o.endpoints, "10.244.6.1", "10.244.6.2")
	// a headless Service with no ready endpoint
	svc("shop", "nobody", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 80)}, headless)
	specSlice(t, k, "shop", "nobody-a", "nobody", discoveryv1.AddressTypeIPv4, http8080, specEndpoint("10.244.7.1", "", false, false, false))
	// ExternalName: to a Service of the cluster, and to an outside name
	svc("shop", "alias", corev1.ServiceTypeExternalName, nil, func(s *corev1.Service) { s.Spec.ExternalName = "web.shop.svc.cluster.local" })
	svc("shop", "ext", corev1.ServiceTypeExternalName, nil, func(s *corev1.Service) { s.Spec.ExternalName = "ext.example.test" })
	svc("shop", "dangling", corev1.ServiceTypeExternalName, nil, func(s *corev1.Service) { s.Spec.ExternalName = "gone.shop.svc.cluster.local" })
	// UDP and SCTP
	svc("other", "syslog", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("syslog", udp, 514, 514), svcPort("sig", corev1.ProtocolSCTP, 2905, 2905)}, nil)
	// Knative Routes without ExternalName (docs/knative.md): option 3, a
	// headless Service without selector and an FQDN EndpointSlice naming
	// the ingress Service; option 2, the same with an IPv4 slice holding
	// the ingress Service's ClusterIP
	svc("kourier-system", "kourier", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, nil)
	ingress := o.clusterIPs["kourier.kourier-system"][0]
	route := func(s *corev1.Service) {
		headless(s)
		s.Labels = map[string]string{"serving.knative.dev/route": s.Name}
	}
	svc("demo", "hello", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 80)}, route)
	specSlice(t, k, "demo", "hello-ingress", "hello", discoveryv1.AddressTypeFQDN, []discoveryv1.EndpointPort{slicePort("http", tcp, 80)},
		specEndpoint("kourier.kourier-system.svc.cluster.local", "", true, true, false))
	svc("demo", "hello2", corev1.ServiceTypeClusterIP, []corev1.ServicePort{svcPort("http", tcp, 80, 80)}, route)
	specSlice(t, k, "demo", "hello2-ingress", "hello2", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("http", tcp, 80)},
		specEndpoint(ingress, "", true, true, false))
	o.routes = map[string]string{"hello.demo": ingress, "hello2.demo": ingress}
	// created last: once it answers, everything before it is in
	svc("other", "last", corev1.ServiceTypeLoadBalancer, []corev1.ServicePort{svcPort("http", tcp, 80, 8080)}, nil)
	o.last = o.clusterIPs["last.other"][0]
	return o
}

// specQuestions is the differential list: every name of the objects with
// every type that matters, and names that do not exist.
func specQuestions(t *testing.T, o *specObjects) []question {
	const z = ".cluster.local."
	var qs []question
	add := func(name string, types ...uint16) {
		for _, ty := range types {
			qs = append(qs, question{name, ty})
		}
	}
	all := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeCNAME, dns.TypeMX, dns.TypeSOA, dns.TypePTR, dns.TypeHINFO}
	for _, s := range []string{"web.shop", "web.other", "np.shop", "plain.shop", "multi.shop", "dual.shop", "empty.shop",
		"db.shop", "hl.shop", "pnra.shop", "nobody.shop", "alias.shop", "ext.shop", "dangling.shop", "syslog.other", "last.other", "gone.shop", "web.nons",
		"kourier.kourier-system", "hello.demo", "hello2.demo"} {
		add(s+".svc"+z, all...)
	}
	// SRV names: named, unnamed, wrong protocol, without underscores
	for _, n := range []string{"_http._tcp.web.shop", "_http._udp.web.shop", "_http._tcp.web.other", "_http._tcp.np.shop",
		"_._tcp.plain.shop", "_dns._udp.multi.shop", "_dns-tcp._tcp.multi.shop", "_dns._tcp.multi.shop", "_._tcp.multi.shop",
		"http.tcp.multi.shop", "_http._tcp.dual.shop", "_http._tcp.empty.shop", "_pg._tcp.db.shop", "_http._tcp.hl.shop",
		"_peer._tcp.pnra.shop", "_http._tcp.nobody.shop", "_http._tcp.ext.shop", "_syslog._udp.syslog.other", "_sig._sctp.syslog.other",
		"_nope._tcp.web.shop", "_http.web.shop"} {
		add(n+".svc"+z, dns.TypeSRV, dns.TypeA, dns.TypeTXT)
	}
	// endpoint names: hostnames, generated ones, not ready, of a ClusterIP Service
	for _, n := range []string{"db-0.db.shop", "db-1.db.shop", "db-2.db.shop", "10-244-4-1.db.shop", "10-244-5-1.hl.shop",
		"10-244-5-2.hl.shop", "fd00-10-244--5.hl.shop", "pnra-0.pnra.shop", "10-244-1-5.web.shop", "10-244-1-6.web.shop",
		"10-244-3-1.multi.shop", "x.ext.shop", "a.b.c.web.shop"} {
		add(n+".svc"+z, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT)
	}
	// namespaces, the zone, dns-version, pods, other shapes
	for _, n := range []string{"shop.svc", "nons.svc", "svc", "pod", "shop.pod", "10-244-1-5.shop.pod", "1-2-3-4.nons.pod",
		"fd00--1.shop.pod", "bad-label.shop.pod", "dns-version", "nothing", "a.b.c.d"} {
		add(n+z, dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeSRV, dns.TypeSOA)
	}
	add("cluster.local.", dns.TypeSOA, dns.TypeA, dns.TypeTXT, dns.TypeMX)
	add("dns-version.in-addr.arpa.", dns.TypeTXT)
	// letter case
	add("WEB.Shop.SVC.Cluster.Local.", dns.TypeA, dns.TypeSRV)
	add("_HTTP._TCP.Db.Shop.svc.cluster.LOCAL.", dns.TypeSRV)
	add("DB-0.db.shop.svc.cluster.local.", dns.TypeA)
	// PTR: cluster IPs (both families), endpoint addresses (ready or not),
	// unknown addresses, partial reverse names
	for _, ips := range o.clusterIPs {
		for _, ip := range ips {
			add(ptrName(t, ip), dns.TypePTR)
		}
	}
	for _, ip := range o.endpoints {
		add(ptrName(t, ip), dns.TypePTR)
	}
	add("0.244.10.in-addr.arpa.", dns.TypePTR, dns.TypeA)
	add("1.0.0.10.in-addr.arpa.", dns.TypeA)
	for _, n := range []string{"shop.svc", "web.shop.svc"} {
		add(n+".in-addr.arpa.", dns.TypeA)
	}
	if len(qs) < 300 {
		t.Fatalf("only %d questions", len(qs))
	}
	return qs
}

// TestClusterDNSChurn: 1,000 rapid updates of one EndpointSlice (a rolling
// restart's worth of churn); the answers follow and end on the final state.
func TestClusterDNSChurn(t *testing.T) {
	k := startKubeAPI(t)
	createNS(t, k, "shop")
	createService(t, k, "shop", "db", corev1.ServiceTypeClusterIP, func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}
	specSlice(t, k, "shop", "db-a", "db", discoveryv1.AddressTypeIPv4, ports, specEndpoint("10.250.0.1", "db-0", true, true, false))
	srv := Start(t, `.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    endpointsvc cluster.local in-addr.arpa {
        source kubernetes `+k.Kubeconfig+`
        schema kubernetes
        snapshot snapshot.json
    }
}
`)
	within(t, 5*time.Second, srv.DNS(), "db-0.db.shop.svc.cluster.local", dns.TypeA, "10.250.0.1")
	writesBefore := srv.Metric("coredns_endpointsvc_snapshot_writes_total")

	const n = 1000
	start := time.Now()
	sl, err := k.Client.DiscoveryV1().EndpointSlices("shop").Get(ctxT(t), "db-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for i := 1; i <= n; i++ {
		last = fmt.Sprintf("10.250.%d.%d", i/200, i%200+1)
		ready := i%3 != 0 || i == n
		sl.Endpoints = []discoveryv1.Endpoint{specEndpoint(last, "db-0", ready, ready, false)}
		if sl, err = k.Client.DiscoveryV1().EndpointSlices("shop").Update(ctxT(t), sl, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	updates := time.Since(start)
	within(t, time.Second, srv.DNS(), "db-0.db.shop.svc.cluster.local", dns.TypeA, last)
	within(t, time.Second, srv.DNS(), ptrName(t, last), dns.TypePTR, "db-0.db.shop.svc.cluster.local.")
	// the churn is served by patches of the one Service, never by a whole
	// build, and the snapshot is written at most once a second
	whole := srv.Metric("coredns_endpointsvc_syncs_total", `result="updated"`)
	patches := srv.Metric("coredns_endpointsvc_syncs_total", `result="patched"`)
	writes := srv.Metric("coredns_endpointsvc_snapshot_writes_total") - writesBefore
	if whole != 1 || patches < 1 {
		t.Errorf("%v whole builds, %v patches; want 1 (the first sync) and some", whole, patches)
	}
	if max := time.Since(start).Seconds() + 2; writes > max {
		t.Errorf("%v snapshot writes in %v, want at most one a second", writes, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d slice updates in %v (%.0f/s); %v patches, %v snapshot writes", n, updates.Round(time.Millisecond),
		float64(n)/updates.Seconds(), patches, writes)
	// a clean stop writes the final state: a restart without the API
	// server answers it from the snapshot
	k.StopAPI()
	srv.Restart()
	within(t, time.Second, srv.DNS(), "db-0.db.shop.svc.cluster.local", dns.TypeA, last)
}
