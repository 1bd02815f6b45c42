package k8sdns

import (
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/coredns/coredns/plugin/etcd/msg"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"

	"github.com/meshdns/meshdns/plugin/pkg/pmap"

	"github.com/miekg/dns"
)

// What the k8s_external plugin asks of its backend, answered from the
// table as the kubernetes plugin answers it (its External,
// ExternalAddress, ExternalServices and ExternalReverse): a Service's
// external IPs and LoadBalancer ingresses under <svc>.<ns>.<zone>, SRV
// per port; with headless, a headless Service's ready endpoints, and an
// endpoint name <ep>.<svc>.<ns>.<zone> of any Service without external
// IPs. The records are the kubernetes plugin's msg.Service values, the
// form k8s_external takes; keys are built as that plugin builds them, so
// SRV targets come out alike.

// extKeyPrefix is the kubernetes plugin's fake first label of msg.Service
// keys.
const extKeyPrefix = "c"

// External returns the records of name (lowercased) in k8s_external's
// zone (lowercased) for a question of qtype, and the rcode when there are
// none: NXDOMAIN for a name that does not exist, success for one that
// does (NODATA), SERVFAIL for the zone itself.
func (s *Server) External(t *Table, name, zone string, qtype uint16, headless bool) ([]msg.Service, int) {
	if qtype == dns.TypePTR {
		if ip := dnsutil.ExtractAddressFromReverse(name); ip != "" {
			svcs := s.ExternalReverse(t, ip)
			if len(svcs) == 0 {
				return nil, dns.RcodeNameError
			}
			return svcs, dns.RcodeSuccess
		}
	}
	base, _ := dnsutil.TrimZone(name, zone)
	segs := dns.SplitDomainName(base)
	last := len(segs) - 1
	if last < 0 {
		return nil, dns.RcodeServerFailure
	}
	namespace := segs[last]
	if _, ok := t.namespaces[namespace]; !ok {
		return nil, dns.RcodeNameError
	}
	last--
	if last < 0 {
		return nil, dns.RcodeSuccess
	}
	service := segs[last]
	var port, protocol, endpoint string
	switch last--; last {
	case 0:
		endpoint = strings.TrimPrefix(segs[0], "_")
	case 1:
		port, protocol = strings.TrimPrefix(segs[0], "_"), strings.TrimPrefix(segs[1], "_")
	case -1:
	default:
		return nil, dns.RcodeNameError
	}
	e, _ := t.names.Get(Key{Namespace: namespace, Name: service})
	if e == nil || e.svc == nil || e.svc.Name != service {
		return nil, dns.RcodeNameError
	}
	svc := e.svc
	key := strings.Join([]string{msg.Path(zone, extKeyPrefix), svc.Namespace, svc.Name}, "/")
	var out []msg.Service
	if headless && len(svc.ExternalIPs) == 0 && (svc.Kind == Headless || endpoint != "") {
		out = s.extEndpoints(e, key, endpoint, port, protocol)
	} else {
		for _, ip := range svc.ExternalIPs {
			for _, p := range portsOrNone(svc.Ports) {
				if matchExt(port, p.Name, protocol, p.Protocol) {
					out = append(out, msg.Service{Host: ip, Port: int(p.Port), TTL: s.TTL, Key: key})
				}
			}
		}
	}
	rcode := dns.RcodeNameError
	if len(out) > 0 {
		rcode = dns.RcodeSuccess
	}
	if qtype == dns.TypePTR {
		return nil, rcode // a name that is not a reverse one: only whether it exists
	}
	return out, rcode
}

// extEndpoints are the records of the ready endpoints of e's slices that
// endpoint (a label; "" any) names, one per address and matching port,
// keyed under base (the Service's key).
func (s *Server) extEndpoints(e *entry, base, endpoint, port, protocol string) []msg.Service {
	var out []msg.Service
	for _, sl := range e.slices {
		ports := portsOrNone(sl.Ports)
		for i := range sl.Endpoints {
			if !sl.Endpoints[i].IsReady() {
				continue
			}
			for j := range sl.Endpoints[i].Len() {
				addr := sl.Address(i, j)
				label := sl.label(i, s.EndpointPodNames, addr)
				if endpoint != "" && !strings.EqualFold(endpoint, label) {
					continue
				}
				for _, p := range ports {
					if matchExt(port, p.Name, protocol, p.Protocol) {
						out = append(out, msg.Service{Host: addr, Port: int(p.Port), TTL: s.TTL, Key: base + "/" + label})
					}
				}
			}
		}
	}
	return out
}

// matchExt is the kubernetes plugin's port and protocol match: an empty
// wanted value matches anything, else case-insensitively.
func matchExt(port, name, protocol, proto string) bool {
	return (port == "" || strings.EqualFold(port, name)) && (protocol == "" || strings.EqualFold(protocol, proto))
}

// ExternalReverse returns the Services with external IP ip (as written),
// each as the name <svc>.<ns> k8s_external makes PTR targets of.
func (s *Server) ExternalReverse(t *Table, ip string) []msg.Service {
	keys, _ := t.ext.Get(ip)
	out := make([]msg.Service, 0, len(keys))
	for _, k := range keys {
		out = append(out, msg.Service{Host: k.Name + "." + k.Namespace, TTL: s.TTL})
	}
	return out
}

// Kubernetes plugin constants k8s_external reads the headless map's keys
// with (plugin/kubernetes: Endpoint, PortProtocol).
const (
	extEndpoint     = "endpoint"
	extPortProtocol = "port.protocol"
)

