package kubesource

import (
	"strings"
	"unsafe"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// slimSliceKind is the slim decoder's EndpointSlice (slimdecode.go). It
// reads an event's slice straight into the kSlice the informer stores -
// no API object in between - with the multicluster labels and every
// namespace: the informer's transform then applies the namespace filter
// and drops the multicluster labels when they are off (transformSlice).
// A slice it cannot read, decoded by client-go, is made a kSlice alike,
// so that the informer (whose objects are kSlices) receives no other type.
var slimSliceKind = slimKind{
	gvk:        discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
	apiVersion: discoveryv1.SchemeGroupVersion.String(),
	parse:      func(b []byte) (runtime.Object, error) { return parseSlice(b) },
	convert: func(o runtime.Object) (runtime.Object, bool) {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			return o, false
		}
		k, _ := transformSlice(nil, true)(s)
		ks := k.(*kSlice)
		ks.initialEventsEnd = s.Annotations[metav1.InitialEventsAnnotationKey] == "true"
		return ks, true
	},
}

// parseSlice reads an EndpointSlice's protobuf form - metadata (1),
// endpoints (2), ports (3), addressType (4) - into a kSlice, as
// transformSlice(nil, true) maps client-go's object (slimdecode_test.go
// holds them equal). A first pass reads the metadata and the last
// addressType and counts what the slice's arrays will hold, so that each
// is allocated once; the second adds the ports and the endpoints.
func parseSlice(b []byte) (*kSlice, error) {
	k := &kSlice{}
	var m sliceMeta
	var at []byte
	eps, ports, addresses, text := 0, 0, 0, 0
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return wrongType(num <= 4)
		}
		switch num {
		case 1:
			return m.parse(v)
		case 2:
			eps++
			return countEndpoint(v, &addresses, &text)
		case 3:
			ports++
		case 4:
			at = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ns := intern(view(m.namespace))
	k.kMeta = kMeta{Name: string(m.name), Namespace: ns, ResourceVersion: string(m.resourceVersion)}
	k.initialEventsEnd = string(m.initialEventsEnd) == "true"
	k.trigger = parseTrigger(view(m.trigger), m.trigger != nil, k.Namespace, k.Name)
	k.sl = k8sdns.Slice{Namespace: ns, Name: k.Name, Service: string(m.service), Import: string(m.importName), Cluster: string(m.cluster)}
	sl := &k.sl
	t, known := k8sdns.ParseAddressType(view(at))
	if !known {
		// an address type we cannot answer with: the slice has no
		// endpoints and no ports, which are read to be checked only
		sl = &k8sdns.Slice{}
	}
	sl.Type = t
	if ports > 0 {
		sl.Ports = make([]k8sdns.Port, 0, ports)
	}
	sl.Reserve(eps, addresses, text)
	var scratch [4]string // an endpoint's addresses, most have one
	err = fields(b, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 2:
			return addEndpoint(sl, v, scratch[:0])
		case 3:
			p, err := parsePort(v)
			sl.Ports = append(sl.Ports, p)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	k.sl.Compact()
	return k, nil
}

// view is b as a string without a copy, for a string that is not kept:
// parsed, compared, looked up, or copied by its callee. b must not change
// while the string is in use.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// viewField reads a string field as a view of the event's bytes (view).
func viewField(typ protowire.Type, v []byte, dst *string) error {
	var b []byte
	err := bytesField(typ, v, &b)
	*dst = view(b)
	return err
}

// sliceMeta is what a slice's metadata says that the informer and the
// mapping read, as views of the event's bytes (the last value of each,
// as client-go reads a field or a map key given twice).
type sliceMeta struct {
	name, namespace, resourceVersion []byte
	service, importName, cluster     []byte // labels
	trigger, initialEventsEnd        []byte // annotations; nil: none
}

// parse reads name (1), namespace (3), resourceVersion (6), labels (11)
// and annotations (12).
func (m *sliceMeta) parse(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1:
			return bytesField(typ, v, &m.name)
		case 3:
			return bytesField(typ, v, &m.namespace)
		case 6:
			return bytesField(typ, v, &m.resourceVersion)
		case 11, 12:
			key, val, err := pairField(typ, v)
			if err != nil {
				return err
			}
			m.entry(num == 11, view(key), val)
		}
		return nil
	})
}

