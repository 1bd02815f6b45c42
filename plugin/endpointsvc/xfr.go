package endpointsvc

import (
	"strings"

	"github.com/coredns/coredns/plugin/transfer"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	"github.com/miekg/dns"
)

// Transfer implements transfer.Transferer for schema kubernetes: the
// transfer plugin of the same server block serves AXFR (and IXFR, which
// falls back to AXFR) of a zone of the block from the served table, as
// the kubernetes plugin does. The orch schema, a zone that is not one of
// the block's, and a plugin without a table yet are not authoritative.
func (e *Endpointsvc) Transfer(zone string, serial uint32) (<-chan []dns.RR, error) {
	d, ok := e.schema.(*dnsSchema)
	if !ok {
		return nil, transfer.ErrNotAuthoritative
	}
	zone = strings.ToLower(dns.Fqdn(zone))
	zi := -1
	for i, z := range e.Zones {
		if z == zone {
			zi = i
		}
	}
	if zi < 0 || e.syncer == nil {
		return nil, transfer.ErrNotAuthoritative
	}
	t := e.tbl.Load()
	if t == nil {
		return nil, transfer.ErrNotAuthoritative
	}
	ch := make(chan []dns.RR)
	go func() {
		defer close(ch)
		d.srv.Transfer(t.model.(*k8sdns.Table), zi, t.serial, serial, func(rrs []dns.RR) { ch <- rrs })
	}()
	return ch, nil
}
