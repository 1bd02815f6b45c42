package endpointsvc

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"

	"github.com/miekg/dns"
)

// fakeLookup resolves the test hostnames without the network.
func fakeLookup(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "node4.example.test.":
		return []netip.Addr{netip.MustParseAddr("198.51.100.4"), netip.MustParseAddr("2001:db8::4")}, nil
	}
	return nil, errors.New("no such host")
}

// orchPlugin is an instance of schema orch in zones, namespace default,
// with TTL ttl and the syncer s; its next plugin answers REFUSED.
func orchPlugin(ttl uint32, s *syncer, zones ...string) *Endpointsvc {
	e := &Endpointsvc{Zones: zones, syncer: s, Next: test.NextHandler(dns.RcodeRefused, nil)}
	e.schema = &orchSchema{srv: orch.Server{Namespace: orch.DefaultNamespace, TTL: ttl}}
	e.finish(fakeLookup)
	return e
}

// dnsPlugin is an instance of schema kubernetes in zones (the first is
// the primary), TTL ttl, pods disabled, no upstream, with the syncer s;
// its next plugin answers REFUSED.
func dnsPlugin(ttl uint32, s *syncer, zones ...string) *Endpointsvc {
	e := &Endpointsvc{Zones: zones, syncer: s, Next: test.NextHandler(dns.RcodeRefused, nil)}
	e.schema = &dnsSchema{srv: k8sdns.Server{TTL: ttl}}
	e.finish(fakeLookup)
	e.schema.(*dnsSchema).srv.Upstream = nil // no server to chase CNAMEs through in unit tests
	return e
}

// orchOf is e's orch schema.
func orchOf(e *Endpointsvc) *orchSchema { return e.schema.(*orchSchema) }

// resolveHosts resolves the hostnames not cached yet, as the background
// work does after a build.
func (e *Endpointsvc) resolveHosts(ctx context.Context) { orchOf(e).resolve(ctx, false, e.rebuild) }

func loadState(t testing.TB, path string) *orch.State {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := orch.DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stateFile is the orch state the plugin tests serve.
const stateFile = "orch/testdata/state.json"

func checkCase(t *testing.T, e *Endpointsvc, tc test.Case) {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := e.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
		t.Fatal(err)
	}
	if rec.Msg == nil {
		t.Fatalf("%s: no reply", tc.Qname)
	}
	zeroSerial(rec.Msg)
	if err := test.SortAndCheck(rec.Msg, tc); err != nil {
		t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
	}
	if !rec.Msg.Authoritative {
		t.Errorf("%s %s: reply not authoritative", tc.Qname, dns.TypeToString[tc.Qtype])
	}
}

// zeroSerial sets every SOA's serial to 0 (it is the time of the build).
func zeroSerial(m *dns.Msg) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
		}
	}
}

var _ feed.State = (*orch.State)(nil)
