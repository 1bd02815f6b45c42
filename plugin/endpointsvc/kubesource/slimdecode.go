package kubesource

import (
	"bytes"
	"errors"

	"google.golang.org/protobuf/encoding/protowire"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The watches of EndpointSlices, Services and Nodes decode each event's
// object from its protobuf form straight into the API type holding only
// the fields its transform reads (objects.go) and the fields client-go's
// informer machinery reads (name, namespace, resourceVersion, labels,
// annotations: a watch-list's closing bookmark is marked by an
// annotation), instead of client-go's decoding of every field (managed
// fields, owner references, each endpoint's target kind, namespace and
// UID, a Node's images and resources, ...) that the transform then drops.
// An EndpointSlice, the object of most events, goes further: it is read
// straight into the slim kSlice the informer stores (slimdecode_slice.go),
// with no API object in between. The kubernetes plugin decodes and drops
// every field on every event.
//
// Invariant: for every object of these kinds the API server sends, the
// transform of the slim object equals the transform of client-go's, and
// the informer reads the same name, namespace, resourceVersion, labels
// and annotations (slimdecode_test.go compares them on generated
// objects; FuzzSlimSlice on mutated slices). Anything else (another kind,
// a Status in an ERROR event, a list, an encoding it does not know, bytes
// it cannot parse) goes to client-go's decoder as before (and a slice it
// decodes is made a kSlice). A field given twice is read as client-go
// reads it: the last value of a scalar, the values of a list appended, a
// message merged.

// slimKind is a kind the slim decoder reads: its group version kind and
// the parser of its protobuf form.
type slimKind struct {
	gvk        schema.GroupVersionKind
	apiVersion string // gvk's, as the envelope writes it
	parse      func(raw []byte) (runtime.Object, error)
	// convert, when set, makes client-go's object of the kind (one parse
	// could not read) what parse returns; ok false: not of the kind
	convert func(runtime.Object) (obj runtime.Object, ok bool)
}

func newSlimKind(gvk schema.GroupVersionKind, parse func(raw []byte) (runtime.Object, error)) slimKind {
	return slimKind{gvk: gvk, apiVersion: gvk.GroupVersion().String(), parse: parse}
}

// slimCodecs is client-go's negotiated serializer with the protobuf
// decoder replaced by a slimDecoder of kinds.
type slimCodecs struct {
	runtime.NegotiatedSerializer
	kinds []slimKind
}

func (c slimCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := append([]runtime.SerializerInfo(nil), c.NegotiatedSerializer.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeProtobuf {
			infos[i].Serializer = slimDecoder{infos[i].Serializer, c.kinds}
		}
	}
	return infos
}

// slimDecoder decodes a watch event's object of its kinds slim, anything
// else as its serializer does (which also encodes).
type slimDecoder struct {
	runtime.Serializer
	kinds []slimKind
}

// Decode decodes the object of a watch event (into nil) slim when it is
// of one of d's kinds, anything else as before.
func (d slimDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into != nil {
		return d.Serializer.Decode(data, defaults, into)
	}
	if obj, gvk, ok := decodeSlim(data, d.kinds); ok {
		return obj, &gvk, nil
	}
	obj, gvk, err := d.Serializer.Decode(data, defaults, nil)
	if err != nil {
		return obj, gvk, err
	}
	for _, k := range d.kinds {
		if k.convert == nil {
			continue
		}
		if c, ok := k.convert(obj); ok {
			return c, gvk, nil
		}
	}
	return obj, gvk, nil
}

// protoPrefix begins every object the API server encodes in protobuf
// (a runtime.Unknown follows it).
var protoPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// decodeSlim decodes data, a protobuf-encoded object, when it is of one
// of kinds and parses; ok is false otherwise.
func decodeSlim(data []byte, kinds []slimKind) (runtime.Object, schema.GroupVersionKind, bool) {
	apiVersion, kind, raw, ok := unknown(data)
	if !ok {
		return nil, schema.GroupVersionKind{}, false
	}
	for _, k := range kinds {
		if string(kind) == k.gvk.Kind && string(apiVersion) == k.apiVersion {
			obj, err := k.parse(raw)
			return obj, k.gvk, err == nil
		}
	}
	return nil, schema.GroupVersionKind{}, false
}

// unknown reads the runtime.Unknown of a protobuf-encoded object: its
// typeMeta (1: apiVersion 1, kind 2) and raw object (2), which must be
// uncompressed protobuf (contentEncoding 3 and contentType 4 empty, or
// protobuf).
func unknown(data []byte) (apiVersion, kind, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protoPrefix) {
		return nil, nil, nil, false
	}
	err := fields(data[len(protoPrefix):], func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return wrongType(num <= 4)
		}
		switch num {
		case 1:
			return fields(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
				if typ != protowire.BytesType {
					return wrongType(num <= 2)
				}
				switch num {
				case 1:
					apiVersion = b
				case 2:
					kind = b
				}
				return nil
			})
		case 2:
			raw = b
		case 3:
			if len(b) > 0 {
				return errNotSlim
			}
		case 4:
			if len(b) > 0 && string(b) != runtime.ContentTypeProtobuf {
				return errNotSlim
			}
		}
		return nil
	})
	return apiVersion, kind, raw, err == nil && raw != nil
}

