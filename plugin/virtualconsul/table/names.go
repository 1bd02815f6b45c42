package table

// Name grammar, relative to a zone:
//
//	[<port>.]<service>.virtual[.<ns>.ns][.<ap>.ap][.<dc>.dc]
//
// Each qualifier is optional, may appear at most once and only in this order.
// The parsers below work on lowercased bytes and return sub-slices of their
// input, so the query path parses a name without allocating.

// Consul's defaults of a name's namespace, partition and datacenter: what
// the catalog fills in, and what short names expand with unless the
// Corefile says otherwise.
const (
	DefaultNamespace  = "default"
	DefaultPartition  = "default"
	DefaultDatacenter = "dc1"
)

// Name holds the labels of a virtual name; a nil field was absent.
type Name struct {
	Port, Service, NS, AP, DC []byte
}

// ParseVirtual parses rel, the lowercased part of a query name in front of
// its zone, without the dot that joins it to the zone (e.g.
// "web.virtual.team.ns"). ok is false for every name outside the grammar:
// unknown, repeated or misordered qualifiers, empty labels, more than one
// label before the service, and "<x>.service.virtual" (Consul's own service
// form, which the servers answer).
func ParseVirtual(rel []byte) (p Name, ok bool) {
	end := len(rel)
	// pop returns the label that ends at end and moves end in front of it.
	pop := func() []byte {
		if end < 0 {
			return nil
		}
		i := end - 1
		for i >= 0 && rel[i] != '.' {
			i--
		}
		l := rel[i+1 : end]
		end = i
		return l
	}
	lab := pop()
	if string(lab) == "dc" {
		if p.DC = pop(); len(p.DC) == 0 {
			return p, false
		}
		lab = pop()
	}
	if string(lab) == "ap" {
		if p.AP = pop(); len(p.AP) == 0 {
			return p, false
		}
		lab = pop()
	}
	if string(lab) == "ns" {
		if p.NS = pop(); len(p.NS) == 0 {
			return p, false
		}
		lab = pop()
	}
	if string(lab) != "virtual" {
		return p, false
	}
	if p.Service = pop(); len(p.Service) == 0 {
		return p, false
	}
	if end >= 0 {
		if p.Port = pop(); len(p.Port) == 0 || end >= 0 {
			return p, false // an empty label, or more than one label before the service
		}
		if string(p.Service) == "service" {
			return p, false
		}
	}
	return p, true
}

// AppendKey appends the canonical table key of p to dst, filling absent
// qualifiers with the given identity:
// [<port>.]<service>.virtual.<ns>.ns.<ap>.ap.<dc>.dc.consul (no final dot).
func AppendKey(dst []byte, p Name, ns, ap, dc string) []byte {
	if p.Port != nil {
		dst = append(dst, p.Port...)
		dst = append(dst, '.')
	}
	dst = append(dst, p.Service...)
	dst = append(dst, ".virtual."...)
	if p.NS != nil {
		dst = append(dst, p.NS...)
	} else {
		dst = append(dst, ns...)
	}
	dst = append(dst, ".ns."...)
	if p.AP != nil {
		dst = append(dst, p.AP...)
	} else {
		dst = append(dst, ap...)
	}
	dst = append(dst, ".ap."...)
	if p.DC != nil {
		dst = append(dst, p.DC...)
	} else {
		dst = append(dst, dc...)
	}
	return append(dst, ".dc.consul"...)
}

// LowerName appends name to dst with ASCII letters lowercased. ok is false
// for names longer than a wire name can be or carrying escapes (\. or \DDD):
// those are never ours.
func LowerName(dst []byte, name string) ([]byte, bool) {
	if len(name) > 255 {
		return dst, false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '\\':
			return dst, false
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}

// validLabel reports whether l is a label a table key may carry: 1 to 63
// characters from [a-z0-9_-] (Consul's service, namespace, partition and
// datacenter names, lowercased).
func validLabel(l []byte) bool {
	if len(l) == 0 || len(l) > 63 {
		return false
	}
	for _, c := range l {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidIdentity reports whether s is usable as namespace, partition or
// datacenter in the Corefile (the same rule as validLabel).
func ValidIdentity(s string) bool {
	var buf [64]byte
	if len(s) > len(buf) {
		return false
	}
	return validLabel(append(buf[:0], s...))
}
