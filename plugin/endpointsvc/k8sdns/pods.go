package k8sdns

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/plugin/pkg/pmap"
)

// The pod index of `pods verified`: which namespaces have a Pod with a
// given address, and nothing else about Pods. The kubernetes plugin keeps
// every Pod (name, labels, addresses) for the same two questions: does a
// Pod with address A run in namespace N (<a-b-c-d>.<ns>.pod.<zone>), and
// in which namespace does the client with address A run (autopath).

// PodAddr is one address of the pod index: the namespaces of the Pods
// that have it, one entry per Pod, sorted (two Pods of one namespace with
// one address - hostNetwork Pods on one node - are two entries, as the
// kubernetes plugin answers them). No namespace: no Pod has it.
type PodAddr struct {
	Addr       netip.Addr // unmapped
	Namespaces []string
}

// podNSs are the namespaces of one address in the table, sorted.
type podNSs []string

// podIndex makes the table's pod index of a cluster's pods (addresses
// given twice are merged).
func podIndex(ps []PodAddr) *pmap.Map[[16]byte, podNSs] {
	byAddr := make(map[[16]byte][]string, len(ps))
	for _, p := range ps {
		if len(p.Namespaces) > 0 && p.Addr.IsValid() {
			k := p.Addr.Unmap().As16()
			byAddr[k] = append(byAddr[k], p.Namespaces...)
		}
	}
	keys := make([][16]byte, 0, len(byAddr))
	for k := range byAddr {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareAddr)
	vals := make([]podNSs, len(keys))
	for i, k := range keys {
		vals[i] = sortedNSs(byAddr[k])
	}
	return pmap.FromSorted(compareAddr, keys, vals)
}

func sortedNSs(nss []string) podNSs {
	out := slices.Clip(slices.Clone(nss))
	slices.Sort(out)
	return out
}

// patchPods applies pod changes to an index: each address's whole new list.
func patchPods(idx *pmap.Map[[16]byte, podNSs], ps []PodAddr) *pmap.Map[[16]byte, podNSs] {
	if len(ps) == 0 {
		return idx
	}
	ed := idx.Edit()
	for _, p := range ps {
		if !p.Addr.IsValid() {
			continue
		}
		k := p.Addr.Unmap().As16()
		if len(p.Namespaces) == 0 {
			ed.Delete(k)
			continue
		}
		ed.Set(k, sortedNSs(p.Namespaces))
	}
	return ed.Map()
}

// Pods is the table's pod index, in address order.
func (t *Table) Pods() []PodAddr {
	out := make([]PodAddr, 0, t.pods.Len())
	for k, nss := range t.pods.All() {
		out = append(out, PodAddr{Addr: netip.AddrFrom16(k).Unmap(), Namespaces: nss})
	}
	return out
}

// PodCount is the number of addresses in the pod index.
func (t *Table) PodCount() int { return t.pods.Len() }

// PodNamespaces are the namespaces of the Pods with address a, sorted
// (the table's own: not to be changed).
func (t *Table) PodNamespaces(a netip.Addr) []string {
	nss, _ := t.pods.Get(a.Unmap().As16())
	return nss
}

// ChangedPods returns the addresses whose namespaces differ between old
// and t, in address order.
func (t *Table) ChangedPods(old *Table) []netip.Addr {
	var out []netip.Addr
	a, b := t.Pods(), old.Pods()
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var c int
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = a[i].Addr.Compare(b[j].Addr)
		}
		switch {
		case c < 0:
			out = append(out, a[i].Addr)
			i++
		case c > 0:
			out = append(out, b[j].Addr)
			j++
		default:
			if !slices.Equal(a[i].Namespaces, b[j].Namespaces) {
				out = append(out, a[i].Addr)
			}
			i++
			j++
		}
	}
	return out
}

// podText is the address a pod label stands for, as the kubernetes plugin
// reads it: dashes are dots when there are three and no two in a row,
// else colons.
func podText(label string) string {
	if strings.Count(label, "-") == 3 && !strings.Contains(label, "--") {
		return strings.ReplaceAll(label, "-", ".")
	}
	return strings.ReplaceAll(label, "-", ":")
}

// verifiedPods are the items of <label>.<namespace>.pod with pods
// verified: one per Pod of that namespace with the address the label
// stands for. The kubernetes plugin looks the label's text up in its index
// of the Pods' addresses as the API writes them (canonical), so a label
// of another spelling of an address (fd00-0-0-0-0-0-0-1) names none.
func (t *Table) verifiedPods(label, namespace string) ([]item, error) {
	text := podText(label)
	a, err := netip.ParseAddr(text)
	if err != nil || a.Zone() != "" || a.String() != text {
		return nil, errName
	}
	var items []item
	for _, ns := range t.PodNamespaces(a) {
		if strings.EqualFold(ns, namespace) {
			items = append(items, item{ip: a.Unmap(), port: 0, ep: -1, pod: label, podNS: namespace})
		}
	}
	if items == nil {
		return nil, errName
	}
	return items, nil
}