// errNotSlim: not a form the slim decoder reads (client-go's decodes it).
var errNotSlim = errors.New("not a form the slim decoder reads")

// fields calls f with each field of message b: its number, wire type,
// and its bytes (length-delimited) or varint value.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		// one-byte tags, lengths and varints (most of an object's) are
		// read here, anything else by protowire, which reads these alike
		var num protowire.Number
		var typ protowire.Type
		n := 1
		if c := b[0]; c < 0x80 && c>>3 != 0 {
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
		} else if num, typ, n = protowire.ConsumeTag(b); n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch {
		case typ == protowire.BytesType && len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b):
			v, n = b[1:1+int(b[0])], 1+int(b[0])
		case typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case typ == protowire.VarintType && len(b) > 0 && b[0] < 0x80:
			x, n = uint64(b[0]), 1
		case typ == protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// wrongType is the error of a field of a wire type its number does not
// have: errNotSlim for a field the decoder reads, none for another.
func wrongType(read bool) error {
	if read {
		return errNotSlim
	}
	return nil
}

// str reads a string field (wire type bytes).
func str(typ protowire.Type, v []byte, dst *string) error {
	var b []byte
	err := bytesField(typ, v, &b)
	*dst = string(b)
	return err
}

// bytesField reads a bytes field (wire type bytes), without a copy.
func bytesField(typ protowire.Type, v []byte, dst *[]byte) error {
	if typ != protowire.BytesType {
		return errNotSlim
	}
	*dst = v
	return nil
}

// parseMeta reads the ObjectMeta fields the informers and transforms
// read: name (1), namespace (3), resourceVersion (6), labels (11),
// annotations (12).
func parseMeta(b []byte, m *metav1.ObjectMeta) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1:
			return str(typ, v, &m.Name)
		case 3:
			return str(typ, v, &m.Namespace)
		case 6:
			return str(typ, v, &m.ResourceVersion)
		case 11:
			return mapEntry(typ, v, &m.Labels)
		case 12:
			return mapEntry(typ, v, &m.Annotations)
		}
		return nil
	})
}

// mapEntry reads a map<string, string> entry (key 1, value 2) into *m.
func mapEntry(typ protowire.Type, b []byte, m *map[string]string) error {
	k, v, err := pairField(typ, b)
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[string(k)] = string(v)
	return nil
}

// pairField reads a message whose fields 1 and 2 are strings - a
// map<string, string> entry's key and value, a node condition's type and
// status, a node address's type and address - the last of each, as views
// of b (nil: absent).
func pairField(typ protowire.Type, b []byte) (first, second []byte, err error) {
	if typ != protowire.BytesType {
		return nil, nil, errNotSlim
	}
	err = fields(b, func(num protowire.Number, typ protowire.Type, x []byte, _ uint64) error {
		switch num {
		case 1:
			return bytesField(typ, x, &first)
		case 2:
			return bytesField(typ, x, &second)
		}
		return nil
	})
	return first, second, err
}

// varintBool reads a bool field (wire type varint).
func varintBool(typ protowire.Type, x uint64, dst *bool) error {
	if typ != protowire.VarintType {
		return errNotSlim
	}
	*dst = x != 0
	return nil
}

// varint32 reads an int32 field (wire type varint).
func varint32(typ protowire.Type, x uint64, dst *int32) error {
	if typ != protowire.VarintType {
		return errNotSlim
	}
	*dst = int32(x)
	return nil
}
