// Package table is virtualconsul's model: the immutable table of virtual
// names and their VIPs (Table, built by a Builder from a source's entries),
// the grammar of virtual names (names.go), the table file and snapshot
// format (decode.go, Table.WriteJSON) and why an entry is left out of a
// table (skip.go). Every source builds its tables here, so every table
// passes the same checks; the plugin serves them. It knows nothing of DNS
// messages.
package table

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// Entry is one virtual domain as a sync source delivers it: a full-form
// name and its virtual IP addresses, as text. Every source (the file, and
// later the Consul catalog or xDS) turns its payload into entries and builds
// a Table from them with a Builder, so every table passes the same checks.
type Entry struct {
	// Name is a full-form virtual domain,
	// [<port>.]<service>.virtual.<ns>.ns.<ap>.ap.<dc>.dc.consul, in any
	// letter case, with or without the final dot.
	Name string
	// Addresses are the entry's virtual IPs (IPv4 or IPv6), at least one.
	Addresses []string
}

// Table is an immutable map from canonical virtual names to their VIPs.
// It is built once by a Builder and then only read, by any number of
// goroutines, without locks.
//
// Invariant: keys are lowercased full-form names without the final dot;
// every key has at least one VIP; a key with one IPv4 and one IPv6 VIP is
// one service answering A and AAAA (dual); a key whose entries carry two
// distinct VIPs of one family is ambiguous and answers nothing.
type Table struct {
	index  map[string]int32
	vips   []VIP
	multi  map[int32][]netip.Addr // the VIPs of ambiguous keys, for Lookup and snapshots
	dual   map[int32][16]byte     // the IPv6 VIP of dual keys (their IPv4 VIP is in vips)
	serial uint32                 // SOA serial: the build time in Unix seconds
	gen    uint64                 // generation: tables built later in the process have higher ones
	// dc is the datacenter the source's agent is in ("" when the source
	// does not say): short names expand with it unless the Corefile names
	// one (datacenter). When the source does not say, the datacenter all
	// the table's entries are in, if they agree.
	dc string
	// dcs: the datacenters of the table's keys.
	dcs map[string]struct{}
}

// VIP is one key's answer, stored by value so the table holds no pointer per
// entry: an IPv4 VIP sits in ip[:4].
type VIP struct {
	ip  [16]byte
	fam uint8
}

const (
	FamAmbiguous uint8 = 0
	Fam4         uint8 = 4
	Fam6         uint8 = 6
	FamDual      uint8 = 10 // ip[:4] is the IPv4 VIP, Table.dual the IPv6 one
)

// Family returns v's kind: Fam4, Fam6, FamDual or FamAmbiguous.
func (v *VIP) Family() uint8 { return v.fam }

// IPv4 returns the IPv4 VIP of a Fam4 or FamDual key (the table's memory:
// read only).
func (v *VIP) IPv4() []byte { return v.ip[:4:4] }

// IPv6 returns the IPv6 VIP of a Fam6 key (the table's memory: read only).
func (v *VIP) IPv6() []byte { return v.ip[:] }

// Index returns the index of key, a canonical key (AppendKey), for VIP.
func (t *Table) Index(key []byte) (int32, bool) {
	i, ok := t.index[string(key)]
	return i, ok
}

// VIP returns the answer of the key at index i (Index).
func (t *Table) VIP(i int32) *VIP { return &t.vips[i] }

// Serial returns t's SOA serial: its build time in Unix seconds.
func (t *Table) Serial() uint32 { return t.serial }

// Len returns the number of distinct keys in t.
func (t *Table) Len() int { return len(t.index) }

// tableGen numbers the tables built in this process.
var tableGen atomic.Uint64

// Generation returns t's generation: every table built in the process has
// its own, higher than those built before it.
func (t *Table) Generation() uint64 { return t.gen }

// Datacenter returns the datacenter of the source's agent, "" when the
// source did not say.
func (t *Table) Datacenter() string { return t.dc }

