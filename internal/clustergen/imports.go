package clustergen

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// Multicluster (Config.Imports): ServiceImports of the MCS API
// (multicluster.x-k8s.io/v1alpha1) and the EndpointSlices an MCS
// implementation writes for them - labelled multicluster.kubernetes.io/
// service-name and source-cluster, not kubernetes.io/service-name - which
// the kubernetes plugin's `multicluster ZONE` answers under ZONE. They are
// drawn after everything else, so that a seed without the option, and the
// rest of a seed with it, keep their draws. Their addresses come from
// ranges of their own (ImportIPv4/ImportIPv6 for ClusterSetIPs, 10.245/16
// and fd00:10:245::/48 for endpoints), never shared with the cluster's
// own objects: the stock plugin's PTR of a slice without a
// kubernetes.io/service-name label names an empty label, which no reply
// can carry, so no question asks for them.

// The ClusterSetIP ranges.
const (
	ImportIPv4 = "10.112.0.0/16"
	ImportIPv6 = "fd00:112::/64"
)

// sourceClusters are the clusters the imported endpoints come from.
var sourceClusters = []string{"east", "west", "c-3"}

// generateImports draws cfg.Imports ServiceImports with their slices, and
// slices of imports that do not exist.
func (c *Cluster) generateImports(r *rand.Rand) {
	for i := 0; i < c.cfg.Imports; i++ {
		imp := c.newImport(r, c.pickNamespace(r))
		c.Imports = append(c.Imports, imp)
		for n := r.Intn(c.cfg.MaxSlices + 1); n > 0; n-- {
			c.ImportSlices = append(c.ImportSlices, c.newImportSlice(r, imp.Namespace, imp.Name, imp))
		}
	}
	ns := c.pickNamespace(r)
	c.ImportSlices = append(c.ImportSlices, c.newImportSlice(r, ns, c.uniqueName("import", ns, "ghost"), nil))
}

// newImport is a new ServiceImport in ns: often named as a Service of ns
// (the names of both zones then coincide), ClusterSetIP (one or two IPs,
// rarely none) or Headless, with zero to two ports.
func (c *Cluster) newImport(r *rand.Rand, ns string) *mcsapi.ServiceImport {
	name := ""
	if r.Intn(2) == 0 {
		var same []string
		for _, s := range c.Services {
			if s.Namespace == ns && !c.used["import/"+ns+"/"+s.Name] {
				same = append(same, s.Name)
			}
		}
		if len(same) > 0 {
			name = same[r.Intn(len(same))]
			c.used["import/"+ns+"/"+name] = true
		}
	}
	if name == "" {
		name = c.uniqueName("import", ns, []string{"db", "api", "cache", "svc", "global-web"}[r.Intn(5)])
	}
	imp := &mcsapi.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	c.shapeImport(r, imp)
	return imp
}

