package records

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
)

// DB is the local record database. Writers serialise on a mutex; readers use
// the index, under its own read lock. Every change runs the onChange hook (snapshot writer),
// a put runs onPut (mDNS announcement) and deletions that
// remove a name/address pair run onGone (mDNS goodbyes). The HTTP API and a
// container updater write through the same methods, so both get the same
// announcements and goodbyes.
type DB struct {
	zones      []string
	maxRecords int
	// defaultTTL is the Corefile's ttl, what a record's TTL 0 means: the
	// merge of one address's records compares TTLs as served.
	defaultTTL uint32

	mu      sync.Mutex
	records map[key]Record
	byName  map[string]map[key]struct{}
	byAddr  map[netip.Addr]map[key]struct{}
	byID    map[string]map[key]struct{}
	ix      *index
	// aside are the records Replace could not take because they lie
	// outside the zones or past max_records (a zone typo, a lower bound):
	// kept, not served, written to the snapshot and handed across a
	// reload, so that they come back when the zones hold them again.
	aside []Record
	count atomic.Int64
	gen   atomic.Uint64 // one more at every change, under mu: the inspect listing's generation

	onChange func()
	onPut    func(r Record)      // after a record was added or changed
	onGone   func(gone []Record) // name/address pairs no identifier holds any more
}

// NewDB returns an empty database accepting names inside zones (lowercased
// FQDNs) and holding at most maxRecords records; defaultTTL is what a
// record's TTL 0 stands for.
func NewDB(zones []string, maxRecords int, defaultTTL uint32) *DB {
	return &DB{
		zones:      zones,
		maxRecords: maxRecords,
		defaultTTL: defaultTTL,
		records:    map[key]Record{},
		byName:     map[string]map[key]struct{}{},
		byAddr:     map[netip.Addr]map[key]struct{}{},
		byID:       map[string]map[key]struct{}{},
		ix:         newIndex(),
	}
}

// SetHooks sets what runs after a put (onPut), after deletions that leave
// name/address pairs nobody holds (onGone) and after every change
// (onChange); each may be nil. Call it before the first write.
func (d *DB) SetHooks(onPut func(Record), onGone func([]Record), onChange func()) {
	d.onPut, d.onGone, d.onChange = onPut, onGone, onChange
}

// Len returns the number of records.
func (d *DB) Len() int { return int(d.count.Load()) }

// Lookup returns the index entry of a lowercased FQDN, or nil.
func (d *DB) Lookup(name string) *Entry { return d.ix.lookup(name) }

// LookupPTR returns the names bound to a, or nil.
func (d *DB) LookupPTR(a netip.Addr) []string { return d.ix.lookupPTR(a) }

// Put adds or replaces the record (ID, IP, Domain) of r.Owner. It validates r
// first and changes nothing on error; a record of another owner is not
// taken over (ErrOwned, with that record). It returns the stored record and
// whether it is new.
func (d *DB) Put(r Record) (Record, bool, error) {
	r, err := d.Normalize(r)
	if err != nil {
		return r, false, err
	}
	d.mu.Lock()
	k := keyOf(r)
	old, exists := d.records[k]
	if !exists && len(d.records) >= d.maxRecords {
		d.mu.Unlock()
		return r, false, fmt.Errorf("%w: %d records (max_records)", ErrFull, d.maxRecords)
	}
	if exists && old == r {
		d.mu.Unlock()
		return r, false, nil
	}
	if exists && old.Owner != r.Owner {
		d.mu.Unlock()
		return old, false, ErrOwned
	}
	d.records[k] = r
	add(d.byName, r.Domain, k)
	add(d.byAddr, r.IP, k)
	add(d.byID, r.ID, k)
	d.count.Store(int64(len(d.records)))
	d.gen.Add(1)
	d.rebuildName(r.Domain)
	d.rebuildAddr(r.IP)
	d.mu.Unlock()
	if d.onPut != nil {
		d.onPut(r)
	}
	d.changed(nil)
	return r, !exists, nil
}

// DeleteID removes every record of id and returns them.
func (d *DB) DeleteID(id string) []Record {
	return d.deleteWhere(id, func(Record) bool { return true })
}

