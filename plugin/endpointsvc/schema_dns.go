package endpointsvc

import (
	"context"
	"strings"

	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	"github.com/miekg/dns"
)

// dnsSchema is schema kubernetes: the Kubernetes DNS specification,
// answered as CoreDNS's kubernetes plugin answers it, from k8sdns's table.
type dnsSchema struct {
	srv         k8sdns.Server
	noEndpoints bool // noendpoints: tables hold no EndpointSlices (whatever the state has)
}

func (d *dnsSchema) name() string { return "kubernetes" }

// decode reads a state document of `source file` (or any snapshot form).
func (d *dnsSchema) decode(b []byte) (feed.State, error) { return k8sdns.DecodeSnapshot(b) }

func (d *dnsSchema) decodeSnapshot(b []byte) (feed.State, error) { return k8sdns.DecodeSnapshot(b) }

func (d *dnsSchema) logRecord(p feed.Patch) func([]byte) []byte {
	if kp, ok := p.(*k8sdns.Patch); ok {
		return kp.AppendRecord
	}
	return nil
}

func (d *dnsSchema) replay(st feed.State, recs [][]byte) (feed.State, int, error) {
	c, ok := st.(*k8sdns.Cluster)
	if !ok {
		return st, 0, errSchemaState(d, st)
	}
	return k8sdns.Replay(c, recs)
}

func (d *dnsSchema) build(st feed.State) modelTable {
	c, ok := st.(*k8sdns.Cluster)
	if !ok || c == nil {
		log.Errorf("%v", errSchemaState(d, st))
		c = &k8sdns.Cluster{}
	}
	if d.noEndpoints && len(c.Slices) > 0 {
		cc := *c
		cc.Slices = nil
		c = &cc
	}
	if !d.srv.PodsVerified && len(c.Pods) > 0 {
		cc := *c
		cc.Pods = nil // the pod index only with pods verified
		c = &cc
	}
	return k8sdns.Build(c)
}

func (d *dnsSchema) patch(cur modelTable, p feed.Patch) (modelTable, feed.State) {
	kp, ok := p.(*k8sdns.Patch)
	t, ok2 := cur.(*k8sdns.Table)
	if !ok || !ok2 {
		log.Errorf("%v", errSchemaState(d, p))
		return cur, nil
	}
	if d.noEndpoints || !d.srv.PodsVerified {
		kp = d.filter(kp)
	}
	return t.Patched(kp), nil
}

// filter drops from a patch what the options keep out of tables: slices
// (noendpoints), the pod index (without pods verified).
func (d *dnsSchema) filter(p *k8sdns.Patch) *k8sdns.Patch {
	q := *p
	if !d.srv.PodsVerified {
		q.Pods = nil
	}
	if d.noEndpoints {
		q.Changes = make([]k8sdns.Change, len(p.Changes))
		for i, c := range p.Changes {
			q.Changes[i] = k8sdns.Change{Key: c.Key, Service: c.Service}
		}
	}
	return &q
}

func (d *dnsSchema) serve(ctx context.Context, state request.Request, zi int, t *table) reply {
	rp := d.srv.Serve(ctx, state, zi, t.model.(*k8sdns.Table), t.serial)
	return reply{nxdomain: rp.NameError, refused: rp.Refused, answer: rp.Answer, extra: rp.Extra}
}

// soa is the kubernetes plugin's SOA: the zone in the question's spelling.
func (d *dnsSchema) soa(zi int, qname string, serial uint32) dns.RR {
	zone := d.srv.Zones[zi]
	zoneq := qname
	if len(qname) >= len(zone) {
		zoneq = qname[len(qname)-len(zone):]
	}
	if !strings.EqualFold(zoneq, zone) {
		zoneq = zone
	}
	return d.srv.SOA(zoneq, serial)
}

func (d *dnsSchema) background(context.Context, func(func() modelTable)) {}

func (d *dnsSchema) carry() any { return nil }

func (d *dnsSchema) restore(any) {}
