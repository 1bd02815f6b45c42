package records

import (
	"net"
	"net/netip"
	"sync"

	"github.com/miekg/dns"
)

// Entry is what the hot path reads for one name: immutable once
// published. IPs are stored as net.IP so replies share them without copying.
type Entry struct {
	a, aaaa       []net.IP
	ttlA, ttlAAAA []uint32 // per address; 0 = Corefile ttl
}

// Holds reports whether the entry has the address a.
func (e *Entry) Holds(a netip.Addr) bool {
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

// TTL returns the TTL of the entry's address a (0: the Corefile's ttl),
// and whether the entry holds a.
func (e *Entry) TTL(a netip.Addr) (uint32, bool) {
	ips, ttls := e.a, e.ttlA
	if a.Is6() {
		ips, ttls = e.aaaa, e.ttlAAAA
	}
	for i, ip := range ips {
		if x, ok := netip.AddrFromSlice(ip); ok && x.Unmap() == a {
			return ttls[i], true
		}
	}
	return 0, false
}

// RRs builds the A/AAAA records of the entry under qname (A for TypeA,
// AAAA for TypeAAAA, both for TypeANY, none otherwise), a record's TTL 0
// standing for defTTL. They never carry the cache-flush bit, in DNS or in
// mDNS: every name is shared by design (containers of one service on
// several hosts share a name), so a host's records must not evict another
// host's from peer caches.
func (e *Entry) RRs(qname string, qtype uint16, defTTL uint32) []dns.RR {
	const class = dns.ClassINET
	wantA := qtype == dns.TypeA || qtype == dns.TypeANY
	wantAAAA := qtype == dns.TypeAAAA || qtype == dns.TypeANY
	n := 0
	if wantA {
		n += len(e.a)
	}
	if wantAAAA {
		n += len(e.aaaa)
	}
	if n == 0 {
		return nil
	}
	ttl := func(t uint32) uint32 {
		if t == 0 {
			return defTTL
		}
		return t
	}
	out := make([]dns.RR, 0, n)
	if wantA && len(e.a) > 0 {
		rrs := make([]dns.A, len(e.a)) // one allocation for all of them
		for i, ip := range e.a {
			rrs[i] = dns.A{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeA, Class: class, Ttl: ttl(e.ttlA[i])}, A: ip}
			out = append(out, &rrs[i])
		}
	}
	if wantAAAA && len(e.aaaa) > 0 {
		rrs := make([]dns.AAAA, len(e.aaaa))
		for i, ip := range e.aaaa {
			rrs[i] = dns.AAAA{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeAAAA, Class: class, Ttl: ttl(e.ttlAAAA[i])}, AAAA: ip}
			out = append(out, &rrs[i])
		}
	}
	return out
}

// PTRs builds the PTR records of names under qname.
func PTRs(names []string, qname string, ttl uint32) []dns.RR {
	if len(names) == 0 {
		return nil
	}
	answer := make([]dns.RR, 0, len(names))
	for _, n := range names {
		answer = append(answer, &dns.PTR{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: ttl}, Ptr: n})
	}
	return answer
}

// RR is the A or AAAA record of rec with ttl (0 for a goodbye).
func RR(rec Record, ttl uint32) dns.RR {
	h := dns.RR_Header{Name: rec.Domain, Class: dns.ClassINET, Ttl: ttl}
	if rec.IP.Is4() {
		h.Rrtype = dns.TypeA
		return &dns.A{Hdr: h, A: net.IP(rec.IP.AsSlice())}
	}
	h.Rrtype = dns.TypeAAAA
	return &dns.AAAA{Hdr: h, AAAA: net.IP(rec.IP.AsSlice())}
}

// index is the read side of the database: the entry of each name and the
// names of each address, under a read-write mutex. Keys of names are
// lowercased FQDNs; entries are immutable once published. (It was 64
// copy-on-write shards behind atomic pointers once; the server-level
// benchmark showed no difference, see docs/measurements/mdnsfallback.md,
// and the database changes at container-event rate, so it is two maps.)
type index struct {
	mu    sync.RWMutex
	names map[string]*Entry
	ptrs  map[netip.Addr][]string
}

func newIndex() *index {
	return &index{names: map[string]*Entry{}, ptrs: map[netip.Addr][]string{}}
}

// lookup returns the entry for a lowercased FQDN, or nil.
func (ix *index) lookup(name string) *Entry {
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

func (ix *index) setName(name string, e *Entry) {
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
func (ix *index) swap(names map[string]*Entry, ptrs map[netip.Addr][]string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.names, ix.ptrs = names, ptrs
}
