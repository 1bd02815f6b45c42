package orch

import "strings"

// kind is the shape of a query name inside the zone.
type kind uint8

const (
	kindInvalid kind = iota // no name of ours has this shape
	kindApex                // the zone itself
	kindService             // <service>[.<namespace>]
	kindSRV                 // _<port>._<proto>.<service>[.<namespace>]
	kindNode                // <node-name>.node
)

// name is a parsed query name. Its strings are substrings of the name given
// to parseName, so parsing does not allocate.
type name struct {
	kind      kind
	service   string
	namespace string
	port      string // without the leading underscore
	proto     string // without the leading underscore
	node      string
}

// parseName parses qname, a lowercased fully qualified name inside zone (a
// lowercased fully qualified zone), relative to the zone. Short names
// (<service>.<zone>) get namespace defaultNS. Shapes:
//
//	<zone>                                  kindApex
//	<service>[.<namespace>].<zone>          kindService
//	_<port>._<proto>.<service>[.<namespace>].<zone>   kindSRV
//	<node-name>.node.<zone>                 kindNode (node-name may have dots)
//
// Anything else is kindInvalid.
func parseName(qname, zone, defaultNS string) name {
	rel, ok := relative(qname, zone)
	switch {
	case !ok:
		return name{}
	case rel == "":
		return name{kind: kindApex}
	case strings.HasSuffix(rel, "."+NodeNamespace):
		n := rel[:len(rel)-len(NodeNamespace)-1]
		if n == "" || n[0] == '.' || n[len(n)-1] == '.' || strings.Contains(n, "..") {
			return name{}
		}
		return name{kind: kindNode, node: n}
	}
	var labels [4]string
	count, ok := split(rel, labels[:])
	if !ok {
		return name{}
	}
	srv := count >= 3 && labels[0][0] == '_' && labels[1][0] == '_'
	first := 0
	if srv {
		first = 2
	}
	rest := labels[first:count]
	if len(rest) < 1 || len(rest) > 2 || rest[0][0] == '_' || rest[len(rest)-1][0] == '_' {
		return name{}
	}
	n := name{kind: kindService, service: rest[0], namespace: defaultNS}
	if len(rest) == 2 {
		n.namespace = rest[1]
	}
	if srv {
		n.kind, n.port, n.proto = kindSRV, labels[0][1:], labels[1][1:]
		if n.port == "" || n.proto == "" {
			return name{}
		}
	}
	return n
}

// relative returns qname without zone and the dot between them ("" for
// the apex), and false when qname is not in zone.
func relative(qname, zone string) (string, bool) {
	if len(qname) < len(zone) || !strings.HasSuffix(qname, zone) {
		return "", false
	}
	rel := qname[:len(qname)-len(zone)]
	if rel == "" {
		return "", zone == "." || qname == zone
	}
	if zone != "." {
		// rel ends with the dot that separates it from the zone.
		if rel[len(rel)-1] != '.' {
			return "", false // "xsvc.orch." is not in "svc.orch."
		}
		rel = rel[:len(rel)-1]
	} else if rel[len(rel)-1] == '.' {
		rel = rel[:len(rel)-1]
	}
	return rel, rel != ""
}

// split cuts rel into labels (substrings of it), and reports false when
// it has more than len(labels) of them or an empty one.
func split(rel string, labels []string) (int, bool) {
	count := 0
	for rest := rel; ; {
		if count == len(labels) {
			return 0, false
		}
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			labels[count] = rest
			count++
			break
		}
		labels[count] = rest[:i]
		count++
		rest = rest[i+1:]
	}
	for _, l := range labels[:count] {
		if l == "" {
			return 0, false
		}
	}
	return count, true
}