// entry keeps a label (or annotation) the mapping reads.
func (m *sliceMeta) entry(label bool, key string, val []byte) {
	if val == nil {
		val = []byte{} // present, empty
	}
	switch {
	case label && key == discoveryv1.LabelServiceName:
		m.service = val
	case label && key == mcsapi.LabelServiceName:
		m.importName = val
	case label && key == mcsapi.LabelSourceCluster:
		m.cluster = val
	case !label && key == corev1.EndpointsLastChangeTriggerTime:
		m.trigger = val
	case !label && key == metav1.InitialEventsAnnotationKey:
		m.initialEventsEnd = val
	}
}

// countEndpoint adds an endpoint's addresses and the bytes of its
// hostnames and target names to the counts (for Reserve).
func countEndpoint(b []byte, addresses, text *int) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil // addEndpoint tells
		}
		switch num {
		case 1:
			*addresses++
		case 3:
			*text += len(v)
		case 4:
			return fields(v, func(num protowire.Number, typ protowire.Type, x []byte, _ uint64) error {
				if num == 3 && typ == protowire.BytesType {
					*text += len(x)
				}
				return nil
			})
		}
		return nil
	})
}

// addEndpoint reads an Endpoint - addresses (1), conditions (2: ready 1,
// serving 2, terminating 3), hostname (3), targetRef (4: its name, 3),
// nodeName (6); not deprecatedTopology (5), zone (7), hints (8) - and
// adds it to sl as modelSlice adds client-go's. addrs is room for its
// addresses. The strings handed to Add are views of the event's bytes:
// Add keeps none of them (it parses IP addresses, copies names into the
// slice's text, and the intern table keeps its own copy), except an FQDN
// slice's addresses, copied here.
func addEndpoint(sl *k8sdns.Slice, b []byte, addrs []string) error {
	var e k8sdns.EndpointSpec
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1:
			var a string
			err := viewField(typ, v, &a)
			if sl.Type == k8sdns.FQDN {
				a = strings.Clone(a)
			}
			addrs = append(addrs, a)
			return err
		case 3:
			return viewField(typ, v, &e.Hostname)
		case 6:
			return viewField(typ, v, &e.NodeName)
		case 2:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				if num < 1 || num > 3 {
					return nil
				}
				if typ != protowire.VarintType {
					return errNotSlim
				}
				c := k8sdns.False
				if x != 0 {
					c = k8sdns.True
				}
				switch num {
				case 1:
					e.Ready = c
				case 2:
					e.Serving = c
				default:
					e.Terminating = c
				}
				return nil
			})
		case 4:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, x []byte, _ uint64) error {
				if num != 3 {
					return nil
				}
				return viewField(typ, x, &e.TargetRef)
			})
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.Addresses = addrs
	addEndpointSpec(sl, e)
	return nil
}

// parsePort reads an EndpointPort as modelSlice maps it: name (1),
// protocol (2), port (3; -1 when absent); not appProtocol (4).
func parsePort(b []byte) (k8sdns.Port, error) {
	p := k8sdns.Port{Port: -1}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			return str(typ, v, &p.Name)
		case 2:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			v := view(v)
			if p.Protocol = k8sdns.Protocol(v); unsafe.StringData(p.Protocol) == unsafe.StringData(v) {
				p.Protocol = strings.Clone(v) // not one of the usual three: Protocol returned the view
			}
		case 3:
			return varint32(typ, x, &p.Port)
		}
		return nil
	})
	return p, err
}
