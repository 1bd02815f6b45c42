package orch

import (
	"net/netip"
	"strconv"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// Filter selects the services a listing holds: a namespace and a service
// name, lowercased as the table keys them ("" matches any).
type Filter struct{ Namespace, Name string }

// List appends to w, as JSON objects separated by commas, every service
// of t that f selects, in the table's order (namespace, name), as Serve
// answers it: the addresses <service>.<namespace>.<zone> answers (the
// endpoint set the predicate admitted, by address mode), or the CNAME
// target it answers instead, the number of endpoints admitted, the SRV
// targets of the name (node and port) and of each named port. It flushes
// w as it goes (jsonw chunks): nothing of the listing is collected first.
// n is the number of services written.
func List(w *jsonw.Writer, t *Table, f Filter) (n int, err error) {
	one := func(k SvcKey, e *svcEntry) error {
		if e == nil {
			return nil
		}
		if n > 0 {
			w.Buf = append(w.Buf, ",\n"...)
		}
		n++
		w.Buf = appendListed(w.Buf, k, e)
		return w.Flush(false)
	}
	if f.Namespace != "" && f.Name != "" {
		k := SvcKey{f.Namespace, f.Name}
		e, _ := t.services.Get(k)
		return n, one(k, e)
	}
	for k, e := range t.services.All() {
		if (f.Namespace != "" && k.Namespace != f.Namespace) || (f.Name != "" && k.Name != f.Name) {
			continue
		}
		if err := one(k, e); err != nil {
			return n, err
		}
	}
	return n, nil
}

// appendListed appends the listing's object of service k.
func appendListed(b []byte, k SvcKey, e *svcEntry) []byte {
	b = append(b, `{"namespace":`...)
	b = jsonw.AppendString(b, k.Namespace)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, k.Name)
	b = append(b, `,"addresses":[`...)
	n := 0
	for i := range e.n4() {
		b = appendAddr(b, netip.AddrFrom4([4]byte(e.ip4(i))), n > 0)
		n++
	}
	for i := range e.n6() {
		b = appendAddr(b, netip.AddrFrom16([16]byte(e.ip6(i))), n > 0)
		n++
	}
	b = append(b, ']')
	if e.cname != "" {
		b = append(b, `,"cname":`...)
		b = jsonw.AppendString(b, e.cname)
	}
	if e.conflict {
		b = append(b, `,"cname_conflict":true`...)
	}
	b = append(b, `,"endpoints":`...)
	b = strconv.AppendInt(b, int64(e.admitted), 10)
	b = append(b, `,"srv":`...)
	b = appendTargets(b, e.srv)
	if len(e.ports) > 0 {
		b = append(b, `,"ports":[`...)
		for i, p := range e.ports {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = jsonw.AppendString(b, p.key.name)
			b = append(b, `,"protocol":`...)
			b = jsonw.AppendString(b, p.key.proto)
			b = append(b, `,"srv":`...)
			b = appendTargets(b, p.targets)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendTargets appends SRV targets as [{"node":…,"port":…}].
func appendTargets(b []byte, ts []srvTarget) []byte {
	b = append(b, '[')
	for i, t := range ts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"node":`...)
		b = jsonw.AppendString(b, t.node.name)
		b = append(b, `,"port":`...)
		b = strconv.AppendUint(b, uint64(t.port), 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendAddr(b []byte, a netip.Addr, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}
