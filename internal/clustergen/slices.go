package clustergen

import (
	"fmt"
	"math/rand"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by label of every
// generated slice (no controller of a real cluster touches them).
const ManagedBy = "clustergen"

// Node names endpoints run on (DNS-1123 subdomains; no Node object needed).
var nodeNames = []string{"node-a", "node-b", "worker-1.example"}

// newSlice is a new EndpointSlice labelled for Service svcName in ns; svc
// is that Service, or nil when it does not exist.
func (c *Cluster) newSlice(r *rand.Rand, ns, svcName string, svc *corev1.Service) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	switch n := r.Intn(20); {
	case n < 5:
		at = discoveryv1.AddressTypeIPv6
	case n < 7:
		at = discoveryv1.AddressTypeFQDN
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.uniqueName("slice", ns, svcName+"-"+randomSuffix(r)),
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: ManagedBy}},
		AddressType: at,
		Ports:       slicePorts(r, svc),
	}
	for n := r.Intn(c.cfg.MaxEndpoints + 1); n > 0; n-- {
		sl.Endpoints = append(sl.Endpoints, c.newEndpoint(r, sl))
	}
	return sl
}

// randomSuffix is five letters and digits, as a generated name has.
func randomSuffix(r *rand.Rand) string {
	const chars = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = chars[r.Intn(len(chars))]
	}
	return string(b)
}

// slicePorts are the ports of a slice of svc: mostly the Service's ports
// with their target port numbers (as the EndpointSlice controller writes
// them), sometimes only some of them, ports that differ from the
// Service's, or none at all (nil or empty).
func slicePorts(r *rand.Rand, svc *corev1.Service) []discoveryv1.EndpointPort {
	var sps []corev1.ServicePort
	if svc != nil {
		sps = svc.Spec.Ports
	}
	switch n := r.Intn(20); {
	case n == 0:
		return nil
	case n == 1:
		return []discoveryv1.EndpointPort{}
	case n < 4 || len(sps) == 0:
		sps = newPorts(r, 1+r.Intn(2)) // ports that differ from the Service's
	case n < 6:
		sps = sps[:1]
	}
	ps := make([]discoveryv1.EndpointPort, 0, len(sps))
	for _, sp := range sps {
		name, proto, port := sp.Name, sp.Protocol, sp.TargetPort.IntVal
		if port == 0 {
			port = sp.Port
		}
		ps = append(ps, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
	}
	return ps
}

// newEndpoint is an endpoint of slice sl: one to three addresses of its
// type, a hostname or not, node and pod or not, and any mix of the three
// conditions, each of them possibly unset.
func (c *Cluster) newEndpoint(r *rand.Rand, sl *discoveryv1.EndpointSlice) discoveryv1.Endpoint {
	var e discoveryv1.Endpoint
	n := 1
	if k := r.Intn(10); k >= 9 {
		n = 3
	} else if k >= 7 {
		n = 2
	}
	seen := map[string]bool{}
	for len(e.Addresses) < n {
		a := c.endpointAddress(r, sl)
		if !seen[a] {
			seen[a] = true
			e.Addresses = append(e.Addresses, a)
		}
	}
	svc := sl.Labels[discoveryv1.LabelServiceName]
	if r.Intn(5) < 2 {
		h := fmt.Sprintf("%s-%d", shortName(svc), r.Intn(4))
		if r.Intn(30) == 0 && sl.AddressType != discoveryv1.AddressTypeFQDN {
			h = dashed(c.podIP(r, v4)) // a hostname that looks like an address
		}
		e.Hostname = &h
	}
	if r.Intn(2) == 0 {
		node := nodeNames[r.Intn(len(nodeNames))]
		e.NodeName = &node
	}
	if r.Intn(2) == 0 {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: sl.Namespace, Name: shortName(svc) + "-" + randomSuffix(r)}
	}
	if r.Intn(4) == 0 {
		zone := []string{"zone-a", "zone-b"}[r.Intn(2)]
		e.Zone = &zone
	}
	e.Conditions = discoveryv1.EndpointConditions{
		Ready:       pickBool(r, 3, 1, 1), // mostly ready
		Serving:     pickBool(r, 3, 1, 1),
		Terminating: pickBool(r, 1, 3, 1), // mostly not terminating
	}
	return e
}

// pickBool is true, false or unset (nil) in the odds given.
func pickBool(r *rand.Rand, yes, no, unset int) *bool {
	n := r.Intn(yes + no + unset)
	if n >= yes+no {
		return nil
	}
	b := n < yes
	return &b
}

