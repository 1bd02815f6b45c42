package k8sdns

import (
	"net/netip"
	"strconv"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// Filter selects the Services a listing holds: a namespace and a Service
// name as the table keys them ("" matches any).
type Filter struct{ Namespace, Name string }

// List appends to w, as JSON objects separated by commas, every Service
// of t that f selects, in the table's order (namespace, name), as s
// answers it: the addresses its own name answers (cluster IPs, or a
// headless Service's ready endpoint addresses), the CNAME target it
// answers instead (an ExternalName, a headless Service's first ready
// FQDN), its ports, and the ready endpoints (the predicate of every record
// type: IsReady) with their addresses, hostname, target Pod and node. A
// Service whose name does not exist says so (nxdomain: a headless one
// without ready endpoints, ignore empty_service, an ExternalName that is
// an address, a namespace not known yet), by the lookup every query of
// the name makes (records). Names that hold only slices
// (no Service) answer no name and are left out. It flushes w as it goes
// (jsonw chunks): nothing of the listing is collected first. n is the
// number of Services written.
func (s *Server) List(w *jsonw.Writer, t *Table, f Filter) (n int, err error) {
	one := func(e *entry) error {
		if e == nil || e.svc == nil {
			return nil
		}
		if n > 0 {
			w.Buf = append(w.Buf, ",\n"...)
		}
		n++
		w.Buf = s.appendListed(w.Buf, t, e)
		return w.Flush(false)
	}
	if f.Namespace != "" && f.Name != "" {
		e, _ := t.names.Get(Key{Namespace: f.Namespace, Name: f.Name})
		return n, one(e)
	}
	for k, e := range t.names.All() {
		if (f.Namespace != "" && k.Namespace != f.Namespace) || (f.Name != "" && k.Name != f.Name) {
			continue
		}
		if err := one(e); err != nil {
			return n, err
		}
	}
	return n, nil
}

// appendListed appends the listing's object of entry e (which has a
// Service).
func (s *Server) appendListed(b []byte, t *Table, e *entry) []byte {
	svc := e.svc
	b = append(b, `{"namespace":`...)
	b = jsonw.AppendString(b, svc.Namespace)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, svc.Name)
	b = append(b, `,"kind":"`...)
	b = append(b, svc.Kind.String()...)
	b = append(b, `","addresses":[`...)
	cname := ""
	switch svc.Kind {
	case ClusterIP:
		for i, a := range svc.ClusterIPs {
			b = appendAddr(b, a, i > 0)
		}
	case Headless:
		b = appendPacked(b, e.v4, e.v6)
		if len(e.v4) == 0 && len(e.v6) == 0 {
			cname = e.fqdn
		}
	case ExternalName:
		cname = svc.ExternalName
	}
	b = append(b, ']')
	if cname != "" {
		b = append(b, `,"cname":`...)
		b = jsonw.AppendString(b, cname)
	}
	if _, err := s.records(t, &nameReq{namespace: svc.Namespace, service: svc.Name}, false); err != nil {
		b = append(b, `,"nxdomain":true`...) // what every query type of the name reads
	}
	if e.conflict {
		b = append(b, `,"cname_conflict":true`...)
	}
	b = appendPorts(b, svc.Ports)
	b = append(b, `,"ready_endpoints":`...)
	b = strconv.AppendInt(b, int64(e.ready), 10)
	b = append(b, `,"endpoints":[`...)
	first := true
	for _, sl := range e.slices {
		for i := range sl.Endpoints {
			if !sl.Endpoints[i].IsReady() {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendEndpoint(b, sl, i)
		}
	}
	return append(b, "]}"...)
}

// appendEndpoint appends ready endpoint i of sl: its addresses, and its
// hostname, target Pod and node when it has them.
func appendEndpoint(b []byte, sl *Slice, i int) []byte {
	b = append(b, `{"addresses":[`...)
	for j := range sl.Endpoints[i].Len() {
		if j > 0 {
			b = append(b, ',')
		}
		if sl.Type == FQDN {
			b = jsonw.AppendString(b, sl.FQDNAddr(i, j))
		} else {
			b = appendAddr(b, sl.Addr(i, j), false)
		}
	}
	b = append(b, ']')
	for _, kv := range [3][2]string{{"hostname", sl.Hostname(i)}, {"pod", sl.TargetRef(i)}, {"node", sl.Endpoints[i].Node()}} {
		if kv[1] != "" {
			b = append(b, `,"`...)
			b = append(b, kv[0]...)
			b = append(b, `":`...)
			b = jsonw.AppendString(b, kv[1])
		}
	}
	b = append(b, `,"slice":`...)
	b = jsonw.AppendString(b, sl.Name)
	return append(b, '}')
}

// appendPacked appends packed IPv4 (4 bytes each) then IPv6 (16 bytes
// each) addresses as JSON strings.
func appendPacked(b []byte, v4, v6 []byte) []byte {
	n := 0
	for i := 0; i+4 <= len(v4); i += 4 {
		b = appendAddr(b, netip.AddrFrom4([4]byte(v4[i:i+4])), n > 0)
		n++
	}
	for i := 0; i+16 <= len(v6); i += 16 {
		b = appendAddr(b, netip.AddrFrom16([16]byte(v6[i:i+16])), n > 0)
		n++
	}
	return b
}

func appendAddr(b []byte, a netip.Addr, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}
