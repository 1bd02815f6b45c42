package k8sdns

import (
	"net/netip"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
)

// AutoPath is the search path of the client that asked state's question,
// for CoreDNS's autopath plugin, as the kubernetes plugin makes it with
// pods verified: nil (no autopath) when the question is in none of the
// zones or no Pod has the client's address; else
// <ns>.svc.<zone>, svc.<zone>, <zone>, then the server's own search list
// (Search) and the empty sentinel, with <ns> the client Pod's namespace
// and <zone> the longest of the zones the question is in. It reads only
// the table's pod index, so it works from a snapshot while the API server
// is away. An address of Pods in several namespaces (hostNetwork Pods)
// gives the first namespace in order; the kubernetes plugin takes any one
// of them (its index's order).
func (s *Server) AutoPath(t *Table, state request.Request) []string {
	if !s.PodsVerified || t == nil {
		return nil
	}
	zone := plugin.Zones(s.Zones).Matches(state.Name())
	if zone == "" {
		return nil
	}
	ip, err := netip.ParseAddr(state.IP())
	if err != nil {
		return nil
	}
	nss := t.PodNamespaces(ip)
	if len(nss) == 0 {
		return nil
	}
	ns := nss[0]
	search := make([]string, 0, 4+len(s.Search))
	if zone == "." {
		search = append(search, ns+".svc.", "svc.", ".")
	} else {
		search = append(search, ns+".svc."+zone, "svc."+zone, zone)
	}
	search = append(search, s.Search...)
	return append(search, "") // the sentinel: the name as asked
}