// Lookup returns the VIPs of name, a full-form virtual domain in any case,
// with or without the final dot; two VIPs of one family mean the name is
// ambiguous (one IPv4 and one IPv6 VIP are one service). It is meant for tests and debugging, not for the query path.
func (t *Table) Lookup(name string) ([]netip.Addr, bool) {
	key := strings.TrimSuffix(strings.ToLower(name), ".")
	i, ok := t.index[key]
	if !ok {
		return nil, false
	}
	return t.addrs(i), true
}

func (t *Table) addrs(i int32) []netip.Addr {
	v := &t.vips[i]
	switch v.fam {
	case Fam4:
		return []netip.Addr{netip.AddrFrom4([4]byte(v.ip[:4]))}
	case Fam6:
		return []netip.Addr{netip.AddrFrom16(v.ip)}
	case FamDual:
		return []netip.Addr{netip.AddrFrom4([4]byte(v.ip[:4])), netip.AddrFrom16(t.dual[i])}
	}
	return append([]netip.Addr(nil), t.multi[i]...)
}

// IPv6Of returns the IPv6 VIP of the dual key i.
func (t *Table) IPv6Of(i int32) []byte {
	a := t.dual[i]
	return a[:]
}

// Entries returns t's entries, one per key, in no particular order.
func (t *Table) Entries() []Entry {
	out := make([]Entry, 0, len(t.index))
	for key, i := range t.index {
		addrs := t.addrs(i)
		e := Entry{Name: key, Addresses: make([]string, len(addrs))}
		for j, a := range addrs {
			e.Addresses[j] = a.String()
		}
		out = append(out, e)
	}
	return out
}

// WriteJSON writes t in the table file's own shape (an Envoy
// virtual_domains array; the inline_dns_table object with a datacenter
// field when t knows its agent's datacenter), so a snapshot can be read
// back by Decode.
func (t *Table) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if t.dc != "" {
		// dc holds only [a-z0-9_-] (validLabel): no JSON escaping needed.
		bw.WriteString("{\"datacenter\":\"" + t.dc + "\",\"virtual_domains\":")
	}
	bw.WriteString("[")
	first := true
	for key, i := range t.index {
		if !first {
			bw.WriteString(",")
		}
		first = false
		// keys hold only [a-z0-9._-]: no JSON escaping needed.
		bw.WriteString("\n{\"name\":\"")
		bw.WriteString(key)
		bw.WriteString("\",\"endpoint\":{\"address_list\":{\"address\":[")
		for j, a := range t.addrs(i) {
			if j > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\"")
			bw.WriteString(a.String())
			bw.WriteString("\"")
		}
		bw.WriteString("]}}}")
	}
	bw.WriteString("\n]")
	if t.dc != "" {
		bw.WriteString("}")
	}
	bw.WriteString("\n")
	return bw.Flush()
}

// Builder collects entries into a new Table, checking each one.
// It is not safe for concurrent use.
type Builder struct {
	t *Table
	n int // entries added so far, for error messages
}

// HasDC reports whether some key of t is in datacenter dc.
func (t *Table) HasDC(dc []byte) bool {
	_, ok := t.dcs[string(dc)]
	return ok
}

// dcOfKey returns the datacenter label of a canonical key.
func dcOfKey(key string) string {
	rest := strings.TrimSuffix(key, ".dc.consul")
	return rest[strings.LastIndexByte(rest, '.')+1:]
}

// NewBuilder returns a Builder for about sizeHint entries (0 when unknown).
func NewBuilder(sizeHint int) *Builder {
	return &Builder{t: &Table{
		index: make(map[string]int32, sizeHint),
		vips:  make([]VIP, 0, sizeHint),
	}}
}