// shapeImport draws an import's type, IPs and ports.
func (c *Cluster) shapeImport(r *rand.Rand, imp *mcsapi.ServiceImport) {
	imp.Spec = mcsapi.ServiceImportSpec{Type: mcsapi.ClusterSetIP, Ports: []mcsapi.ServicePort{}}
	if r.Intn(3) == 0 {
		imp.Spec.Type = mcsapi.Headless
	} else {
		switch n := r.Intn(10); {
		case n < 6:
			imp.Spec.IPs = []string{c.importIP(r, v4)}
		case n < 8:
			imp.Spec.IPs = []string{c.importIP(r, v4), c.importIP(r, v6)}
		case n < 9:
			imp.Spec.IPs = []string{c.importIP(r, v6)}
		}
	}
	for _, p := range newPorts(r, r.Intn(3)) {
		imp.Spec.Ports = append(imp.Spec.Ports, mcsapi.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
	}
}

// importIP is a ClusterSetIP of fam never handed out.
func (c *Cluster) importIP(r *rand.Rand, fam family) string {
	for {
		var ip string
		if fam == v6 {
			ip = netip.AddrFrom16([16]byte{0xfd, 0x00, 0x01, 0x12, 14: byte(r.Intn(256)), 15: byte(1 + r.Intn(255))}).String()
		} else {
			ip = netip.AddrFrom4([4]byte{10, 112, byte(r.Intn(256)), byte(1 + r.Intn(254))}).String()
		}
		if !c.used[ip] {
			c.used[ip] = true
			return ip
		}
	}
}

// mcsIP is an imported endpoint's address of fam never handed out.
func (c *Cluster) mcsIP(r *rand.Rand, fam family) string {
	for {
		var ip string
		if fam == v6 {
			ip = netip.AddrFrom16([16]byte{0xfd, 0x00, 0x00, 0x10, 0x02, 0x45, 12: byte(r.Intn(256)), 14: byte(r.Intn(256)), 15: byte(1 + r.Intn(255))}).String()
		} else {
			ip = netip.AddrFrom4([4]byte{10, 245, byte(r.Intn(255)), byte(1 + r.Intn(254))}).String()
		}
		if !c.used[ip] {
			c.used[ip] = true
			return ip
		}
	}
}

// newImportSlice is a new slice of import name in ns from one source
// cluster (imp: that import, or nil when it does not exist).
func (c *Cluster) newImportSlice(r *rand.Rand, ns, name string, imp *mcsapi.ServiceImport) *discoveryv1.EndpointSlice {
	at, fam := discoveryv1.AddressTypeIPv4, v4
	if r.Intn(4) == 0 {
		at, fam = discoveryv1.AddressTypeIPv6, v6
	}
	cluster := sourceClusters[r.Intn(len(sourceClusters))]
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.uniqueName("slice", ns, name+"-"+cluster+"-"+randomSuffix(r)),
			Labels: map[string]string{mcsapi.LabelServiceName: name, mcsapi.LabelSourceCluster: cluster, discoveryv1.LabelManagedBy: ManagedBy}},
		AddressType: at,
	}
	var ports []corev1.ServicePort
	if imp != nil {
		for _, p := range imp.Spec.Ports {
			ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
		}
	}
	sl.Ports = slicePorts(r, &corev1.Service{Spec: corev1.ServiceSpec{Ports: ports}})
	for n := 1 + r.Intn(c.cfg.MaxEndpoints); n > 0; n-- {
		sl.Endpoints = append(sl.Endpoints, c.newImportEndpoint(r, fam, name))
	}
	return sl
}

// newImportEndpoint is an imported endpoint: one or two addresses, a
// hostname sometimes, every ready/serving/terminating mix.
func (c *Cluster) newImportEndpoint(r *rand.Rand, fam family, imp string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{c.mcsIP(r, fam)}}
	if r.Intn(6) == 0 {
		e.Addresses = append(e.Addresses, c.mcsIP(r, fam))
	}
	if r.Intn(5) < 2 {
		h := fmt.Sprintf("%s-%d", shortName(imp), r.Intn(3))
		e.Hostname = &h
	}
	e.Conditions = discoveryv1.EndpointConditions{Ready: pickBool(r, 3, 1, 1), Serving: pickBool(r, 3, 1, 1), Terminating: pickBool(r, 1, 3, 1)}
	return e
}

// importStep changes an import or an imported slice.
func (c *Cluster) importStep(r *rand.Rand) Change {
	for {
		switch n := r.Intn(100); {
		case n < 15:
			imp := c.newImport(r, c.pickNamespace(r))
			c.Imports = append(c.Imports, imp)
			return Change{Add, imp.DeepCopy()}
		case n < 35 && len(c.Imports) > 0:
			i := r.Intn(len(c.Imports))
			imp := c.Imports[i].DeepCopy()
			c.shapeImport(r, imp)
			c.Imports[i] = imp
			return Change{Update, imp.DeepCopy()}
		case n < 42 && len(c.Imports) > 1:
			i := r.Intn(len(c.Imports))
			imp := c.Imports[i]
			c.Imports = slices.Delete(slices.Clone(c.Imports), i, i+1)
			c.goneImports = append(c.goneImports, gone{imp.Namespace, imp.Name})
			return Change{Delete, imp.DeepCopy()}
		case n < 65 && len(c.Imports) > 0:
			imp := c.Imports[r.Intn(len(c.Imports))]
			sl := c.newImportSlice(r, imp.Namespace, imp.Name, imp)
			c.ImportSlices = append(c.ImportSlices, sl)
			return Change{Add, sl.DeepCopy()}
		case n < 92 && len(c.ImportSlices) > 0:
			i := r.Intn(len(c.ImportSlices))
			sl := c.ImportSlices[i].DeepCopy()
			name := sl.Labels[mcsapi.LabelServiceName]
			if r.Intn(4) == 0 { // another source cluster
				sl.Labels[mcsapi.LabelSourceCluster] = sourceClusters[r.Intn(len(sourceClusters))]
			}
			fam := v4
			if sl.AddressType == discoveryv1.AddressTypeIPv6 {
				fam = v6
			}
			sl.Endpoints = nil
			for n := 1 + r.Intn(c.cfg.MaxEndpoints); n > 0; n-- {
				sl.Endpoints = append(sl.Endpoints, c.newImportEndpoint(r, fam, name))
			}
			c.ImportSlices = slices.Clone(c.ImportSlices)
			c.ImportSlices[i] = sl
			return Change{Update, sl.DeepCopy()}
		case n >= 92 && len(c.ImportSlices) > 0:
			i := r.Intn(len(c.ImportSlices))
			sl := c.ImportSlices[i]
			c.ImportSlices = slices.Delete(slices.Clone(c.ImportSlices), i, i+1)
			return Change{Delete, sl.DeepCopy()}
		}
	}
}

