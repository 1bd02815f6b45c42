// Package zonexfr transfers a zone over TCP and keys its records for
// comparing two servers' transfers as multisets: the distro differential
// (test/) and the AXFR benchmark (build/benchk8s) compare endpointsvc's
// zone with the stock kubernetes plugin's this way.
package zonexfr

import (
	"strings"
	"time"

	"github.com/miekg/dns"
)

// AXFR transfers zone from addr, record by record; on an error it returns
// what came before it.
func AXFR(zone, addr string, readTimeout time.Duration) ([]dns.RR, error) {
	m := new(dns.Msg)
	m.SetAxfr(zone)
	tr := &dns.Transfer{DialTimeout: 3 * time.Second, ReadTimeout: readTimeout}
	ch, err := tr.In(m, addr)
	if err != nil {
		return nil, err
	}
	var out []dns.RR
	for env := range ch {
		if env.Error != nil {
			return out, env.Error
		}
		out = append(out, env.RR...)
	}
	return out, nil
}

// Key is a transferred record as compared: its text, tabs as spaces, the
// SOA serial left out (each server counts its own) and the TTL kept.
func Key(rr dns.RR) string {
	c := dns.Copy(rr)
	if soa, ok := c.(*dns.SOA); ok {
		soa.Serial = 0
	}
	return strings.ReplaceAll(c.String(), "\t", " ")
}
