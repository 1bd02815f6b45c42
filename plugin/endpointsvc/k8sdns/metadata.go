package k8sdns

import (
	"net/netip"
	"strings"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// The metadata plugin's keys, as the kubernetes plugin sets them (its
// Metadata), so that the `log`, `view`, `rewrite` and `acl` lines of a
// pasted Corefile read the same values: the client Pod's namespace (pods
// verified), and what the question's name says - kind (svc or pod),
// namespace, service, endpoint, port name, protocol (cluster in a
// multicluster zone) - or why it is no name of the schema.

// MetaPrefix begins every key: the kubernetes plugin's.
const MetaPrefix = "kubernetes/"

// Metadata calls set with each metadata key and value of state's question
// from t.
func (s *Server) Metadata(t *Table, state request.Request, set func(key, value string)) {
	if s.PodsVerified && t != nil {
		if ip, err := netip.ParseAddr(state.IP()); err == nil {
			if nss := t.PodNamespaces(ip); len(nss) > 0 {
				set(MetaPrefix+"client-namespace", nss[0])
			}
		}
	}
	name := state.Name()
	zone := plugin.Zones(s.Zones).Matches(name)
	if zone == "" {
		return
	}
	// the multicluster zone is read from state.Zone, as the kubernetes
	// plugin reads it (the metadata plugin leaves it empty)
	mc := false
	for i, z := range s.Zones {
		if z == state.Zone && i < len(s.Multicluster) && s.Multicluster[i] {
			mc = true
		}
	}
	r, err := metaParse(name, zone, mc)
	if err != nil {
		set(MetaPrefix+"parse-error", err.Error())
		return
	}
	set(MetaPrefix+"port-name", r.port)
	set(MetaPrefix+"protocol", r.protocol)
	set(MetaPrefix+"endpoint", r.endpoint)
	if mc {
		set(MetaPrefix+"cluster", r.cluster)
	}
	set(MetaPrefix+"service", r.service)
	set(MetaPrefix+"namespace", r.namespace)
	set(MetaPrefix+"kind", r.kind)
}

// metaReq is a name as the metadata keys read it.
type metaReq struct {
	kind, namespace, service, endpoint, cluster, port, protocol string
}

// metaError is the kubernetes plugin's parse error, with its text.
type metaError struct{}

func (metaError) Error() string { return "invalid query name" }

// metaParse reads name (lowercased) in zone the way the kubernetes
// plugin's request parser does: [endpoint.|_port._proto.]service.namespace.(svc|pod).zone,
// each part optional from the left; anything else is an error (its
// zone-scoped names are not read: meshdns has no zonal option).
func metaParse(name, zone string, mc bool) (r metaReq, err error) {
	base, _ := dnsutil.TrimZone(name, zone)
	if base == "" || base == "svc" || base == "pod" {
		return r, nil
	}
	segs := dns.SplitDomainName(base)
	last := len(segs) - 1
	if last < 0 {
		return r, nil
	}
	if r.kind = segs[last]; r.kind != "svc" && r.kind != "pod" {
		return r, metaError{}
	}
	parts := []*string{&r.namespace, &r.service}
	for _, p := range parts {
		if last--; last < 0 {
			return r, nil
		}
		*p = segs[last]
	}
	switch last--; last {
	case -1:
	case 0:
		r.endpoint = segs[0]
	case 1:
		if !mc || strings.HasPrefix(segs[1], "_") || strings.HasPrefix(segs[0], "_") {
			r.protocol, r.port = strings.TrimPrefix(segs[1], "_"), strings.TrimPrefix(segs[0], "_")
		} else {
			r.cluster, r.endpoint = segs[1], segs[0]
		}
	default:
		return r, metaError{}
	}
	return r, nil
}
