package clustergen

import (
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestDeterministic: the same seed gives the same cluster, the same steps
// and the same questions; another seed gives another cluster.
func TestDeterministic(t *testing.T) {
	run := func(seed int64) (*Cluster, []Change, []Question) {
		c := Generate(seed, Small())
		r := rand.New(rand.NewSource(seed))
		var chs []Change
		for i := 0; i < 50; i++ {
			chs = append(chs, c.Step(r))
		}
		return c, chs, Questions(c, Small(), r)
	}
	c1, ch1, q1 := run(7)
	c2, ch2, q2 := run(7)
	if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(ch1, ch2) || !reflect.DeepEqual(q1, q2) {
		t.Fatal("seed 7 gave two different runs")
	}
	if c3, _, _ := run(8); reflect.DeepEqual(c1.Services, c3.Services) {
		t.Fatal("seeds 7 and 8 gave the same Services")
	}
}

// TestValid: generated clusters, and every cluster after each of many
// steps, meet the API server's validation rules.
func TestValid(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		cfg := Small()
		if seed%3 == 0 {
			cfg.DualStack = false
		}
		c := Generate(seed, cfg)
		if errs := validCluster(c); len(errs) > 0 {
			t.Fatalf("seed %d: %d invalid objects:\n%s", seed, len(errs), strings.Join(errs, "\n"))
		}
		r := rand.New(rand.NewSource(seed))
		for i := 0; i < 200; i++ {
			before := c.Clone()
			ch := c.Step(r)
			var errs []string
			switch o := ch.Obj.(type) {
			case *corev1.Service:
				errs = validService(o)
			case *discoveryv1.EndpointSlice:
				errs = validSlice(o)
			}
			if i%25 == 24 {
				errs = append(errs, validCluster(c)...)
			}
			if len(errs) > 0 {
				t.Fatalf("seed %d step %d (%s %T): %s", seed, i, ch.Op, ch.Obj, strings.Join(errs, "\n"))
			}
			if msg := validUpdate(before, ch); msg != "" {
				t.Fatalf("seed %d step %d: %s", seed, i, msg)
			}
		}
		if !cfg.DualStack {
			for _, s := range c.Services {
				for _, ip := range s.Spec.ClusterIPs {
					if strings.Contains(ip, ":") {
						t.Fatalf("seed %d: IPv6 cluster IP %s without DualStack", seed, ip)
					}
				}
			}
		}
	}
}

// validUpdate checks that an update keeps what the API holds immutable: a
// Service's cluster IPs (unless it turns into or from ExternalName) and a
// slice's address type; and that the change's object is the cluster's.
func validUpdate(before *Cluster, ch Change) string {
	switch o := ch.Obj.(type) {
	case *corev1.Service:
		old := before.Service(o.Namespace, o.Name)
		if ch.Op != Update {
			return ""
		}
		if old == nil {
			return "update of a Service that did not exist: " + o.Name
		}
		ext := old.Spec.Type == corev1.ServiceTypeExternalName || o.Spec.Type == corev1.ServiceTypeExternalName
		if !ext && !reflect.DeepEqual(old.Spec.ClusterIPs, o.Spec.ClusterIPs) {
			return "cluster IPs changed on update of " + o.Name
		}
	case *discoveryv1.EndpointSlice:
		i := before.sliceIndex(o.Namespace, o.Name)
		if ch.Op == Update && (i < 0 || before.Slices[i].AddressType != o.AddressType) {
			return "slice update changes the address type or updates nothing: " + o.Name
		}
		if ch.Op == Add && i >= 0 {
			return "slice added twice: " + o.Name
		}
	case *corev1.Namespace:
		if ch.Op != Add {
			return "namespace " + ch.Op.String()
		}
	default:
		return "change of a " + reflect.TypeOf(ch.Obj).String()
	}
	return ""
}

// TestStepCopies: Step never mutates an object a caller holds, and the
// object of a change is a copy.
func TestStepCopies(t *testing.T) {
	c := Generate(3, Small())
	r := rand.New(rand.NewSource(3))
	held := c.Clone()
	snapshot := func(c *Cluster) string {
		var b strings.Builder
		for _, s := range c.Services {
			b.WriteString(s.String())
		}
		for _, sl := range c.Slices {
			b.WriteString(sl.String())
		}
		return b.String()
	}
	want := snapshot(held)
	for i := 0; i < 300; i++ {
		ch := c.Step(r)
		if s, ok := ch.Obj.(*corev1.Service); ok && ch.Op == Update {
			s.Spec.Ports = nil // the caller's copy
		}
	}
	if snapshot(held) != want {
		t.Fatal("steps changed objects of an earlier clone")
	}
	if errs := validCluster(c); len(errs) > 0 {
		t.Fatalf("a caller's change to a Change reached the cluster: %s", strings.Join(errs, "\n"))
	}
}

