// Package records is mdnsfallback's local record database: records of
// (identifier, IP, domain, routing prefix, TTL, owner), the index the hot
// path and the mDNS responder read, and the snapshot that keeps them
// across restarts.
//
// Invariants: domains are lowercased FQDNs inside the zones; IPs are
// unmapped; an index entry is immutable once published.
package records

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
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

// MaxTTL bounds a record's TTL to a week.
const MaxTTL = 7 * 24 * 3600

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

// key identifies a record: one identifier may bind several names to one
// address (aliases), and several addresses to one name.
type key struct {
	id     string
	ip     netip.Addr
	domain string
}

func keyOf(r Record) key { return key{r.ID, r.IP, r.Domain} }

// Normalize validates r and returns it in canonical form: lowercased FQDN
// domain, unmapped IP, routing prefix defaulted to the address length.
func (d *DB) Normalize(r Record) (Record, error) {
	if err := ValidID(r.ID); err != nil {
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
	dom, err := d.NormalizeDomain(r.Domain)
	if err != nil {
		return r, err
	}
	r.Domain = dom
	return r, nil
}

// ValidID checks an identifier: 1..256 bytes of UTF-8 without spaces,
// control characters or slashes.
func ValidID(id string) error {
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

// NormalizeDomain returns s as a lowercased FQDN inside the zones.
func (d *DB) NormalizeDomain(s string) (string, error) {
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

// Sort orders records by identifier, address and domain.
func Sort(rs []Record) {
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
