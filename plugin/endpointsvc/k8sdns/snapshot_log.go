package k8sdns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// The change log's record of a patch (the snapshot's change log, package
// persist, frames it): a head line, then one line per changed name, its
// record as the replication stream has it (AppendChange):
//
//	{"patch":1,"origin":"…","namespaces":["a","b"],"pods":[{"addr":"10.244.1.5","namespaces":["shop"]}]}
//	{"namespace":"shop","name":"web","service":{…},"slices":[…]}
//
// "origin" is the patched table's Origin (left out when empty),
// "namespaces" the whole new namespace list (only when the patch sets it),
// "pods" the pod index's changed addresses, each with its whole new list
// of namespaces (empty: gone). Every part is the whole new content of what
// it names, so a record replayed onto a snapshot that holds it already
// changes nothing.

type logHead struct {
	Patch      int        `json:"patch"`
	Origin     string     `json:"origin,omitempty"`
	Namespaces *[]string  `json:"namespaces,omitempty"`
	Pods       []logPodNS `json:"pods,omitempty"`
}

type logPodNS struct {
	Addr       string   `json:"addr"`
	Namespaces []string `json:"namespaces"`
}

// AppendRecord appends p's change-log record (AppendPatchRecord).
func (p *Patch) AppendRecord(b []byte) []byte { return AppendPatchRecord(b, p) }

// AppendPatchRecord appends p's change-log record. The head is appended
// by hand, byte for byte what encoding/json writes for a logHead (a
// record per patch: no reflection on the sync path).
func AppendPatchRecord(b []byte, p *Patch) []byte {
	b = append(b, `{"patch":1`...)
	if p.Origin != "" {
		b = append(b, `,"origin":`...)
		b = jsonw.AppendString(b, p.Origin)
	}
	if p.SetNamespaces {
		b = append(b, `,"namespaces":`...)
		b = jsonw.AppendStrings(b, p.Namespaces) // nil: []
	}
	if len(p.Pods) > 0 {
		b = append(b, `,"pods":[`...)
		for i, pa := range p.Pods {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"addr":`...)
			b = jsonw.AppendString(b, pa.Addr.String())
			b = append(b, `,"namespaces":`...)
			b = jsonw.AppendStrings(b, pa.Namespaces)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	for _, c := range p.Changes {
		b = append(b, '\n')
		b = AppendChange(b, c)
	}
	return b
}

// DecodePatchRecord reads a change-log record into a patch (its Changes,
// Namespaces, Pods and Origin). Any invalid part rejects the record whole.
func DecodePatchRecord(b []byte) (*Patch, error) {
	lines := bytes.Split(b, []byte{'\n'})
	d := json.NewDecoder(bytes.NewReader(lines[0]))
	d.DisallowUnknownFields()
	var h logHead
	if err := d.Decode(&h); err != nil {
		return nil, fmt.Errorf("patch record: head: %w", err)
	}
	if d.More() {
		return nil, errors.New("patch record: trailing data after the head")
	}
	if h.Patch != 1 {
		return nil, fmt.Errorf("patch record: head version %d, want 1", h.Patch)
	}
	p := &Patch{Origin: h.Origin}
	if h.Namespaces != nil {
		p.Namespaces, p.SetNamespaces = *h.Namespaces, true
	}
	seen := map[netip.Addr]bool{}
	for _, pn := range h.Pods {
		a, err := netip.ParseAddr(pn.Addr)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("patch record: bad pod address %q", pn.Addr)
		}
		a = a.Unmap()
		if seen[a] {
			return nil, fmt.Errorf("patch record: pod address %s twice", a)
		}
		seen[a] = true
		if slices.Contains(pn.Namespaces, "") {
			return nil, fmt.Errorf("patch record: pod address %s: a namespace without a name", a)
		}
		p.Pods = append(p.Pods, PodAddr{Addr: a, Namespaces: slices.Sorted(slices.Values(pn.Namespaces))})
	}
	keys := map[Key]bool{}
	for i, l := range lines[1:] {
		c, err := DecodeChange(l)
		if err != nil {
			return nil, fmt.Errorf("patch record: line %d: %w", i+2, err)
		}
		if keys[c.Key] {
			return nil, fmt.Errorf("patch record: line %d: %s/%s twice", i+2, c.Key.Namespace, c.Key.Name)
		}
		keys[c.Key] = true
		p.Changes = append(p.Changes, c)
	}
	return p, nil
}

// Replay applies change-log records, in order, to the cluster of a
// snapshot, and returns the cluster they lead to and how many it applied:
// all, or those before the first that does not decode (err says which).
func Replay(c *Cluster, recs [][]byte) (*Cluster, int, error) {
	if len(recs) == 0 {
		return c, 0, nil
	}
	t := Build(c)
	for i, r := range recs {
		p, err := DecodePatchRecord(r)
		if err != nil {
			return t.Whole(), i, fmt.Errorf("change log record %d: %w", i+1, err)
		}
		t = t.Patched(p)
	}
	return t.Whole(), len(recs), nil
}
