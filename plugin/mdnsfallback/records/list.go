package records

import (
	"cmp"
	"slices"
	"strings"
)

// Listed returns the records (of name; all with "") sorted by domain, id
// and address, and the generation they are of (one more at every change).
// The records are copied under the database's lock (their strings are
// shared), so that they come from one generation and no slow reader holds
// the writers up.
func (d *DB) Listed(name string) ([]Record, uint64) {
	d.mu.Lock()
	var out []Record
	if name == "" {
		out = make([]Record, 0, len(d.records))
		for _, r := range d.records {
			out = append(out, r)
		}
	} else {
		for k := range d.byName[name] {
			out = append(out, d.records[k])
		}
	}
	gen := d.gen.Load()
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(strings.Compare(a.Domain, b.Domain), strings.Compare(a.ID, b.ID), a.IP.Compare(b.IP))
	})
	return out, gen
}
