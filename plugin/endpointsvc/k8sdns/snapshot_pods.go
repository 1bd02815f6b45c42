package k8sdns

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// The pod index in the snapshot ("pods") and in the replication stream:
// namespace → the addresses of its Pods, one per Pod.

// Pods writes the pod index, after the slices; only Close may follow.
func (sw *SnapshotWriter) Pods(ps []PodAddr) error {
	if sw.pods {
		return errors.New("snapshot: the pods twice")
	}
	if sw.services >= 0 {
		sw.Buf = append(sw.Buf, "],\n\"slices\":["...)
		sw.services = -1
	}
	sw.Buf = append(sw.Buf, "],\n\"pods\":"...)
	sw.Buf = AppendPods(sw.Buf, ps)
	sw.pods = true
	return sw.Flush(false)
}

// AppendPods appends pod addresses as a JSON object of namespaces, each
// with its addresses (one per Pod), namespaces and addresses sorted.
func AppendPods(b []byte, ps []PodAddr) []byte {
	byNS := map[string][]netip.Addr{}
	for _, p := range ps {
		for _, ns := range p.Namespaces {
			byNS[ns] = append(byNS[ns], p.Addr)
		}
	}
	nss := make([]string, 0, len(byNS))
	for ns := range byNS {
		nss = append(nss, ns)
	}
	slices.Sort(nss)
	b = append(b, '{')
	for i, ns := range nss {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.AppendString(b, ns)
		b = append(b, ':')
		addrs := byNS[ns]
		slices.SortFunc(addrs, netip.Addr.Compare)
		b = jsonw.AppendAddrs(b, addrs)
	}
	return append(b, '}')
}

// DecodePods reads the pod index's JSON object (AppendPods's form) into
// pod addresses in address order; any address that does not parse
// rejects it whole.
func DecodePods(m map[string][]string) ([]PodAddr, error) { return decodePods(m) }

func decodePods(m map[string][]string) ([]PodAddr, error) {
	if m == nil {
		return nil, nil
	}
	byAddr := map[netip.Addr][]string{}
	for ns, addrs := range m {
		if ns == "" {
			return nil, errors.New("pods: a namespace without a name")
		}
		for _, s := range addrs {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("pods: bad address %q in namespace %q", s, ns)
			}
			a = a.Unmap()
			byAddr[a] = append(byAddr[a], ns)
		}
	}
	out := make([]PodAddr, 0, len(byAddr))
	for a, nss := range byAddr {
		slices.Sort(nss)
		out = append(out, PodAddr{Addr: a, Namespaces: nss})
	}
	slices.SortFunc(out, func(x, y PodAddr) int { return x.Addr.Compare(y.Addr) })
	return out, nil
}