// importQuestions asks, in the multicluster zone z (".clusterset.local."),
// what a client could ask of imports: the apex and fixed names, each
// import with every type and its SRV names (with and without
// underscores: without, they are an endpoint and its cluster), each
// imported endpoint by <label>.<cluster> (and by its label alone, and in
// another cluster: names that do not exist), names under the cluster's
// own Services (which this zone does not answer) and deleted imports.
func (c *Cluster) importQuestions(qs *questions, z string) {
	qs.add(z[1:], dns.TypeSOA, dns.TypeNS, dns.TypeA, dns.TypeTXT)
	qs.add("dns-version"+z, dns.TypeTXT, dns.TypeA)
	for _, n := range []string{"svc", "pod", "nothing", "x.svc.svc"} {
		qs.add(n+z, dns.TypeA, dns.TypeSRV)
	}
	for _, ns := range append(c.namespaceNames(), "no-such-ns") {
		qs.add(ns+".svc"+z, dns.TypeA, dns.TypeSRV)
	}
	for _, imp := range c.Imports {
		base := imp.Name + "." + imp.Namespace + ".svc" + z
		qs.add(base, allTypes...)
		for _, p := range imp.Spec.Ports {
			proto := strings.ToLower(string(p.Protocol))
			qs.add("_"+p.Name+"._"+proto+"."+base, dns.TypeSRV, dns.TypeA)
			if p.Name != "" {
				qs.add(p.Name+"."+proto+"."+base, dns.TypeSRV, dns.TypeA)
				qs.add("_"+p.Name+"."+proto+"."+base, dns.TypeSRV)
			}
		}
		qs.add("_tcp."+base, dns.TypeSRV)
		qs.add("no-such-endpoint."+base, dns.TypeA)
		qs.add("a.b.c."+base, dns.TypeA)
	}
	for _, sl := range c.ImportSlices {
		name, cluster := sl.Labels[mcsapi.LabelServiceName], sl.Labels[mcsapi.LabelSourceCluster]
		base := name + "." + sl.Namespace + ".svc" + z
		for _, p := range sl.Ports {
			if p.Name != nil && p.Protocol != nil {
				qs.add("_"+*p.Name+"._"+strings.ToLower(string(*p.Protocol))+"."+base, dns.TypeSRV)
			}
		}
		for _, e := range sl.Endpoints {
			labels := []string{}
			if e.Hostname != nil {
				labels = append(labels, *e.Hostname)
			}
			for _, a := range e.Addresses {
				labels = append(labels, dashed(a))
			}
			for _, l := range labels {
				qs.add(l+"."+cluster+"."+base, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT)
				qs.add(l+"."+base, dns.TypeA)
				qs.add(l+".no-cluster."+base, dns.TypeA)
			}
		}
	}
	for i, s := range c.Services {
		if i%3 == 0 {
			qs.add(s.Name+"."+s.Namespace+".svc"+z, dns.TypeA, dns.TypeSRV)
		}
	}
	for _, g := range c.goneImports {
		qs.add(g.service+"."+g.namespace+".svc"+z, dns.TypeA, dns.TypeSRV)
	}
}
