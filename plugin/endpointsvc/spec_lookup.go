package endpointsvc

import (
	"errors"
	"net/netip"
	"strings"
)

// The lookups of schema kubernetes follow the Kubernetes DNS specification
// (schema 1.1.0) the way CoreDNS's kubernetes plugin answers it, so that
// meshdns can replace it: specRecords finds what a name stands for as a
// list of items (an address with a port, or a CNAME target), and
// spec_serve.go turns the items into records per query type, with the
// same NXDOMAIN/NODATA rules.

// errSpecName means the name does not exist (NXDOMAIN).
var errSpecName = errors.New("no such name")

// specReq is a parsed query name: [<endpoint>.|<port>.<proto>.]<service>.<namespace>.<svc|pod>.
type specReq struct {
	pod       bool // the pod subtree
	namespace string
	service   string // for pods: the pod's address label
	endpoint  string
	port      string // without one leading underscore; "" matches any
	protocol  string
}

// specItem is one thing a name stands for (the kubernetes plugin's
// msg.Service): an address (ip valid) with a port (-1: none), or a CNAME
// target (host). svc and ep give the SRV target: <label of endpoint
// ep>.<svc>.<ns>.svc, <svc>.<ns>.svc without an endpoint (ep -1);
// <pod>.<podNS>.pod for a pod.
type specItem struct {
	ip    netip.Addr
	host  string
	port  int
	svc   *specSvc
	ep    int
	pod   string
	podNS string
}

// target is the item's SRV target (and the owner of its additional
// address record) in zone (the query's spelling of it).
func (it *specItem) target(zone string) string {
	switch {
	case it.podNS != "":
		return it.pod + "." + it.podNS + ".pod." + zone
	case it.ep >= 0:
		return it.svc.label(it.ep) + "." + it.svc.name + "." + it.svc.namespace + ".svc." + zone
	}
	return it.svc.name + "." + it.svc.namespace + ".svc." + zone
}

// relative returns name (lowercased FQDN) without zone (lowercased FQDN)
// and the dot between them.
func relative(name, zone string) string {
	if zone == "." {
		return strings.TrimSuffix(name, ".")
	}
	if len(name) <= len(zone) {
		return ""
	}
	return name[:len(name)-len(zone)-1]
}

// parseSpec parses rel, a name relative to its zone. empty reports the
// names that exist without records (the apex, svc, pod); a name of no
// shape of the specification is an error.
func parseSpec(rel string) (r specReq, empty bool, err error) {
	if rel == "" || rel == "svc" || rel == "pod" {
		return r, true, nil
	}
	// labels from the right: svc|pod, namespace, service, then one
	// endpoint or a port and a protocol (no allocation: substrings of rel)
	var segs [6]string
	n := 0
	for rest := rel; ; n++ {
		if n == len(segs) {
			return r, false, errSpecName
		}
		i := strings.LastIndexByte(rest, '.')
		segs[n] = rest[i+1:]
		if i < 0 {
			n++
			break
		}
		rest = rest[:i]
	}
	switch segs[0] {
	case "svc":
	case "pod":
		r.pod = true
	default:
		return r, false, errSpecName
	}
	r.namespace = segs[1]
	if n == 2 {
		return r, false, nil
	}
	r.service = segs[2]
	switch n {
	case 3:
	case 4:
		r.endpoint = segs[3]
	case 5:
		r.port, r.protocol = strings.TrimPrefix(segs[4], "_"), strings.TrimPrefix(segs[3], "_")
	default:
		return r, false, errSpecName
	}
	return r, false, nil
}

// specRecords returns the items of name (lowercased FQDN) in zone.
func (e *Endpointsvc) specRecords(t *specTable, name, zone string) ([]specItem, error) {
	r, empty, err := parseSpec(relative(name, zone))
	if err != nil || empty {
		return nil, err
	}
	if isReverseZone(name) {
		return nil, errSpecName
	}
	if _, ok := t.namespaces[r.namespace]; !ok {
		return nil, errSpecName
	}
	if r.pod {
		return e.specPods(r)
	}
	if r.service == "" {
		return nil, nil // a namespace: NODATA
	}
	s := t.services[svcKey{r.namespace, r.service}]
	if s == nil {
		return nil, errSpecName
	}
	var items []specItem
	switch {
	case s.external != "":
		if r.endpoint != "" || r.port != "" || r.protocol != "" {
			return nil, errSpecName
		}
		return []specItem{{host: s.external, port: -1, svc: s, ep: -1}}, nil
	case s.cname != "" && r.endpoint == "":
		// a headless Service of FQDN endpoints (a Knative Route): one CNAME
		for _, p := range s.portsOrNone() {
			if matchPort(r, p.Name, p.Protocol) {
				items = append(items, specItem{host: s.cname, port: p.Port, svc: s, ep: -1})
			}
		}
	case s.headless || r.endpoint != "":
		var want netip.Addr
		if r.endpoint != "" {
			want = labelAddr(r.endpoint)
		}
		run := 0
		for i := range s.eps {
			for int32(i) >= s.epPorts[run].end {
				run++
			}
			if r.endpoint != "" && !s.isLabel(i, r.endpoint, want) {
				continue
			}
			ports := s.epPorts[run].ports
			if len(ports) == 0 {
				if matchPort(r, "", "") {
					items = append(items, specItem{ip: s.addr(i), port: -1, svc: s, ep: i})
				}
				continue
			}
			for _, p := range ports {
				if matchPort(r, p.Name, p.Protocol) {
					items = append(items, specItem{ip: s.addr(i), port: p.ContainerPort, svc: s, ep: i})
				}
			}
		}
	default:
		found := false
		for _, p := range s.portsOrNone() {
			if !matchPort(r, p.Name, p.Protocol) {
				continue
			}
			found = true
			for _, ip := range s.clusterIPs {
				items = append(items, specItem{ip: ip, port: p.Port, svc: s, ep: -1})
			}
		}
		if found && items == nil {
			items = []specItem{} // a port that matched: the name exists
		}
	}
	if items == nil {
		return nil, errSpecName
	}
	return items, nil
}

// noPort stands for the ports of a Service or slice that declares none
// (the kubernetes plugin's port -1): it matches only requests without port
// labels and gives no SRV record.
var noPort = []ServicePort{{Port: -1}}

// portsOrNone returns the Service's ports, or noPort.
func (s *specSvc) portsOrNone() []ServicePort {
	if len(s.ports) == 0 {
		return noPort
	}
	return s.ports
}

// matchPort reports whether a port (name, protocol) is one the request
// asks for; an empty request label matches any.
func matchPort(r specReq, name, protocol string) bool {
	return (r.port == "" || strings.EqualFold(r.port, name)) && (r.protocol == "" || strings.EqualFold(r.protocol, protocol))
}

// specPods answers <a-b-c-d>.<namespace>.pod names: with pods insecure the
// address written in the label, whether or not such a pod exists (as the
// kubernetes plugin's "pods insecure"); otherwise nothing exists there.
func (e *Endpointsvc) specPods(r specReq) ([]specItem, error) {
	if !e.podsInsecure {
		return nil, errSpecName
	}
	if r.service == "" {
		return nil, nil
	}
	a := labelAddr(r.service)
	if !a.IsValid() {
		return nil, errSpecName
	}
	return []specItem{{ip: a, port: 0, ep: -1, pod: r.service, podNS: r.namespace}}, nil
}
