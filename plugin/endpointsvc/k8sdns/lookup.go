package k8sdns

import (
	"net"
	"net/netip"
	"strings"
)

// The lookups follow the Kubernetes DNS specification (schema 1.1.0) the
// way CoreDNS's kubernetes plugin answers it (its Records, findServices,
// findPods), so that meshdns can replace it: records finds what a name
// stands for as a list of items (an address with a port, or a CNAME
// target), and serve.go turns the items into records per query type,
// with the same NXDOMAIN/NODATA rules.

// item is one thing a name stands for (the kubernetes plugin's
// msg.Service): an address (ip valid) or a CNAME target (host), with a
// port (-1: none). svc, slice and ep give its SRV target:
// <label of endpoint ep>.<svc>.<ns>.svc when slice is set, else
// <svc>.<ns>.svc; <pod>.<ns>.pod for a pod.
type item struct {
	ip    netip.Addr
	host  string
	port  int32
	svc   *Service
	slice *Slice
	ep    int32
	pod   string
	podNS string
	mc    bool // an endpoint of a ServiceImport: its name has its slice's cluster
}

// label is the DNS label of the item's endpoint (podNames:
// endpoint_pod_names).
func (it *item) label(podNames bool) string {
	if it.host != "" {
		return it.slice.label(int(it.ep), podNames, it.host)
	}
	return it.slice.label(int(it.ep), podNames, it.ip.String())
}

// label is endpoint i's DNS label, as the kubernetes plugin makes it: its
// hostname; else, with podNames (endpoint_pod_names), the name of its
// target Pod when that is shorter than 64 (the kubernetes plugin keeps no
// longer one); else address with dashes.
func (sl *Slice) label(i int, podNames bool, address string) string {
	if h := sl.Hostname(i); h != "" {
		return h
	}
	if n := sl.podName(i, podNames); n != "" {
		return n
	}
	return endpointLabel(address)
}

// podName is endpoint i's target Pod name when podNames and it may be a
// label (shorter than 64), else "".
func (sl *Slice) podName(i int, podNames bool) string {
	if !podNames {
		return ""
	}
	if n := sl.TargetRef(i); len(n) < 64 {
		return n
	}
	return ""
}

// target is the item's SRV target (and the owner of its additional
// address record) in zone (the query's spelling of it).
func (it *item) target(zone string, podNames bool) string {
	switch {
	case it.podNS != "":
		return it.pod + "." + it.podNS + ".pod." + zone
	case it.slice != nil && it.mc && it.slice.Cluster != "":
		return it.label(podNames) + "." + it.slice.Cluster + "." + it.svc.Name + "." + it.svc.Namespace + ".svc." + zone
	case it.slice != nil:
		return it.label(podNames) + "." + it.svc.Name + "." + it.svc.Namespace + ".svc." + zone
	}
	return it.svc.Name + "." + it.svc.Namespace + ".svc." + zone
}

// records returns the items of request r (errName: the name does not
// exist; no items and no error: it exists without records); mc: r is a
// name of a multicluster zone.
func (s *Server) records(t *Table, r *nameReq, mc bool) ([]item, error) {
	if _, ok := t.namespaces[r.namespace]; !ok {
		return nil, errName
	}
	if r.pod {
		return s.pods(t, r)
	}
	if r.service == "" {
		return nil, nil // a namespace: NODATA
	}
	if mc {
		return s.importRecords(t, r)
	}
	e, _ := t.names.Get(Key{Namespace: r.namespace, Name: r.service})
	if e == nil || e.svc == nil {
		return nil, errName
	}
	var items []item
	switch svc := e.svc; {
	case s.IgnoreEmptyService && svc.Kind == ClusterIP && e.ready == 0:
		return nil, errName // ignore empty_service: as if the Service did not exist
	case svc.Kind == ExternalName:
		if r.endpoint != "" || r.port != "" || r.protocol != "" || net.ParseIP(svc.ExternalName) != nil {
			return nil, errName // an address is no CNAME target
		}
		items = []item{{host: svc.ExternalName, port: -1, svc: svc, ep: -1}}
	case svc.Kind == Headless || r.endpoint != "":
		items = e.endpointItems(r, s.EndpointPodNames, false)
	default:
		found := false
		for _, p := range portsOrNone(svc.Ports) {
			if !r.matchPort(&p) {
				continue
			}
			found = true
			for _, ip := range svc.ClusterIPs {
				items = append(items, item{ip: ip, port: p.Port, svc: svc, ep: -1})
			}
		}
		if found && items == nil {
			return nil, nil // a port that matched: the name exists
		}
	}
	if items == nil {
		return nil, errName
	}
	return items, nil
}

