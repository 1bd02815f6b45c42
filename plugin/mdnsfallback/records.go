package mdnsfallback

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
)

// Record is one entry of the local record database: an IP address bound to a
// host-scoped identifier (a container ID, "weave:extern", …) under a domain
// name.
//
// Ownership: a record (identifier, address, name) belongs to whoever wrote
// it first — the HTTP API (Owner "") or an updater. A write of the same
// record by another owner changes nothing (ErrOwned: no take-over), and
// each owner deletes only its own records, so an API call never takes or
// releases a container's record and the updater never an API record. A
// name answers the union of its records, whoever owns them.
type Record struct {
	ID            string     `json:"id"`
	IP            netip.Addr `json:"ip"`
	Domain        string     `json:"domain"`         // lowercased FQDN inside one of the zones
	RoutingPrefix int        `json:"routing_prefix"` // prefix length of the IP's network
	TTL           uint32     `json:"ttl,omitempty"`  // seconds; 0 means the Corefile's ttl
	// Owner names the updater that wrote the record ("docker"); empty for
	// records written through the HTTP API. An updater only ever deletes
	// records it owns.
	Owner string `json:"owner,omitempty"`
}

// maxIDLen bounds an identifier (a Docker container ID is 64 hex digits).
const maxIDLen = 256

// Errors the database returns; the API maps them to 4xx codes.
var (
	ErrFull      = errors.New("record database full")
	ErrBadID     = errors.New("bad identifier")
	ErrBadIP     = errors.New("bad IP address")
	ErrBadDomain = errors.New("bad domain")
	ErrBadPrefix = errors.New("bad routing_prefix")
	ErrBadTTL    = errors.New("bad ttl")
	// ErrOwned: the record exists and belongs to another owner; it stays
	// as it is.
	ErrOwned = errors.New("record owned by another writer")
)

// recordKey identifies a record: one identifier may bind several names to
// one address (aliases), and several addresses to one name.
type recordKey struct {
	id     string
	ip     netip.Addr
	domain string
}

// nameEntry is what the hot path reads for one name: immutable once
// published. IPs are stored as net.IP so replies share them without copying.
type nameEntry struct {
	a, aaaa       []net.IP
	ttlA, ttlAAAA []uint32 // per address; 0 = Corefile ttl
}

// holds reports whether the entry has the address a.
func (e *nameEntry) holds(a netip.Addr) bool {
	ips := e.a
	if a.Is6() {
		ips = e.aaaa
	}
	for _, ip := range ips {
		if x, ok := netip.AddrFromSlice(ip); ok && x.Unmap() == a {
			return true
		}
	}
	return false
}

// index is the read side of the database: the entry of each name and the
// names of each address, under a read-write mutex. Keys of names are
// lowercased FQDNs; entries are immutable once published. (It was 64
// copy-on-write shards behind atomic pointers once; the server-level
// benchmark showed no difference, see docs/mdnsfallback-performance.md,
// and the database changes at container-event rate, so it is two maps.)
type index struct {
	mu    sync.RWMutex
	names map[string]*nameEntry
	ptrs  map[netip.Addr][]string
}

func newIndex() *index {
	return &index{names: map[string]*nameEntry{}, ptrs: map[netip.Addr][]string{}}
}

// lookup returns the entry for a lowercased FQDN, or nil.
func (ix *index) lookup(name string) *nameEntry {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.names[name]
}

// lookupPTR returns the names bound to a, or nil.
func (ix *index) lookupPTR(a netip.Addr) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.ptrs[a]
}

func (ix *index) setName(name string, e *nameEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if e == nil {
		delete(ix.names, name)
	} else {
		ix.names[name] = e
	}
}

func (ix *index) setPTR(a netip.Addr, names []string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if len(names) == 0 {
		delete(ix.ptrs, a)
	} else {
		ix.ptrs[a] = names
	}
}

// swap replaces both maps (a whole build, made without the lock).
func (ix *index) swap(names map[string]*nameEntry, ptrs map[netip.Addr][]string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.names, ix.ptrs = names, ptrs
}

// DB is the local record database. Writers serialise on a mutex; readers use
// the index, under its own read lock. Every change runs the onChange hook (snapshot writer),
// a put runs onPut (cache eviction, mDNS announcement) and deletions that
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
	records map[recordKey]Record
	byName  map[string]map[recordKey]struct{}
	byAddr  map[netip.Addr]map[recordKey]struct{}
	byID    map[string]map[recordKey]struct{}
	ix      *index
	count   atomic.Int64
	gen     atomic.Uint64 // one more at every change, under mu: the inspect listing's generation

	onChange func()
	onPut    func(r Record)      // after a record was added or changed
	onGone   func(gone []Record) // name/address pairs no identifier holds any more
}

// NewDB returns an empty database accepting names inside zones (lowercased
// FQDNs) and holding at most maxRecords records.
func NewDB(zones []string, maxRecords int) *DB {
	return &DB{
		zones:      zones,
		maxRecords: maxRecords,
		records:    map[recordKey]Record{},
		byName:     map[string]map[recordKey]struct{}{},
		byAddr:     map[netip.Addr]map[recordKey]struct{}{},
		byID:       map[string]map[recordKey]struct{}{},
		ix:         newIndex(),
	}
}