// TestQuestionsUnique: no name is asked twice with one type (in any case),
// a share of names has mixed case, and every type is asked.
func TestQuestionsUnique(t *testing.T) {
	c := Generate(11, Small())
	qs := Questions(c, Small(), rand.New(rand.NewSource(11)))
	seen, types := map[Question]bool{}, map[uint16]int{}
	mixed := 0
	for _, q := range qs {
		k := Question{strings.ToLower(q.Name), q.Type}
		if seen[k] {
			t.Fatalf("asked twice: %s", q)
		}
		seen[k] = true
		types[q.Type]++
		if q.Name != strings.ToLower(q.Name) {
			mixed++
		}
		if !dns.IsFqdn(q.Name) {
			t.Fatalf("not fully qualified: %s", q)
		}
		if _, ok := dns.IsDomainName(q.Name); !ok {
			t.Fatalf("not a domain name: %s", q)
		}
	}
	for _, ty := range allTypes {
		if types[ty] == 0 {
			t.Errorf("no question of type %s", dns.TypeToString[ty])
		}
	}
	if mixed < len(qs)/10 || mixed > len(qs)/3 {
		t.Errorf("%d of %d questions with mixed case", mixed, len(qs))
	}
	t.Logf("%d questions: %d with mixed case; by type %v", len(qs), mixed, types)
}

// TestQuestionsCover: the questions name every Service, every endpoint
// (by hostname and by dashed address), every reverse name of a cluster IP
// and an endpoint address, deleted Services and the schema's fixed names.
func TestQuestionsCover(t *testing.T) {
	c := Generate(5, Small())
	r := rand.New(rand.NewSource(5))
	for i := 0; i < 40; i++ {
		c.Step(r)
	}
	asked := map[string]bool{}
	for _, q := range Questions(c, Small(), r) {
		asked[strings.ToLower(q.Name)+" "+dns.TypeToString[q.Type]] = true
	}
	must := func(name string, ty uint16) {
		t.Helper()
		if k := name + " " + dns.TypeToString[ty]; !asked[k] {
			t.Errorf("not asked: %s", k)
		}
	}
	z := ".cluster.local."
	must("cluster.local.", dns.TypeSOA)
	must("cluster.local.", dns.TypeNS)
	must("dns-version"+z, dns.TypeTXT)
	must("svc"+z, dns.TypeA)
	for _, s := range c.Services {
		must(s.Name+"."+s.Namespace+".svc"+z, dns.TypeA)
		must(s.Name+"."+s.Namespace+".svc"+z, dns.TypeSRV)
		for _, ip := range s.Spec.ClusterIPs {
			if ip != corev1.ClusterIPNone {
				rev, _ := dns.ReverseAddr(ip)
				must(rev, dns.TypePTR)
			}
		}
	}
	for _, g := range c.gone {
		must(g.service+"."+g.namespace+".svc"+z, dns.TypeA)
	}
	for _, sl := range c.Slices {
		base := sl.Labels[discoveryv1.LabelServiceName] + "." + sl.Namespace + ".svc" + z
		for _, e := range sl.Endpoints {
			for _, a := range e.Addresses {
				must(dashed(a)+"."+base, dns.TypeA)
				if sl.AddressType != discoveryv1.AddressTypeFQDN {
					rev, _ := dns.ReverseAddr(a)
					must(rev, dns.TypePTR)
				}
			}
			if e.Hostname != nil {
				must(*e.Hostname+"."+base, dns.TypeAAAA)
			}
		}
	}
	if len(c.gone) == 0 {
		t.Error("40 steps deleted no Service")
	}
}

