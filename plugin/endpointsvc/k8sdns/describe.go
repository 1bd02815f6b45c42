package k8sdns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Describe writes out everything t holds, in a fixed order, whatever the
// shape of its tries and whichever objects (of equal content) it shares:
// two tables with equal descriptions answer alike. For tests and
// debugging; it costs a pass over the whole table.
func (t *Table) Describe() string {
	var b strings.Builder
	nss := make([]string, 0, len(t.namespaces))
	for ns := range t.namespaces {
		nss = append(nss, ns)
	}
	slices.Sort(nss)
	fmt.Fprintf(&b, "namespaces %v\nservices %d endpoints %d conflicts %d\n", nss, t.services, t.endpoints, t.conflicts)
	type kv struct {
		k Key
		e *entry
	}
	var names []kv
	for k, e := range t.names.All() {
		names = append(names, kv{k, e})
	}
	for k, e := range t.imports.All() {
		names = append(names, kv{k, e})
	}
	slices.SortFunc(names, func(a, b kv) int { return a.k.Compare(b.k) })
	fmt.Fprintf(&b, "imports %d\n", t.nimports)
	for _, x := range names {
		e := x.e
		fmt.Fprintf(&b, "name %v: svc %+v v4 %x v6 %x fqdn %q ready %d conflict %v\n", x.k, e.svc, e.v4, e.v6, e.fqdn, e.ready, e.conflict)
		for _, sl := range e.slices {
			fmt.Fprintf(&b, "  slice %s/%s %s %v import=%q cluster=%q %+v\n", sl.Namespace, sl.Name, sl.Type, sl.Ports, sl.Import, sl.Cluster, sliceEndpoints(sl))
		}
	}
	type rv struct {
		a    netip.Addr
		refs []string
	}
	var revs []rv
	for a, rs := range t.rev.All() {
		x := rv{a: netip.AddrFrom16(a).Unmap()}
		for _, r := range rs.list() {
			if r.slice == clusterIP {
				s := t.refSvc(r)
				x.refs = append(x.refs, "svc "+s.Namespace+"/"+s.Name)
			} else {
				sl := t.refSlice(r)
				x.refs = append(x.refs, fmt.Sprintf("ep %s/%s/%s#%d", sl.Namespace, sl.Service, sl.Name, r.ep))
			}
		}
		revs = append(revs, x)
	}
	slices.SortFunc(revs, func(a, b rv) int { return a.a.Compare(b.a) })
	for _, x := range revs {
		fmt.Fprintf(&b, "rev %s %v\n", x.a, x.refs)
	}
	for ip, ks := range t.ext.All() {
		fmt.Fprintf(&b, "external %s %v\n", ip, ks)
	}
	for _, p := range t.Pods() {
		fmt.Fprintf(&b, "pod %s %v\n", p.Addr, p.Namespaces)
	}
	return b.String()
}

func sliceEndpoints(sl *Slice) []string {
	var out []string
	for i, e := range sl.Endpoints {
		out = append(out, fmt.Sprintf("%v host=%q node=%q pod=%q %d%d%d", sl.Addresses(i), sl.Hostname(i), e.Node(), sl.TargetRef(i), e.Ready, e.Serving, e.Terminating))
	}
	return out
}