// Len returns the number of records.
func (d *DB) Len() int { return int(d.count.Load()) }

// Normalize validates r and returns it in canonical form: lowercased FQDN
// domain, unmapped IP, routing prefix defaulted to the address length.
func (d *DB) Normalize(r Record) (Record, error) {
	if err := validID(r.ID); err != nil {
		return r, err
	}
	if !r.IP.IsValid() || r.IP.Zone() != "" || r.IP.IsUnspecified() || r.IP.IsMulticast() {
		return r, fmt.Errorf("%w: %q", ErrBadIP, r.IP.String())
	}
	r.IP = r.IP.Unmap()
	bits := r.IP.BitLen()
	if r.RoutingPrefix == 0 {
		r.RoutingPrefix = bits
	}
	if r.RoutingPrefix < 0 || r.RoutingPrefix > bits {
		return r, fmt.Errorf("%w: %d is outside 1..%d", ErrBadPrefix, r.RoutingPrefix, bits)
	}
	dom, err := d.normalizeDomain(r.Domain)
	if err != nil {
		return r, err
	}
	r.Domain = dom
	return r, nil
}

func validID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrBadID)
	case len(id) > maxIDLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrBadID, maxIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: not UTF-8", ErrBadID)
	}
	for _, c := range id {
		if c <= ' ' || c == '/' || c == 0x7f {
			return fmt.Errorf("%w: %q holds a space, control character or slash", ErrBadID, id)
		}
	}
	return nil
}

func (d *DB) normalizeDomain(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: missing domain", ErrBadDomain)
	}
	if _, ok := dns.IsDomainName(s); !ok || strings.ContainsAny(s, " \\") {
		return "", fmt.Errorf("%w: %q is not a domain name", ErrBadDomain, s)
	}
	name := strings.ToLower(dns.Fqdn(s))
	if plugin.Zones(d.zones).Matches(name) == "" {
		return "", fmt.Errorf("%w: %q is outside the zones %s", ErrBadDomain, name, strings.Join(d.zones, " "))
	}
	return name, nil
}

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
	k := recordKey{r.ID, r.IP, r.Domain}
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
		old, ok := d.records[recordKey{r.ID, r.IP, r.Domain}]
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
	sortRecords(gone)
	d.changed(bye)
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
	sortRecords(out)
	return out
}

// Replace swaps the whole content for recs (a loaded snapshot or records
// carried across a reload). Invalid records are skipped and counted; recs
// beyond max_records are dropped too.
func (d *DB) Replace(recs []Record) (skipped int) {
	d.mu.Lock()
	d.records = map[recordKey]Record{}
	d.byName = map[string]map[recordKey]struct{}{}
	d.byAddr = map[netip.Addr]map[recordKey]struct{}{}
	d.byID = map[string]map[recordKey]struct{}{}
	for _, r := range recs {
		r, err := d.Normalize(r)
		if err != nil || len(d.records) >= d.maxRecords {
			skipped++
			continue
		}
		k := recordKey{r.ID, r.IP, r.Domain}
		d.records[k] = r
		add(d.byName, r.Domain, k)
		add(d.byAddr, r.IP, k)
		add(d.byID, r.ID, k)
	}
	// Build the index anew and publish it.
	nm := make(map[string]*nameEntry, len(d.byName))
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
	d.mu.Unlock()
	return skipped
}

// rebuildName republishes the entry for name; d.mu is held.
func (d *DB) rebuildName(name string) {
	d.ix.setName(name, d.entryFor(name))
}

func (d *DB) entryFor(name string) *nameEntry {
	keys := d.byName[name]
	if len(keys) == 0 {
		return nil
	}
	recs := make([]Record, 0, len(keys))
	for k := range keys {
		recs = append(recs, d.records[k])
	}
	sortRecords(recs)
	e := &nameEntry{}
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
			e.a = append(e.a, net.IP(r.IP.AsSlice()))
			e.ttlA = append(e.ttlA, r.TTL)
		} else {
			seen[r.IP] = len(e.aaaa)
			e.aaaa = append(e.aaaa, net.IP(r.IP.AsSlice()))
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

func add[K comparable](m map[K]map[recordKey]struct{}, k K, rk recordKey) {
	s := m[k]
	if s == nil {
		s = map[recordKey]struct{}{}
		m[k] = s
	}
	s[rk] = struct{}{}
}

func del[K comparable](m map[K]map[recordKey]struct{}, k K, rk recordKey) {
	if s := m[k]; s != nil {
		delete(s, rk)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

func sortRecords(rs []Record) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		if a.IP != b.IP {
			return a.IP.Less(b.IP)
		}
		return a.Domain < b.Domain
	})
}

// snapshotFile is the on-disk form of the database.
type snapshotFile struct {
	Version int      `json:"version"`
	Records []Record `json:"records"`
}

func encodeSnapshot(recs []Record) ([]byte, error) {
	return json.MarshalIndent(snapshotFile{Version: 1, Records: recs}, "", " ")
}

func decodeSnapshot(b []byte) ([]Record, error) {
	var s snapshotFile
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("unknown snapshot version %d", s.Version)
	}
	return s.Records, nil
}
