package k8sdns

import (
	"errors"
	"net/netip"
	"strings"
)

// errName means the name does not exist (NXDOMAIN).
var errName = errors.New("no such name")

// nameReq is a parsed query name, read as the kubernetes plugin reads it
// (its parseRequest): [<endpoint>.|<port>.<protocol>.]<service>.<namespace>.<svc|pod>,
// and in a multicluster zone also <endpoint>.<cluster>.<service>.<namespace>.<svc|pod>.
// Its strings are substrings of the name, so parsing does not allocate.
type nameReq struct {
	pod       bool // the pod subtree
	namespace string
	service   string // for pods: the pod's address label
	endpoint  string
	cluster   string // multicluster: the endpoint's cluster (its slice's source-cluster label)
	port      string // without one leading underscore; "" matches any
	protocol  string
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

// parseRequest parses rel, a name relative to its zone (mc: a multicluster
// zone, where two labels left of the service are an endpoint and its
// cluster unless either begins with an underscore). empty reports the
// names that exist without records (the apex, svc, pod); a name of no
// shape of the specification is errName.
func parseRequest(rel string, mc bool) (r nameReq, empty bool, err error) {
	if rel == "" || rel == "svc" || rel == "pod" {
		return r, true, nil
	}
	// labels from the right: svc|pod, namespace, service, then one
	// endpoint or a port and a protocol
	var segs [6]string
	n := 0
	for rest := rel; ; n++ {
		if n == len(segs) {
			return r, false, errName
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
		return r, false, errName
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
		if mc && !strings.HasPrefix(segs[4], "_") && !strings.HasPrefix(segs[3], "_") {
			r.endpoint, r.cluster = segs[4], segs[3]
			break
		}
		r.port, r.protocol = strings.TrimPrefix(segs[4], "_"), strings.TrimPrefix(segs[3], "_")
	default:
		return r, false, errName
	}
	return r, false, nil
}

// matchPort reports whether a port (name, protocol) is one the request
// asks for; an empty request label matches any.
func (r *nameReq) matchPort(p *Port) bool {
	return (r.port == "" || strings.EqualFold(r.port, p.Name)) && (r.protocol == "" || strings.EqualFold(r.protocol, p.Protocol))
}

// noPort stands for the ports of a Service or slice that declares none
// (the kubernetes plugin's port -1): it matches requests without port
// labels only, and gives no SRV record.
var noPort = []Port{{Port: -1}}

func portsOrNone(ps []Port) []Port {
	if len(ps) == 0 {
		return noPort
	}
	return ps
}

// endpointLabel is the DNS label of an endpoint address without a
// hostname, as the kubernetes plugin writes it: dots (IPv4, FQDN) or
// colons (IPv6) become dashes, and an IPv6 label that would end in a dash
// gets a 0.
func endpointLabel(address string) string {
	if strings.Contains(address, ".") {
		return strings.ReplaceAll(address, ".", "-")
	}
	s := strings.ReplaceAll(address, ":", "-")
	if strings.HasSuffix(s, "-") {
		s += "0"
	}
	return s
}

// labelAddr reads an endpoint or pod label as the address it is made of
// (10-244-1-5, fd00--1), as the kubernetes plugin reads pod names:
// invalid when it is none.
func labelAddr(l string) netip.Addr {
	var s string
	if strings.Count(l, "-") == 3 && !strings.Contains(l, "--") {
		s = strings.ReplaceAll(l, "-", ".")
	} else {
		s = strings.ReplaceAll(l, "-", ":")
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}
	}
	return a.Unmap()
}