func TestDashed(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.5":      "10-244-1-5",
		"fd00:10:244::5":  "fd00-10-244--5",
		"fd00:10:244:3::": "fd00-10-244-3--0",
	} {
		if got := dashed(in); got != want {
			t.Errorf("dashed(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShapesCovered: a few seeds of Small (with steps) produce every shape
// the generator promises.
func TestShapesCovered(t *testing.T) {
	seen := map[string]bool{}
	for seed := int64(1); seed <= 5; seed++ {
		c := Generate(seed, Small())
		r := rand.New(rand.NewSource(seed))
		for i := 0; i < 60; i++ {
			c.Step(r)
		}
		for shape := range shapes(c) {
			seen[shape] = true
		}
	}
	for _, want := range []string{
		"ns default", "ns kube-system", "ns node", "ns pod", "ns svc", "ns dns-version",
		"kind ClusterIP", "kind NodePort", "kind LoadBalancer", "kind headless", "kind headless without ports",
		"externalname inside", "externalname outside", "cluster IPs IPv4", "cluster IPs IPv6",
		"cluster IPs IPv4,IPv6", "cluster IPs IPv6,IPv4", "publishNotReadyAddresses",
		"port unnamed", "port named", "protocol TCP", "protocol UDP", "protocol SCTP",
		"slice IPv4", "slice IPv6", "slice FQDN", "slice without ports", "slice ports differ",
		"slice of no Service", "several slices", "addresses 1", "addresses 2", "addresses 3",
		"hostname", "no hostname", "nodeName", "targetRef", "address shared", "cluster IP as endpoint",
		"ready true", "ready false", "ready unset", "serving true", "serving false", "serving unset",
		"terminating true", "terminating false", "terminating unset", "address ends in ::",
	} {
		if !seen[want] {
			t.Errorf("no %s in seeds 1-5", want)
		}
	}
}

// shapes lists the shapes c has.
func shapes(c *Cluster) map[string]bool {
	s := map[string]bool{}
	for _, ns := range c.Namespaces {
		s["ns "+ns.Name] = true
	}
	kinds := []string{"ClusterIP", "NodePort", "LoadBalancer", "headless", "headless without ports", "ExternalName"}
	clusterIPs := map[string]bool{}
	for _, svc := range c.Services {
		s["kind "+kinds[kindOf(svc)]] = true
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			if strings.HasSuffix(svc.Spec.ExternalName, ".cluster.local") {
				s["externalname inside"] = true
			} else {
				s["externalname outside"] = true
			}
		}
		var fams []string
		for _, f := range svc.Spec.IPFamilies {
			fams = append(fams, string(f))
		}
		s["cluster IPs "+strings.Join(fams, ",")] = true
		s["publishNotReadyAddresses"] = s["publishNotReadyAddresses"] || svc.Spec.PublishNotReadyAddresses
		for _, p := range svc.Spec.Ports {
			s["port unnamed"] = s["port unnamed"] || p.Name == ""
			s["port named"] = s["port named"] || p.Name != ""
			s["protocol "+string(p.Protocol)] = true
		}
		for _, ip := range svc.Spec.ClusterIPs {
			clusterIPs[ip] = true
		}
	}
	perService, owners := map[string]int{}, map[string]map[string]bool{}
	for _, sl := range c.Slices {
		svcName := sl.Labels[discoveryv1.LabelServiceName]
		svc := c.Service(sl.Namespace, svcName)
		s["slice "+string(sl.AddressType)] = true
		s["slice without ports"] = s["slice without ports"] || len(sl.Ports) == 0
		s["slice of no Service"] = s["slice of no Service"] || svc == nil
		if svc != nil && len(sl.Ports) > 0 && len(svc.Spec.Ports) > 0 && *sl.Ports[0].Name != svc.Spec.Ports[0].Name {
			s["slice ports differ"] = true
		}
		if perService[sl.Namespace+"/"+svcName]++; perService[sl.Namespace+"/"+svcName] > 1 {
			s["several slices"] = true
		}
		for _, e := range sl.Endpoints {
			endpointShapes(s, e)
			for _, a := range e.Addresses {
				if owners[a] == nil {
					owners[a] = map[string]bool{}
				}
				owners[a][sl.Namespace+"/"+svcName] = true
				s["address shared"] = s["address shared"] || len(owners[a]) > 1
				s["cluster IP as endpoint"] = s["cluster IP as endpoint"] || clusterIPs[a]
				s["address ends in ::"] = s["address ends in ::"] || strings.HasSuffix(a, "::")
			}
		}
	}
	return s
}

// endpointShapes notes the shapes of one endpoint.
func endpointShapes(s map[string]bool, e discoveryv1.Endpoint) {
	s["addresses "+strconv.Itoa(len(e.Addresses))] = true
	s["hostname"] = s["hostname"] || e.Hostname != nil
	s["no hostname"] = s["no hostname"] || e.Hostname == nil
	s["nodeName"] = s["nodeName"] || e.NodeName != nil
	s["targetRef"] = s["targetRef"] || e.TargetRef != nil
	for name, b := range map[string]*bool{"ready": e.Conditions.Ready, "serving": e.Conditions.Serving, "terminating": e.Conditions.Terminating} {
		switch {
		case b == nil:
			s[name+" unset"] = true
		case *b:
			s[name+" true"] = true
		default:
			s[name+" false"] = true
		}
	}
}
