// Package dnsname holds the name helpers every part of mdnsfallback uses:
// lowercased FQDN keys, zone membership and reverse names.
package dnsname

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"

	"github.com/miekg/dns"
)

// Lower lowercases an ASCII name without allocating when it is already
// lower case, and makes it fully qualified.
func Lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(dns.Fqdn(s))
		}
	}
	return dns.Fqdn(s)
}

// InZone reports whether the lowercased FQDN name is zone or below it.
func InZone(name, zone string) bool {
	if zone == "." {
		return true
	}
	if !strings.HasSuffix(name, zone) {
		return false
	}
	return len(name) == len(zone) || name[len(name)-len(zone)-1] == '.'
}

// Longest returns the index of the longest of zones that holds name (a
// lowercased FQDN), or -1.
func Longest(zones []string, name string) int {
	best := -1
	for i, z := range zones {
		if (best < 0 || len(z) > len(zones[best])) && InZone(name, z) {
			best = i
		}
	}
	return best
}

// IsReverse reports whether the lowercased FQDN is under in-addr.arpa. or
// ip6.arpa.
func IsReverse(name string) bool {
	return strings.HasSuffix(name, ".in-addr.arpa.") || strings.HasSuffix(name, ".ip6.arpa.")
}

// ParseReverse returns the address of an in-addr.arpa / ip6.arpa name.
func ParseReverse(qname string) (netip.Addr, bool) {
	s := dnsutil.ExtractAddressFromReverse(Lower(qname))
	if s == "" {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// InPrefixes reports whether one of prefixes holds a.
func InPrefixes(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, pr := range prefixes {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// ReverseZone is the in-addr.arpa / ip6.arpa zone that covers pr, rounded
// out to a label boundary.
func ReverseZone(pr netip.Prefix) string {
	a := pr.Masked().Addr()
	if a.Is4() {
		b := a.As4()
		labels := pr.Bits() / 8
		var sb strings.Builder
		for i := labels - 1; i >= 0; i-- {
			sb.WriteString(strconv.Itoa(int(b[i])) + ".")
		}
		return sb.String() + "in-addr.arpa."
	}
	b := a.As16()
	nibbles := pr.Bits() / 4
	var sb strings.Builder
	for i := nibbles - 1; i >= 0; i-- {
		v := b[i/2]
		if i%2 == 0 {
			v >>= 4
		}
		sb.WriteByte("0123456789abcdef"[v&0xf])
		sb.WriteByte('.')
	}
	return sb.String() + "ip6.arpa."
}

// SameData reports whether a and b are the same A, AAAA or PTR record
// data (the address, or the target in any letter case).
func SameData(a, b dns.RR) bool {
	switch x := a.(type) {
	case *dns.A:
		y, ok := b.(*dns.A)
		return ok && x.A.Equal(y.A)
	case *dns.AAAA:
		y, ok := b.(*dns.AAAA)
		return ok && x.AAAA.Equal(y.AAAA)
	case *dns.PTR:
		y, ok := b.(*dns.PTR)
		return ok && Lower(x.Ptr) == Lower(y.Ptr)
	}
	return false
}