// Add checks e and adds it. The error names the entry (its 1-based position
// and name): a bad name, a bad address or no address. Entries with the same
// name merge; their distinct VIPs count together.
func (b *Builder) Add(e Entry) error {
	b.n++
	key, err := CanonicalName(e.Name)
	if err != nil {
		return fmt.Errorf("entry %d (%q): %w", b.n, e.Name, err)
	}
	if len(e.Addresses) == 0 {
		return fmt.Errorf("entry %d (%q): no address", b.n, e.Name)
	}
	if len(b.t.vips) >= 1<<31-1 {
		return fmt.Errorf("entry %d (%q): table full", b.n, e.Name)
	}
	for _, s := range e.Addresses {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Unmap().IsUnspecified() {
			return fmt.Errorf("entry %d (%q): bad address %q", b.n, e.Name, s)
		}
		b.add(key, a.Unmap())
	}
	return nil
}

func (b *Builder) add(key string, a netip.Addr) {
	t := b.t
	i, ok := t.index[key]
	if !ok {
		var v VIP
		if a.Is4() {
			v.fam = Fam4
			a4 := a.As4()
			copy(v.ip[:], a4[:])
		} else {
			v.fam = Fam6
			v.ip = a.As16()
		}
		t.index[key] = int32(len(t.vips))
		t.vips = append(t.vips, v)
		if dc := dcOfKey(key); t.dcs == nil {
			t.dcs = map[string]struct{}{dc: {}}
		} else if _, ok := t.dcs[dc]; !ok {
			t.dcs[dc] = struct{}{}
		}
		return
	}
	have := t.addrs(i)
	for _, h := range have {
		if h == a {
			return
		}
	}
	if v := &t.vips[i]; v.fam == Fam4 && !a.Is4() || v.fam == Fam6 && a.Is4() {
		// one address of each family: one service answering A and AAAA
		if t.dual == nil {
			t.dual = map[int32][16]byte{}
		}
		v4, v6 := have[0], a
		if a.Is4() {
			v4, v6 = a, have[0]
		}
		t.dual[i] = v6.As16()
		*v = VIP{fam: FamDual}
		a4 := v4.As4()
		copy(v.ip[:], a4[:])
		return
	}
	if t.vips[i].fam == FamDual {
		delete(t.dual, i)
	}
	if t.multi == nil {
		t.multi = map[int32][]netip.Addr{}
	}
	t.multi[i] = append(have, a)
	t.vips[i] = VIP{fam: FamAmbiguous}
}

// SetDatacenter records the datacenter of the source's agent in the table
// (see Table.Datacenter); dc must be a valid label or "".
func (b *Builder) SetDatacenter(dc string) { b.t.dc = dc }

// Table returns the built table; the Builder must not be used afterwards.
func (b *Builder) Table() *Table {
	t := b.t
	b.t = nil
	if t.dc == "" && len(t.dcs) == 1 {
		for dc := range t.dcs {
			t.dc = dc // every entry is in one datacenter: the table's own
		}
	}
	t.serial = uint32(time.Now().Unix())
	t.gen = tableGen.Add(1)
	return t
}

// Build checks every entry and returns the table, or the first entry's
// error; a table is built whole or not at all.
func Build(entries []Entry) (*Table, error) {
	b := NewBuilder(len(entries))
	for _, e := range entries {
		if err := b.Add(e); err != nil {
			return nil, err
		}
	}
	return b.Table(), nil
}

// CanonicalName checks a full-form virtual domain and returns its key.
func CanonicalName(name string) (string, error) {
	key := strings.TrimSuffix(strings.ToLower(name), ".")
	rel, ok := strings.CutSuffix(key, ".consul")
	if !ok {
		return "", errors.New("name is not under consul.")
	}
	var buf [256]byte
	if len(rel) > 253-len(".consul") {
		return "", errors.New("name too long")
	}
	b := append(buf[:0], rel...)
	p, ok := ParseVirtual(b)
	if !ok || p.NS == nil || p.AP == nil || p.DC == nil {
		return "", errors.New("not a full-form virtual name ([<port>.]<service>.virtual.<ns>.ns.<ap>.ap.<dc>.dc.consul)")
	}
	for _, l := range [][]byte{p.Port, p.Service, p.NS, p.AP, p.DC} {
		if l != nil && !validLabel(l) {
			return "", fmt.Errorf("bad label %q", l)
		}
	}
	return key, nil
}
