package orch

import (
	"context"

	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/pkg/soa"

	"github.com/miekg/dns"
)

// Server answers the orchestrator's names from a Table. Its fields are
// set once (from the Corefile) and only read afterwards.
type Server struct {
	Zones     []string // lowercased FQDNs
	Namespace string   // the namespace of short names
	TTL       uint32
	Upstream  Upstream // looks CNAME targets up; nil: none

	soas []soa.Names // per zone, made by Init
}

// Upstream looks a name up through the whole server (plugin/pkg/upstream).
type Upstream interface {
	Lookup(ctx context.Context, state request.Request, name string, typ uint16) (*dns.Msg, error)
}

// Init precomputes what Serve needs per zone; call it after setting Zones.
func (s *Server) Init() {
	s.soas = s.soas[:0]
	for _, z := range s.Zones {
		s.soas = append(s.soas, soa.For(z))
	}
}

// Serve answers state's question, whose name is in zone number zi, from
// t: the records, and whether the name does not exist (NXDOMAIN). A name
// that exists with no record of the type has no answer (NODATA).
func (s *Server) Serve(ctx context.Context, state request.Request, zi int, t *Table, serial uint32) (answer, extra []dns.RR, nxdomain bool) {
	owner, qtype := state.QName(), state.QType()
	exists := false
	n := parseName(state.Name(), s.Zones[zi], s.Namespace)
	switch n.kind {
	case kindApex:
		exists = true
		if qtype == dns.TypeSOA {
			answer = []dns.RR{s.SOA(zi, owner, serial)}
		}
	case kindService:
		if se, _ := t.services.Get(SvcKey{n.namespace, n.service}); se != nil {
			exists = true
			if se.cname != "" {
				answer = s.cname(ctx, state, owner, se.cname, qtype)
				break
			}
			switch qtype {
			case dns.TypeA:
				answer = s.a(owner, se.addrs)
			case dns.TypeAAAA:
				answer = s.aaaa(owner, se.addrs)
			case dns.TypeSRV:
				answer, extra = s.srv(owner, zi, se.srv)
			}
		}
	case kindSRV:
		if se, _ := t.services.Get(SvcKey{n.namespace, n.service}); se != nil {
			if targets, ok := se.port(portKey{n.port, n.proto}); ok {
				exists = true
				if qtype == dns.TypeSRV {
					answer, extra = s.srv(owner, zi, targets)
				}
			}
		}
	case kindNode:
		if ne, _ := t.nodes.Get(n.node); ne != nil {
			exists = true
			switch qtype {
			case dns.TypeA:
				answer = s.a(owner, ne.addrs)
			case dns.TypeAAAA:
				answer = s.aaaa(owner, ne.addrs)
			}
		}
	}
	return answer, extra, !exists
}

func (s *Server) a(owner string, a addrs) []dns.RR {
	n := a.n4()
	if n == 0 {
		return nil
	}
	rrs := make([]dns.RR, n)
	recs := make([]dns.A, n)
	for i := range recs {
		recs[i] = dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: s.TTL}, A: a.ip4(i)}
		rrs[i] = &recs[i]
	}
	return rrs
}

func (s *Server) aaaa(owner string, a addrs) []dns.RR {
	n := a.n6()
	if n == 0 {
		return nil
	}
	rrs := make([]dns.RR, n)
	recs := make([]dns.AAAA, n)
	for i := range recs {
		recs[i] = dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: s.TTL}, AAAA: a.ip6(i)}
		rrs[i] = &recs[i]
	}
	return rrs
}

// srv returns one SRV record per target (target <node>.node.<zone>, zone
// number zi) and the targets' A/AAAA records for the additional section,
// each node once.
func (s *Server) srv(owner string, zi int, targets []srvTarget) (answer, extra []dns.RR) {
	if len(targets) == 0 {
		return nil, nil
	}
	// targets are sorted by node: count each node's addresses once
	n4, n6 := 0, 0
	for i, t := range targets {
		if i == 0 || t.node != targets[i-1].node {
			n4, n6 = n4+t.node.n4(), n6+t.node.n6()
		}
	}
	answer = make([]dns.RR, len(targets))
	extra = make([]dns.RR, 0, n4+n6)
	recs := make([]dns.SRV, len(targets))
	as, aaaas := make([]dns.A, n4), make([]dns.AAAA, n6)
	for i, t := range targets {
		target := t.node.targets[zi]
		if i == 0 || t.node != targets[i-1].node {
			for j := range t.node.n4() {
				as[0] = dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: s.TTL}, A: t.node.ip4(j)}
				extra, as = append(extra, &as[0]), as[1:]
			}
			for j := range t.node.n6() {
				aaaas[0] = dns.AAAA{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: s.TTL}, AAAA: t.node.ip6(j)}
				extra, aaaas = append(extra, &aaaas[0]), aaaas[1:]
			}
		}
		recs[i] = dns.SRV{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: s.TTL},
			Priority: 0, Weight: 10, Port: t.port, Target: target}
		answer[i] = &recs[i]
	}
	return answer, extra
}

// SOA is zone number zi's SOA record with owner (the zone, or the
// question's spelling of it).
func (s *Server) SOA(zi int, owner string, serial uint32) dns.RR {
	rr := s.soas[zi].New(s.TTL, serial)
	rr.Hdr.Name = owner
	return rr
}

// cname answers a service that has an FQDN endpoint: one CNAME to target,
// and for any other type than CNAME the target's records of that type,
// looked up through the whole server, so the client gets the final
// A/AAAA in the same reply.
func (s *Server) cname(ctx context.Context, state request.Request, owner, target string, qtype uint16) []dns.RR {
	rr := &dns.CNAME{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: s.TTL}, Target: target}
	answer := []dns.RR{rr}
	if qtype == dns.TypeCNAME || s.Upstream == nil {
		return answer
	}
	m, err := s.Upstream.Lookup(ctx, state, target, qtype)
	if err != nil || m == nil {
		return answer
	}
	return append(answer, m.Answer...)
}