// shortName is name cut to 20 characters, so that a hostname made from it
// stays a DNS label.
func shortName(name string) string {
	if len(name) > 20 {
		return strings.TrimRight(name[:20], "-")
	}
	return name
}

// dashed is an address written as the schema's endpoint and pod label.
func dashed(ip string) string {
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	d := strings.ReplaceAll(ip, ":", "-")
	if strings.HasSuffix(d, "-") {
		d += "0"
	}
	return d
}

// endpointAddress is an address for an endpoint of sl: usually a fresh pod
// address of the slice's family; sometimes one another endpoint of the
// cluster already has (a pod behind two Services), or a cluster IP (an
// ingress's Service as a Route's endpoint); for FQDN slices a name inside
// or outside the cluster domain.
func (c *Cluster) endpointAddress(r *rand.Rand, sl *discoveryv1.EndpointSlice) string {
	if sl.AddressType == discoveryv1.AddressTypeFQDN {
		if len(c.Services) > 0 && r.Intn(3) > 0 {
			t := c.Services[r.Intn(len(c.Services))]
			return fmt.Sprintf("%s.%s.svc.%s", t.Name, t.Namespace, c.cfg.Zone)
		}
		return []string{"ext.example.test", "other.example.test"}[r.Intn(2)]
	}
	fam := v4
	if sl.AddressType == discoveryv1.AddressTypeIPv6 {
		fam = v6
	}
	switch r.Intn(20) {
	case 0, 1:
		if a := c.existingAddress(r, fam, false); a != "" {
			return a
		}
	case 2:
		if a := c.existingAddress(r, fam, true); a != "" {
			return a
		}
	}
	return c.podIP(r, fam)
}

// existingAddress is an endpoint address (or with clusterIP a cluster IP)
// of family fam that the cluster has now, or "" if it has none.
func (c *Cluster) existingAddress(r *rand.Rand, fam family, clusterIP bool) string {
	var all []string
	if clusterIP {
		for _, s := range c.Services {
			for _, ip := range s.Spec.ClusterIPs {
				if ip != corev1.ClusterIPNone && familyOf(ip) == fam {
					all = append(all, ip)
				}
			}
		}
	} else {
		for _, sl := range c.Slices {
			if sl.AddressType == discoveryv1.AddressTypeFQDN || (sl.AddressType == discoveryv1.AddressTypeIPv6) != (fam == v6) {
				continue
			}
			for _, e := range sl.Endpoints {
				all = append(all, e.Addresses...)
			}
		}
	}
	if len(all) == 0 {
		return ""
	}
	return all[r.Intn(len(all))]
}

// updatedSlice is a copy of sl with one change the API allows (the address
// type is immutable): an endpoint added, removed or replaced, one
// endpoint's conditions or hostname changed, new ports, or the slice moved
// to another Service (its service-name label changed).
func (c *Cluster) updatedSlice(r *rand.Rand, sl *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	n := sl.DeepCopy()
	i := -1
	if len(n.Endpoints) > 0 {
		i = r.Intn(len(n.Endpoints))
	}
	svc := c.Service(n.Namespace, n.Labels[discoveryv1.LabelServiceName])
	switch op := r.Intn(10); {
	case op < 2 || i < 0:
		n.Endpoints = append(n.Endpoints, c.newEndpoint(r, n))
	case op < 3:
		n.Endpoints = append(n.Endpoints[:i], n.Endpoints[i+1:]...)
	case op < 4:
		n.Endpoints[i] = c.newEndpoint(r, n)
	case op < 7:
		e := &n.Endpoints[i]
		e.Conditions = discoveryv1.EndpointConditions{Ready: pickBool(r, 1, 1, 1), Serving: pickBool(r, 1, 1, 1), Terminating: pickBool(r, 1, 1, 1)}
	case op < 8:
		if n.Endpoints[i].Hostname != nil {
			n.Endpoints[i].Hostname = nil
		} else {
			h := shortName(n.Labels[discoveryv1.LabelServiceName]) + "-" + fmt.Sprint(r.Intn(4))
			n.Endpoints[i].Hostname = &h
		}
	case op < 9:
		n.Ports = slicePorts(r, svc)
	default:
		if len(c.Services) > 0 {
			t := c.Services[r.Intn(len(c.Services))]
			if t.Namespace == n.Namespace {
				n.Labels[discoveryv1.LabelServiceName] = t.Name
				n.Ports = slicePorts(r, t)
			}
		}
	}
	return n
}