// DeleteIDIP removes the records of id bound to ip and returns them.
func (d *DB) DeleteIDIP(id string, ip netip.Addr) []Record {
	ip = ip.Unmap()
	return d.deleteWhere(id, func(r Record) bool { return r.IP == ip })
}

// DeleteOwned removes the records of id that owner wrote and keep rejects
// (nil keep: all of them), and returns them. Records of id written by
// anyone else stay.
func (d *DB) DeleteOwned(id, owner string, keep func(Record) bool) []Record {
	return d.deleteWhere(id, func(r Record) bool {
		return r.Owner == owner && (keep == nil || !keep(r))
	})
}

// HoldsAll reports whether every record of recs is in the database, with
// the same owner.
func (d *DB) HoldsAll(recs []Record) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range recs {
		r, err := d.Normalize(r)
		if err != nil {
			return false
		}
		old, ok := d.records[keyOf(r)]
		if !ok || old.Owner != r.Owner {
			return false
		}
	}
	return len(recs) > 0
}

// OwnedIDs returns the identifiers that hold at least one record of owner.
func (d *DB) OwnedIDs(owner string) map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]bool{}
	for _, r := range d.records {
		if r.Owner == owner {
			out[r.ID] = true
		}
	}
	return out
}

func (d *DB) deleteWhere(id string, match func(Record) bool) []Record {
	d.mu.Lock()
	if d.dropAside(id, match) {
		d.gen.Add(1)
	}
	var gone []Record
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for k := range d.byID[id] {
		if !match(d.records[k]) {
			continue
		}
		gone = append(gone, d.records[k])
		delete(d.records, k)
		del(d.byName, k.domain, k)
		del(d.byAddr, k.ip, k)
		del(d.byID, k.id, k)
		names[k.domain], addrs[k.ip] = true, true
	}
	if len(gone) == 0 {
		d.mu.Unlock()
		return nil
	}
	for n := range names {
		d.rebuildName(n)
	}
	for a := range addrs {
		d.rebuildAddr(a)
	}
	d.count.Store(int64(len(d.records)))
	d.gen.Add(1)
	// Goodbyes only for name/address pairs no other identifier still holds.
	var bye []Record
	for _, r := range gone {
		still := false
		for k := range d.byName[r.Domain] {
			if k.ip == r.IP {
				still = true
			}
		}
		if !still {
			bye = append(bye, r)
		}
	}
	d.mu.Unlock()
	Sort(gone)
	d.changed(bye)
	return gone
}

// dropAside removes the records aside of id that match (a delete of the
// identifier covers them too: they must not come back later); d.mu is
// held. It reports whether any went.
func (d *DB) dropAside(id string, match func(Record) bool) bool {
	kept := d.aside[:0]
	for _, r := range d.aside {
		if r.ID != id || !match(r) {
			kept = append(kept, r)
		}
	}
	gone := len(kept) != len(d.aside)
	clear(d.aside[len(kept):])
	d.aside = kept
	return gone
}

func (d *DB) changed(bye []Record) {
	if len(bye) > 0 && d.onGone != nil {
		d.onGone(bye)
	}
	if d.onChange != nil {
		d.onChange()
	}
}

// Records returns the records of id (all records when id is ""), sorted.
func (d *DB) Records(id string) []Record {
	d.mu.Lock()
	out := make([]Record, 0, len(d.byID[id]))
	if id == "" {
		for _, r := range d.records {
			out = append(out, r)
		}
	} else {
		for k := range d.byID[id] {
			out = append(out, d.records[k])
		}
	}
	d.mu.Unlock()
	Sort(out)
	return out
}

