package endpointsvc

import (
	"context"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// FuzzServeDNS feeds arbitrary packets to the handler: whatever unpacks
// must get a reply (or go to the next plugin) and never a panic.
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"atlas.svc.orch.", dns.TypeA}, {"_http._tcp.atlas.svc.orch.", dns.TypeSRV}, {"node-1.node.svc.orch.", dns.TypeAAAA}, {"svc.orch.", dns.TypeSOA}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		b, _ := m.Pack()
		f.Add(b)
	}
	e := newTestPlugin(f, true)
	f.Fuzz(func(t *testing.T, b []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil || len(m.Question) != 1 {
			return
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		code, _ := e.ServeDNS(context.Background(), rec, m)
		if code != dns.RcodeRefused && rec.Msg == nil && code == dns.RcodeSuccess {
			t.Fatalf("NOERROR without a reply for %v", m.Question[0])
		}
	})
}

// FuzzParseCorefile checks that no Corefile text makes parse panic.
func FuzzParseCorefile(f *testing.F) {
	for _, s := range []string{
		"endpointsvc {\nsource file s.json 1s\nttl 10\n}",
		"endpointsvc a.example. {\nsource orch http://127.0.0.1:1/x\ntoken_file t\ntimeout 1s\nmax_body 1k\nmax_backoff 2s\nfallthrough\n}",
		"endpointsvc {\nnamespace x\ninclude_unhealthy\nsnapshot s\n}",
		"endpointsvc cluster.local in-addr.arpa {\nsource kubernetes k c\nschema kubernetes\npods insecure\nlabels a=b\nnamespaces x y\nfallthrough in-addr.arpa\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parse(caddy.NewTestController("dns", s))
	})
}
