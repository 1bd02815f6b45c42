package kubesource

import (
	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// slimSliceKind is the slim decoder's EndpointSlice (slimdecode.go).
var slimSliceKind = newSlimKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), func(b []byte) (runtime.Object, error) { return parseSlice(b) })

// parseSlice reads an EndpointSlice's protobuf form: metadata (1),
// endpoints (2), ports (3), addressType (4). Its endpoints' pointers
// share one array per type, sized once the endpoints are counted.
func parseSlice(b []byte) (*discoveryv1.EndpointSlice, error) {
	sl := &discoveryv1.EndpointSlice{}
	eps, ports := 0, 0
	if err := fields(b, func(num protowire.Number, typ protowire.Type, _ []byte, _ uint64) error {
		switch {
		case num == 2 && typ == protowire.BytesType:
			eps++
		case num == 3 && typ == protowire.BytesType:
			ports++
		}
		return nil
	}); err != nil {
		return nil, err
	}
	a := &sliceArrays{}
	if eps > 0 {
		sl.Endpoints = make([]discoveryv1.Endpoint, 0, eps)
		a.bools = make([]bool, 0, 3*eps)
		a.strs = make([]string, 0, 2*eps)
		a.refs = make([]corev1.ObjectReference, 0, eps)
	}
	if ports > 0 {
		sl.Ports = make([]discoveryv1.EndpointPort, 0, ports)
	}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return wrongType(num <= 4)
		}
		switch num {
		case 1:
			return parseMeta(v, &sl.ObjectMeta)
		case 2:
			ep, err := a.endpoint(v)
			sl.Endpoints = append(sl.Endpoints, ep)
			return err
		case 3:
			p, err := parsePort(v)
			sl.Ports = append(sl.Ports, p)
			return err
		case 4:
			sl.AddressType = discoveryv1.AddressType(v)
		}
		return nil
	})
	return sl, err
}

// sliceArrays back the pointers of a slice's endpoints: conditions,
// hostnames and node names, target references. An append past their
// room (a field given twice) moves an array: earlier pointers keep the
// old one, whose values stay.
type sliceArrays struct {
	bools []bool
	strs  []string
	refs  []corev1.ObjectReference
}

func (a *sliceArrays) boolPtr(typ protowire.Type, x uint64) (*bool, error) {
	if typ != protowire.VarintType {
		return nil, errNotSlim
	}
	a.bools = append(a.bools, x != 0)
	return &a.bools[len(a.bools)-1], nil
}

func (a *sliceArrays) strPtr(typ protowire.Type, v []byte) (*string, error) {
	if typ != protowire.BytesType {
		return nil, errNotSlim
	}
	a.strs = append(a.strs, string(v))
	return &a.strs[len(a.strs)-1], nil
}

// endpoint reads an Endpoint: addresses (1), conditions (2: ready 1,
// serving 2, terminating 3), hostname (3), targetRef (4: its name, 3),
// nodeName (6); not deprecatedTopology (5), zone (7), hints (8).
func (a *sliceArrays) endpoint(b []byte) (discoveryv1.Endpoint, error) {
	var ep discoveryv1.Endpoint
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		var err error
		switch num {
		case 1:
			var s string
			err = str(typ, v, &s)
			ep.Addresses = append(ep.Addresses, s)
		case 2:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			err = fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				var err error
				switch num {
				case 1:
					ep.Conditions.Ready, err = a.boolPtr(typ, x)
				case 2:
					ep.Conditions.Serving, err = a.boolPtr(typ, x)
				case 3:
					ep.Conditions.Terminating, err = a.boolPtr(typ, x)
				}
				return err
			})
		case 3:
			ep.Hostname, err = a.strPtr(typ, v)
		case 4:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			if ep.TargetRef == nil {
				a.refs = append(a.refs, corev1.ObjectReference{})
				ep.TargetRef = &a.refs[len(a.refs)-1]
			}
			err = fields(v, func(num protowire.Number, typ protowire.Type, x []byte, _ uint64) error {
				if num == 3 {
					return str(typ, x, &ep.TargetRef.Name)
				}
				return nil
			})
		case 6:
			ep.NodeName, err = a.strPtr(typ, v)
		}
		return err
	})
	return ep, err
}

// parsePort reads an EndpointPort: name (1), protocol (2), port (3); not
// appProtocol (4).
func parsePort(b []byte) (discoveryv1.EndpointPort, error) {
	var p discoveryv1.EndpointPort
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			p.Name = new(string)
			return str(typ, v, p.Name)
		case 2:
			var s string
			if err := str(typ, v, &s); err != nil {
				return err
			}
			proto := corev1.Protocol(s)
			p.Protocol = &proto
		case 3:
			p.Port = new(int32)
			return varint32(typ, x, p.Port)
		}
		return nil
	})
	return p, err
}
