// Package soa builds the synthesised SOA record that meshdns's plugins put in
// the authority section of NXDOMAIN and NODATA answers (RFC 2308).
//
// Names are computed once per zone at setup, so the query path only copies
// strings; the root zone "." gets "ns.dns." and "hostmaster.ns.dns." (not
// "ns.dns..", which does not pack).
package soa

import "github.com/miekg/dns"

// Names are one zone's SOA owner, MNAME and RNAME. Zone is a lowercased FQDN.
type Names struct {
	Zone, Ns, Mbox string
}

// For returns the SOA names of zone (a lowercased FQDN).
func For(zone string) Names {
	host := "ns.dns." + zone
	if zone == "." {
		host = "ns.dns."
	}
	return Names{Zone: zone, Ns: host, Mbox: "hostmaster." + host}
}

// Fill writes zone's SOA into rr (which callers may embed in a reply to save
// an allocation). ttl is the record's TTL and its negative-caching minimum.
func (n Names) Fill(rr *dns.SOA, ttl, serial uint32) {
	*rr = dns.SOA{
		Hdr:     dns.RR_Header{Name: n.Zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      n.Ns,
		Mbox:    n.Mbox,
		Serial:  serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  ttl,
	}
}

// New returns zone's SOA as a new record.
func (n Names) New(ttl, serial uint32) *dns.SOA {
	rr := new(dns.SOA)
	n.Fill(rr, ttl, serial)
	return rr
}
