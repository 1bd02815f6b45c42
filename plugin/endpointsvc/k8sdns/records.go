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
	"github.com/meshdns/meshdns/plugin/pkg/pmap"
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
// Service does not exist (and so for ServiceImports).
func (t *Table) Names() int { return t.names.Len() + t.imports.Len() }

// All yields every name's content in key order, the Services' names
// first, then the ServiceImports'. Its Service and slices are the
// table's own: they must not be changed.
func (t *Table) All() iter.Seq[Change] {
	return func(yield func(Change) bool) {
		for _, m := range []*pmap.Map[Key, *entry]{t.names, t.imports} {
			for k, e := range m.All() {
				if !yield(Change{Key: k, Service: e.svc, Slices: e.slices}) {
					return
				}
			}
		}
	}
}

// Name is name k's content: no Service and no slices when it has none.
func (t *Table) Name(k Key) Change {
	m := t.names
	if k.Import {
		m = t.imports
	}
	e, ok := m.Get(k)
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
	keys = changedKeys(t.names, old.names, nil)
	return changedKeys(t.imports, old.imports, keys), namespaces
}

// changedKeys appends to keys those of the names whose content differs
// between old and cur, in key order.
func changedKeys(cur, old *pmap.Map[Key, *entry], keys []Key) []Key {
	next, stop := iter.Pull2(old.All())
	defer stop()
	ek, ee, ok := next()
	for k, e := range cur.All() {
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
	return keys
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
	for _, e := range t.imports.All() {
		if e.svc != nil {
			c.Imports = append(c.Imports, e.svc)
		}
		c.Slices = append(c.Slices, importOnly(e.slices)...)
	}
	return c
}

// importOnly are the slices of an import's entry that no Service's entry
// holds (those without a kubernetes.io/service-name label): with the
// Services' entries' slices, every slice once.
func importOnly(sls []*Slice) []*Slice {
	var out []*Slice
	for _, sl := range sls {
		if sl.Service == "" {
			out = append(out, sl)
		}
	}
	return out
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
	if t.imports.Len() > 0 {
		var imps []*Service
		for _, e := range t.imports.All() {
			for _, sl := range importOnly(e.slices) {
				if err := sw.Slice(sl); err != nil {
					return err
				}
			}
			if e.svc != nil {
				imps = append(imps, e.svc)
			}
		}
		if err := sw.Imports(imps); err != nil {
			return err
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

// AppendChange appends c's record; a ServiceImport's name's is wrapped,
// {"import":{…}}, its ServiceImport in "service" (its kind ClusterSetIP
// or Headless), and its slices those labelled with its name (a reader
// that does not know the line ignores it, as the replication stream's
// followers do).
func AppendChange(b []byte, c Change) []byte {
	if c.Key.Import {
		b = append(b, `{"import":`...)
	}
	b = append(b, `{"namespace":`...)
	b = jsonw.AppendString(b, c.Key.Namespace)
	b = append(b, `,"name":`...)
	b = jsonw.AppendString(b, c.Key.Name)
	if c.Service != nil {
		b = append(b, `,"service":`...)
		b = appendService(b, c.Service, c.Key.Import)
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
	if c.Key.Import {
		b = append(b, '}')
	}
	return append(b, '}')
}

// importPrefix begins the record of a ServiceImport's name.
const importPrefix = `{"import":`

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
	var w struct {
		Import *snapChange `json:"import"`
		snapChange
	}
	imp := bytes.HasPrefix(b, []byte(importPrefix))
	into := any(&w.snapChange)
	if imp {
		into = &w
	}
	if err := d.Decode(into); err != nil {
		return Change{}, fmt.Errorf("record: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return Change{}, errors.New("record: trailing data after the JSON object")
	}
	if imp {
		if w.Import == nil || w.Namespace != "" || w.Name != "" || w.Service != nil || w.Slices != nil {
			return Change{}, errors.New("record: an import record wants import only")
		}
		return w.Import.change(true)
	}
	return w.snapChange.change(false)
}

// change makes the Change of a record: a Service's name, or (imp) a
// ServiceImport's.
func (sc *snapChange) change(imp bool) (Change, error) {
	k := Key{Namespace: sc.Namespace, Name: sc.Name, Import: imp}
	if k.Namespace == "" || k.Name == "" {
		return Change{}, fmt.Errorf("record %s/%s: no namespace or name", k.Namespace, k.Name)
	}
	c := Change{Key: k}
	if sc.Service != nil {
		if sc.Service.Namespace != k.Namespace || sc.Service.Name != k.Name {
			return Change{}, fmt.Errorf("record %s/%s: Service %s/%s", k.Namespace, k.Name, sc.Service.Namespace, sc.Service.Name)
		}
		s, err := sc.Service.service()
		if imp {
			s, err = sc.Service.importService()
		}
		if err != nil {
			return Change{}, fmt.Errorf("record %s/%s: service: %w", k.Namespace, k.Name, err)
		}
		c.Service = s
	}
	for i := range sc.Slices {
		ss := &sc.Slices[i]
		if imp && (ss.Namespace != k.Namespace || ss.Import != k.Name) {
			return Change{}, fmt.Errorf("record %s/%s: slices[%d] is %s/%s of ServiceImport %q", k.Namespace, k.Name, i, ss.Namespace, ss.Name, ss.Import)
		}
		if !imp && (ss.Namespace != k.Namespace || ss.Service != k.Name) {
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
