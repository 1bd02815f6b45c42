package clustergen

import (
	"strings"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The one difference from the stock kubernetes plugin that meshdns keeps
// on purpose in its answers (docs/cluster-dns.md, "Checked against the
// stock plugin"): a Service whose ready endpoints give more than one CNAME
// candidate. The stock plugin answers one CNAME per FQDN address and port,
// so a name gets several CNAMEs, or CNAMEs beside A/AAAA records - invalid
// DNS (RFC 1034 §3.6.2: a name with a CNAME has no other data); meshdns
// answers one CNAME, and none beside addresses. The in-package comparison
// (plugin/endpointsvc) and the end-to-end one (test/) both take the rule
// from here, so the two cannot drift apart.

// CNAMEConflicts are the names of a cluster state where the stock plugin
// answers several CNAMEs or CNAMEs beside addresses.
type CNAMEConflicts struct {
	zone     string   // the cluster zone, ".<zone>." lowercased
	services []string // "<service>.<namespace>.svc.<zone>." of each conflicted Service
}

// CNAMEConflicts returns the conflicted Services of c as it is now: those
// whose ready endpoints (ready unset counts as ready) give FQDN items
// (address × port, a slice without ports counting as one port) beside any
// other item. Their names, and the names of their endpoints and ports,
// are the names the conflict touches.
func (c *Cluster) CNAMEConflicts() CNAMEConflicts {
	cc := CNAMEConflicts{zone: "." + strings.ToLower(dns.Fqdn(c.cfg.Zone))}
	for _, s := range c.Services {
		fqdn, other := 0, 0
		for _, sl := range c.Slices {
			if sl.Namespace != s.Namespace || sl.Labels[discoveryv1.LabelServiceName] != s.Name {
				continue
			}
			ports := max(len(sl.Ports), 1)
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
					continue
				}
				if sl.AddressType == discoveryv1.AddressTypeFQDN {
					fqdn += len(ep.Addresses) * ports
				} else {
					other += len(ep.Addresses) * ports
				}
			}
		}
		if fqdn > 0 && fqdn+other > 1 {
			cc.services = append(cc.services, s.Name+"."+s.Namespace+".svc"+cc.zone)
		}
	}
	return cc
}

// Services lists the conflicted Services as "<service>.<namespace>".
func (cc CNAMEConflicts) Services() []string {
	out := make([]string, len(cc.services))
	for i, s := range cc.services {
		out[i] = strings.TrimSuffix(s, ".svc"+cc.zone)
	}
	return out
}

// Covers reports whether question q, which the stock plugin answered with
// stock (nil: no reply), is of the conflict's shape: an A, AAAA or CNAME
// question whose name, or the owner of a CNAME in the stock reply (a name
// the answer chains through), is a conflicted Service's name or a name
// under it.
func (cc CNAMEConflicts) Covers(q Question, stock *dns.Msg) bool {
	if q.Type != dns.TypeA && q.Type != dns.TypeAAAA && q.Type != dns.TypeCNAME {
		return false
	}
	owners := []string{strings.ToLower(q.Name)}
	if stock != nil {
		for _, rr := range stock.Answer {
			if rr.Header().Rrtype == dns.TypeCNAME {
				owners = append(owners, strings.ToLower(rr.Header().Name))
			}
		}
	}
	for _, s := range cc.services {
		for _, o := range owners {
			if dns.IsSubDomain(s, o) {
				return true
			}
		}
	}
	return false
}

// OneCNAME reports whether every owner name in m's answer section has at
// most one CNAME and no other record beside a CNAME: meshdns's answer in
// place of the stock plugin's (a nil m, no reply, is not such an answer).
func OneCNAME(m *dns.Msg) bool {
	if m == nil {
		return false
	}
	cnames, others := map[string]int{}, map[string]bool{}
	for _, rr := range m.Answer {
		name := strings.ToLower(rr.Header().Name)
		if rr.Header().Rrtype == dns.TypeCNAME {
			cnames[name]++
		} else {
			others[name] = true
		}
	}
	for name, n := range cnames {
		if n > 1 || others[name] {
			return false
		}
	}
	return true
}

// Deliberate reports whether a difference on question q between the stock
// plugin's reply stock and meshdns's reply ours is the kept one: q is of
// the conflict's shape (Covers) and ours answers at most one CNAME per
// name and none beside other data (OneCNAME).
func (cc CNAMEConflicts) Deliberate(q Question, stock, ours *dns.Msg) bool {
	return cc.Covers(q, stock) && OneCNAME(ours)
}