// ExternalServices returns every Service's external records for a zone
// transfer: per external IP and port one record of the Service's name and
// one of its SRV name; with headless, headless Services without external
// IPs in a map by name (the kubernetes plugin's ExternalServices).
func (s *Server) ExternalServices(t *Table, zone string, headless bool) ([]msg.Service, map[string][]msg.Service) {
	zonePath := msg.Path(zone, extKeyPrefix)
	hl := make(map[string][]msg.Service)
	var out []msg.Service
	for _, e := range t.names.All() {
		svc := e.svc
		if svc == nil {
			continue
		}
		base := strings.Join([]string{zonePath, svc.Namespace, svc.Name}, "/")
		if headless && len(svc.ExternalIPs) == 0 && svc.Kind == Headless {
			for _, sl := range e.slices {
				for i := range sl.Endpoints {
					if !sl.Endpoints[i].IsReady() {
						continue
					}
					for j := range sl.Endpoints[i].Len() {
						addr := sl.Address(i, j)
						key := base + "/" + sl.label(i, s.EndpointPodNames, addr)
						for _, p := range portsOrNone(sl.Ports) {
							r := msg.Service{Host: addr, Port: int(p.Port), TTL: s.TTL, Key: key}
							hl[base+"/"+extEndpoint] = append(hl[base+"/"+extEndpoint], r)
							if p.Name == "" {
								continue // an unnamed port has no SRV name
							}
							r.Host = msg.Domain(r.Key)
							r.Key = base + "/" + strings.ToLower("_"+p.Protocol) + "/" + strings.ToLower("_"+p.Name)
							hl[r.Key+"/"+extPortProtocol] = append(hl[r.Key+"/"+extPortProtocol], r)
						}
					}
				}
			}
			continue
		}
		for _, ip := range svc.ExternalIPs {
			for _, p := range portsOrNone(svc.Ports) {
				r := msg.Service{Host: ip, Port: int(p.Port), TTL: s.TTL, Key: base}
				out = append(out, r)
				r.Key = base + "/" + strings.ToLower("_"+p.Protocol) + "/" + strings.ToLower("_"+p.Name)
				r.TargetStrip = 2
				out = append(out, r)
			}
		}
	}
	return out, hl
}

// ExternalAddress returns the name server's addresses for k8s_external's
// apex and ns1.dns.<zone>, as the kubernetes plugin finds them: the
// Services whose endpoints hold one of the server's own addresses give
// their external IPs (with headless, a headless one every ready address
// of the slice), or, when no endpoint holds any, the addresses themselves.
// The records' owner names are k8s_external's to set.
func (s *Server) ExternalAddress(t *Table, zone string, headless bool) []dns.RR {
	var local []netip.Addr
	if p := s.localIPs.Load(); p != nil {
		local = *p
	}
	var ips []netip.Addr
	found := false
	for _, ip := range local {
		rs, ok := t.rev.Get(ip.Unmap().As16())
		if !ok {
			continue
		}
		var seen []*Slice
		for _, r := range rs.list() {
			if r.slice == clusterIP {
				continue
			}
			sl := t.refSlice(r)
			if contains(seen, sl) {
				continue
			}
			seen = append(seen, sl)
			found = true
			ips = append(ips, extAddrsOfSlice(t, sl, headless)...)
		}
	}
	if !found {
		ips = local
	}
	out := make([]dns.RR, 0, len(ips))
	for _, ip := range ips {
		hdr := dns.RR_Header{Name: nsPrefix + zone, Class: dns.ClassINET, Rrtype: dns.TypeA}
		if ip.Is4() {
			out = append(out, &dns.A{Hdr: hdr, A: ip.AsSlice()})
			continue
		}
		hdr.Rrtype = dns.TypeAAAA
		out = append(out, &dns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
	}
	return out
}

// extAddrsOfSlice are the addresses a slice holding a local address gives
// k8s_external: with headless and a headless Service every ready address
// of the slice, else the Service's external IPs that are addresses (an
// ingress hostname is none: the kubernetes plugin would make an empty
// record of it).
func extAddrsOfSlice(t *Table, sl *Slice, headless bool) []netip.Addr {
	e, _ := t.names.Get(Key{Namespace: sl.Namespace, Name: sl.Service})
	if e == nil || e.svc == nil || e.svc.Name != sl.Service {
		return nil
	}
	var out []netip.Addr
	if headless && e.svc.Kind == Headless {
		if sl.Type == FQDN {
			return nil
		}
		for i := range sl.Endpoints {
			if !sl.Endpoints[i].IsReady() {
				continue
			}
			for j := range sl.Endpoints[i].Len() {
				out = append(out, sl.Addr(i, j))
			}
		}
		return out
	}
	for _, x := range e.svc.ExternalIPs {
		if ip := net.ParseIP(x); ip != nil {
			a, _ := netip.AddrFromSlice(ip)
			out = append(out, a.Unmap())
		}
	}
	return out
}

// extIndex maps each external IP (as written) to the Services that have
// it, in key order.
func extIndex(entries []*entry) map[string][]Key {
	m := map[string][]Key{}
	for _, e := range entries {
		if e.svc == nil {
			continue
		}
		for _, ip := range e.svc.ExternalIPs {
			m[ip] = append(m[ip], e.key())
		}
	}
	for ip, ks := range m {
		slices.SortFunc(ks, Key.Compare)
		m[ip] = slices.Compact(ks)
	}
	return m
}

// extMap makes the persistent form of an external IP index.
func extMap(m map[string][]Key) *pmap.Map[string, []Key] {
	keys, vals := make([]string, 0, len(m)), make([]([]Key), 0, len(m))
	for ip, ks := range m {
		keys, vals = append(keys, ip), append(vals, ks)
	}
	return pmap.Of(strings.Compare, keys, vals)
}