// Replace swaps the whole content for recs (a loaded snapshot or records
// carried across a reload, with the records aside of before). Records
// outside the zones, or past max_records, are kept aside (and counted);
// invalid ones are skipped (and counted).
func (d *DB) Replace(recs []Record) (aside, skipped int) {
	d.mu.Lock()
	d.aside = nil
	d.records = map[key]Record{}
	d.byName = map[string]map[key]struct{}{}
	d.byAddr = map[netip.Addr]map[key]struct{}{}
	d.byID = map[string]map[key]struct{}{}
	for _, r := range recs {
		n, err := d.Normalize(r)
		switch {
		case errors.Is(err, ErrBadDomain) && validOutside(r):
			d.aside = append(d.aside, r)
			continue
		case err != nil:
			skipped++
			continue
		case len(d.records) >= d.maxRecords:
			d.aside = append(d.aside, n)
			continue
		}
		r = n
		k := keyOf(r)
		d.records[k] = r
		add(d.byName, r.Domain, k)
		add(d.byAddr, r.IP, k)
		add(d.byID, r.ID, k)
	}
	// Build the index anew and publish it.
	nm := make(map[string]*Entry, len(d.byName))
	pm := make(map[netip.Addr][]string, len(d.byAddr))
	for n := range d.byName {
		nm[n] = d.entryFor(n)
	}
	for a := range d.byAddr {
		pm[a] = d.namesFor(a)
	}
	d.ix.swap(nm, pm)
	d.count.Store(int64(len(d.records)))
	d.gen.Add(1)
	aside = len(d.aside)
	d.mu.Unlock()
	return aside, skipped
}

// validOutside reports whether r, refused for its domain, is a valid
// record of a domain name outside the zones (not a malformed one).
func validOutside(r Record) bool {
	if ValidID(r.ID) != nil || !r.IP.IsValid() || r.Domain == "" {
		return false
	}
	_, ok := dns.IsDomainName(r.Domain)
	return ok
}

// Aside returns the records kept aside.
func (d *DB) Aside() []Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Record(nil), d.aside...)
}

// All returns the records and the records aside, as a snapshot or a
// reload keeps them, and the generation they are of.
func (d *DB) All() (recs, aside []Record, gen uint64) {
	d.mu.Lock()
	recs = make([]Record, 0, len(d.records))
	for _, r := range d.records {
		recs = append(recs, r)
	}
	aside = append([]Record(nil), d.aside...)
	gen = d.gen.Load()
	d.mu.Unlock()
	Sort(recs)
	return recs, aside, gen
}

// Generation is the database's generation: one more at every change.
func (d *DB) Generation() uint64 { return d.gen.Load() }

// rebuildName republishes the entry for name; d.mu is held.
func (d *DB) rebuildName(name string) {
	d.ix.setName(name, d.entryFor(name))
}

func (d *DB) entryFor(name string) *Entry {
	keys := d.byName[name]
	if len(keys) == 0 {
		return nil
	}
	recs := make([]Record, 0, len(keys))
	for k := range keys {
		recs = append(recs, d.records[k])
	}
	Sort(recs)
	e := &Entry{}
	seen := map[netip.Addr]int{}
	for _, r := range recs {
		if i, ok := seen[r.IP]; ok { // same address from two identifiers: keep the lower TTL as served
			if r.IP.Is4() {
				e.ttlA[i] = d.lowerTTL(e.ttlA[i], r.TTL)
			} else {
				e.ttlAAAA[i] = d.lowerTTL(e.ttlAAAA[i], r.TTL)
			}
			continue
		}
		if r.IP.Is4() {
			seen[r.IP] = len(e.a)
			e.a = append(e.a, r.IP.AsSlice())
			e.ttlA = append(e.ttlA, r.TTL)
		} else {
			seen[r.IP] = len(e.aaaa)
			e.aaaa = append(e.aaaa, r.IP.AsSlice())
			e.ttlAAAA = append(e.ttlAAAA, r.TTL)
		}
	}
	return e
}

// lowerTTL returns whichever of a and b is served with the lower TTL; 0
// stands for the Corefile's ttl (so an explicit 5 wins over 0 when the
// ttl is 30, and 0 wins over an explicit 60).
func (d *DB) lowerTTL(a, b uint32) uint32 {
	served := func(t uint32) uint32 {
		if t == 0 {
			return d.defaultTTL
		}
		return t
	}
	if served(b) < served(a) {
		return b
	}
	return a
}

func (d *DB) rebuildAddr(a netip.Addr) { d.ix.setPTR(a, d.namesFor(a)) }

func (d *DB) namesFor(a netip.Addr) []string {
	set := map[string]bool{}
	for k := range d.byAddr[a] {
		set[k.domain] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func add[K comparable](m map[K]map[key]struct{}, k K, rk key) {
	s := m[k]
	if s == nil {
		s = map[key]struct{}{}
		m[k] = s
	}
	s[rk] = struct{}{}
}

func del[K comparable](m map[K]map[key]struct{}, k K, rk key) {
	if s := m[k]; s != nil {
		delete(s, rk)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}