// importRecords returns the items of request r in a multicluster zone, as
// the kubernetes plugin's findMultiClusterServices finds them: a
// ServiceImport's ClusterSetIPs for each port that matches (an import
// declares its ports: none, no name - there is no port sentinel as for a
// Service), or, headless or for an endpoint name, the ready endpoints of
// the slices labelled with it, an endpoint named with its cluster.
func (s *Server) importRecords(t *Table, r *nameReq) ([]item, error) {
	e, _ := t.imports.Get(Key{Namespace: r.namespace, Name: r.service, Import: true})
	if e == nil || e.svc == nil {
		return nil, errName
	}
	var items []item
	switch imp := e.svc; {
	case s.IgnoreEmptyService && imp.Kind != Headless && e.ready == 0:
		return nil, errName
	case imp.Kind == Headless || r.endpoint != "":
		items = e.endpointItems(r, s.EndpointPodNames, true)
	default:
		found := false
		for _, p := range imp.Ports {
			if !r.matchPort(&p) {
				continue
			}
			found = true
			for _, ip := range imp.ClusterIPs {
				items = append(items, item{ip: ip, port: p.Port, svc: imp, ep: -1})
			}
		}
		if found && items == nil {
			return nil, nil
		}
	}
	if items == nil {
		return nil, errName
	}
	return items, nil
}

// endpointItems are the items of the ready endpoints of e's slices that
// r's endpoint label (if any) names, one per address and matching port;
// mc: e is a ServiceImport's, and an endpoint label names an endpoint of
// the slices of r's cluster (its source-cluster label; "" none).
func (e *entry) endpointItems(r *nameReq, podNames, mc bool) []item {
	var want netip.Addr // the label read as an address, when it is the dashed form of one
	if r.endpoint != "" {
		if a := labelAddr(r.endpoint); a.IsValid() && strings.EqualFold(endpointLabel(a.String()), r.endpoint) {
			want = a
		}
	}
	var items []item
	for _, sl := range e.slices {
		if mc && r.endpoint != "" && !strings.EqualFold(r.cluster, sl.Cluster) {
			continue
		}
		ports := portsOrNone(sl.Ports)
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			if !ep.IsReady() {
				continue
			}
			for j := range ep.Len() {
				it := item{svc: e.svc, slice: sl, ep: int32(i), mc: mc}
				if sl.Type == FQDN {
					it.host = sl.FQDNAddr(i, j)
				} else {
					it.ip = sl.Addr(i, j)
				}
				if r.endpoint != "" && !it.isLabel(r.endpoint, want, podNames) {
					continue
				}
				for _, p := range ports {
					if r.matchPort(&p) {
						it.port = p.Port
						items = append(items, it)
					}
				}
			}
		}
	}
	return items
}

// isLabel reports whether the item's endpoint label is l
// (case-insensitively); want is l read as an address when l is the dashed
// form of one, so that addresses are compared without making labels.
func (it *item) isLabel(l string, want netip.Addr, podNames bool) bool {
	if h := it.slice.Hostname(int(it.ep)); h != "" {
		return strings.EqualFold(h, l)
	}
	if n := it.slice.podName(int(it.ep), podNames); n != "" {
		return strings.EqualFold(n, l)
	}
	if it.host != "" {
		return strings.EqualFold(endpointLabel(it.host), l)
	}
	return want.IsValid() && it.ip == want
}

// pods answers <a-b-c-d>.<namespace>.pod names: with pods insecure the
// address written in the label, whether or not such a pod exists (the
// kubernetes plugin's "pods insecure"), in any namespace that exists; with
// pods verified the address when a Pod of that namespace has it
// (verifiedPods); with pods disabled nothing exists there.
func (s *Server) pods(t *Table, r *nameReq) ([]item, error) {
	if !s.PodsInsecure && !s.PodsVerified {
		return nil, errName
	}
	if r.service == "" {
		return nil, nil
	}
	if s.PodsVerified {
		return t.verifiedPods(r.service, r.namespace)
	}
	ip := net.ParseIP(podText(r.service)) // as the kubernetes plugin parses it
	if ip == nil {
		return nil, errName
	}
	a, _ := netip.AddrFromSlice(ip)
	return []item{{ip: a.Unmap(), port: 0, ep: -1, pod: r.service, podNS: r.namespace}}, nil
}
