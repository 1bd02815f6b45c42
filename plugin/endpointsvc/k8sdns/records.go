package k8sdns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"

	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// The replication's view of a table (package replica): a table walked
// name by name, two tables compared, one name's record in the snapshot's
// own per-object JSON, and the table written as a snapshot.

// Origin is the Cluster.Origin of the cluster or patch the table was
// made of.
func (t *Table) Origin() string { return t.origin }

// Namespaces are the namespaces that exist, sorted.
func (t *Table) Namespaces() []string {
	out := make([]string, 0, len(t.namespaces))
	for ns := range t.namespaces {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// Names is the number of names: Services, and labels of slices whose
// Service does not exist.
func (t *Table) Names() int { return t.names.Len() }

// All yields every name's content in key order. Its Service and slices
// are the table's own: they must not be changed.
func (t *Table) All() iter.Seq[Change] {
	return func(yield func(Change) bool) {
		for k, e := range t.names.All() {
			if !yield(Change{Key: k, Service: e.svc, Slices: e.slices}) {
				return
			}
		}
	}
}

// Name is name k's content: no Service and no slices when it has none.
func (t *Table) Name(k Key) Change {
	e, ok := t.names.Get(k)
	if !ok {
		return Change{Key: k}
	}
	return Change{Key: k, Service: e.svc, Slices: e.slices}
}

// Changed returns the names whose content differs between old and t, in
// key order, and whether the namespaces differ. A name both tables share
// (a patch shares every name it did not touch) costs a comparison of
// pointers; any other costs a comparison of its content.
func (t *Table) Changed(old *Table) (keys []Key, namespaces bool) {
	namespaces = len(t.namespaces) != len(old.namespaces)
	for ns := range t.namespaces {
		if _, ok := old.namespaces[ns]; !ok {
			namespaces = true
			break
		}
	}
	next, stop := iter.Pull2(old.names.All())
	defer stop()
	ek, ee, ok := next()
	for k, e := range t.names.All() {
		for ; ok && ek.compare(k) < 0; ek, ee, ok = next() {
			keys = append(keys, ek) // gone
		}
		if ok && ek.compare(k) == 0 {
			if !sameEntry(e, ee) {
				keys = append(keys, k)
			}
			ek, ee, ok = next()
			continue
		}
		keys = append(keys, k) // new
	}
	for ; ok; ek, ee, ok = next() {
		keys = append(keys, ek)
	}
	return keys, namespaces
}

// sameEntry reports whether two entries hold the same content.
func sameEntry(a, b *entry) bool {
	if a == b {
		return true
	}
	if (a.svc == nil) != (b.svc == nil) || (a.svc != nil && a.svc != b.svc && !a.svc.Equal(b.svc)) {
		return false
	}
	return slices.EqualFunc(a.slices, b.slices, func(x, y *Slice) bool { return x == y || x.Equal(y) })
}

// Whole is the table's cluster: its namespaces, Services and slices in
// key order, and its origin.
func (t *Table) Whole() *Cluster {
	c := &Cluster{Namespaces: t.Namespaces(), Origin: t.origin, Services: make([]*Service, 0, t.services)}
	for _, e := range t.names.All() {
		if e.svc != nil {
			c.Services = append(c.Services, e.svc)
		}
		c.Slices = append(c.Slices, e.slices...)
	}
	if t.pods.Len() > 0 {
		c.Pods = t.Pods()
	}
	return c
}

// Snapshot writes the table's cluster in the snapshot form, one object at
// a time.
func (t *Table) Snapshot(w io.Writer) error {
	sw, err := newSnapshotWriter(w, t.Namespaces(), t.origin)
	if err != nil {
		return err
	}
	for _, e := range t.names.All() {
		if e.svc != nil {
			if err := sw.Service(e.svc); err != nil {
				return err
			}
		}
	}
	for _, e := range t.names.All() {
		for _, sl := range e.slices {
			if err := sw.Slice(sl); err != nil {
				return err
			}
		}
	}
	if t.pods.Len() > 0 {
		if err := sw.Pods(t.Pods()); err != nil {
			return err
		}
	}
	return sw.Close()
}

// A record is one name's content, for the replication stream, in the
// snapshot's form of a Service and of a slice:
//
//	{"namespace":"shop","name":"web","service":{…},"slices":[{…},…]}
//
// "service" is left out when the name has no Service, "slices" when it has
// none; a record with neither says the name is gone.
type snapChange struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Service   *snapSvc    `json:"service,omitempty"`
	Slices    []snapSlice `json:"slices,omitempty"`
}

// AppendChange appends c's record.
func AppendChange(b []byte, c Change) []byte {
	b = append(b, `{"namespace":`...)
	b = jsonw.AppendString(b, c.Key.Namespace)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, c.Key.Name)
	if c.Service != nil {
		b = append(b, `,"service":`...)
		b = appendService(b, c.Service)
	}
	if len(c.Slices) > 0 {
		b = append(b, `,"slices":[`...)
		for i, sl := range c.Slices {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendSlice(b, sl)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// DecodeChange reads a record. Any invalid part rejects it whole, as in
// DecodeSnapshot, and so do a Service or a slice of another name, and two
// slices of one name.
func DecodeChange(b []byte) (Change, error) { return decodeChange(b, true) }

// DecodeChangeTolerant reads a record as DecodeChange does, but ignores
// the fields it does not know, at any depth (the replication stream: a
// newer leader's records carry fields this version does not read, as the
// Kubernetes API's clients ignore what they do not know).
func DecodeChangeTolerant(b []byte) (Change, error) { return decodeChange(b, false) }

func decodeChange(b []byte, strict bool) (Change, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	if strict {
		d.DisallowUnknownFields()
	}
	var sc snapChange
	if err := d.Decode(&sc); err != nil {
		return Change{}, fmt.Errorf("record: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return Change{}, errors.New("record: trailing data after the JSON object")
	}
	return sc.change()
}

func (sc *snapChange) change() (Change, error) {
	k := Key{sc.Namespace, sc.Name}
	if k.Namespace == "" || k.Name == "" {
		return Change{}, fmt.Errorf("record %s/%s: no namespace or name", k.Namespace, k.Name)
	}
	c := Change{Key: k}
	if sc.Service != nil {
		if sc.Service.Namespace != k.Namespace || sc.Service.Name != k.Name {
			return Change{}, fmt.Errorf("record %s/%s: Service %s/%s", k.Namespace, k.Name, sc.Service.Namespace, sc.Service.Name)
		}
		s, err := sc.Service.service()
		if err != nil {
			return Change{}, fmt.Errorf("record %s/%s: service: %w", k.Namespace, k.Name, err)
		}
		c.Service = s
	}
	for i := range sc.Slices {
		ss := &sc.Slices[i]
		if ss.Namespace != k.Namespace || ss.Service != k.Name {
			return Change{}, fmt.Errorf("record %s/%s: slices[%d] is %s/%s of Service %q", k.Namespace, k.Name, i, ss.Namespace, ss.Name, ss.Service)
		}
		if slices.ContainsFunc(sc.Slices[:i], func(o snapSlice) bool { return o.Name == ss.Name }) {
			return Change{}, fmt.Errorf("record %s/%s: slice %q twice", k.Namespace, k.Name, ss.Name)
		}
		sl, err := ss.slice()
		if err != nil {
			return Change{}, fmt.Errorf("record %s/%s: slices[%d] (%s): %w", k.Namespace, k.Name, i, ss.Name, err)
		}
		c.Slices = append(c.Slices, sl)
	}
	return c, nil
}
