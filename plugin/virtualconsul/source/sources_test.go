package source

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dnstable "github.com/envoyproxy/go-control-plane/envoy/data/dns/v3"
	dnsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/udp/dns_filter/v3"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestParseSources(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ca.pem", "cert.pem", "key.pem", "token"} {
		os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
	}
	tests := []struct {
		input string
		err   string
		check func(t *testing.T, v *parsed)
	}{
		{`virtualconsul {
			source file /tmp/table.json
		}`, "", func(t *testing.T, v *parsed) {
			if f := v.src.(*fileSource); f.path != "/tmp/table.json" || f.interval != 5*time.Second {
				t.Errorf("file source = %+v", f)
			}
		}},
		{`virtualconsul {
			source file /tmp/t.json 250ms
		}`, "", func(t *testing.T, v *parsed) {
			if f := v.src.(*fileSource); f.interval != 250*time.Millisecond {
				t.Errorf("interval = %v", f.interval)
			}
		}},
		{`virtualconsul {
			source consul 127.0.0.1:8500
		}`, "", func(t *testing.T, v *parsed) {
			s := v.src.(*consulSource)
			if s.address != "127.0.0.1:8500" || s.tokenFile != "" || s.tls != nil || s.upstreams != nil {
				t.Errorf("consul = %+v", s)
			}
		}},
		{`virtualconsul {
			source consul https://consul.example:8501 {
				token_file ` + dir + `/token
				tls ` + dir + `/ca.pem ` + dir + `/cert.pem ` + dir + `/key.pem
				upstreams web API
			}
			snapshot ` + dir + `/snap.json
			ttl 9
		}`, "", func(t *testing.T, v *parsed) {
			s := v.src.(*consulSource)
			if s.address != "https://consul.example:8501" || s.tokenFile != dir+"/token" || s.tls.KeyFile != dir+"/key.pem" ||
				len(s.upstreams) != 2 || !s.upstreams["api"] {
				t.Errorf("consul = %+v", s)
			}
		}},
		{`virtualconsul {
			source consul
		}`, "", func(t *testing.T, v *parsed) {
			if s := v.src.(*consulSource); s.address != "" {
				t.Errorf("address = %q, want the environment's", s.address)
			}
		}},
		{`virtualconsul {
			source xds 127.0.0.1:18000 {
				node sidecar-1
				cluster web
			}
		}`, "", func(t *testing.T, v *parsed) {
			x := v.src.(*xdsSource)
			if x.address != "127.0.0.1:18000" || x.node != "sidecar-1" || x.cluster != "web" || x.tls != nil {
				t.Errorf("xds = %+v", x)
			}
		}},
		{`virtualconsul {
			source xds 127.0.0.1:8502 {
				node web-sidecar-proxy
				token_file secret/token
				max_message_size 256m
				protocol sotw
			}
		}`, "", func(t *testing.T, v *parsed) {
			x := v.src.(*xdsSource)
			if !strings.HasSuffix(x.tokenFile, "/secret/token") || x.maxMsg != 256<<20 || x.protocol != protoSotW || x.using != protoSotW {
				t.Errorf("xds = %+v", x)
			}
		}},
		{`virtualconsul {
			source xds 127.0.0.1:8502
		}`, "", func(t *testing.T, v *parsed) {
			x := v.src.(*xdsSource)
			if x.maxMsg != defaultMaxMessageSize || x.protocol != protoAuto || x.using != protoDelta || x.tokenFile != "" {
				t.Errorf("xds defaults = %+v", x)
			}
		}},
		{`virtualconsul {
			source envoy 127.0.0.1
		}`, "", func(t *testing.T, v *parsed) {
			e := v.remote
			if v.src != nil || e == nil || e.address != "127.0.0.1:8653" || e.timeout != 300*time.Millisecond || e.backoff != 5*time.Second {
				t.Errorf("envoy = %+v", e)
			}
		}},
		{`virtualconsul {
			source envoy [::1]:8653 {
				timeout 100ms
				backoff 1m
			}
			ttl 3
		}`, "", func(t *testing.T, v *parsed) {
			if e := v.remote; e.address != "[::1]:8653" || e.timeout != 100*time.Millisecond || e.backoff != time.Minute {
				t.Errorf("envoy = %+v", e)
			}
		}},
		{`virtualconsul {
			source consul a b
		}`, "Testfile:2 - Error during parsing: source consul: want [ADDRESS]", nil},
		{`virtualconsul {
			source consul 127.0.0.1:8500 {
				tls a b
			}
		}`, "Testfile:3 - Error during parsing: Wrong argument count", nil},
		{`virtualconsul {
			source consul 127.0.0.1:8500 {
				tls /nonexistent/ca b c
			}
		}`, "Testfile:3 - Error during parsing: source consul: tls: stat /nonexistent/ca", nil},
		{`virtualconsul {
			source consul 127.0.0.1:8500 {
				upstreams web
				upstreams api
			}
		}`, "Testfile:4 - Error during parsing: source consul: upstreams given twice", nil},
		{`virtualconsul {
			source consul 127.0.0.1:8500 {
				upstreams we.b
			}
		}`, `Testfile:3 - Error during parsing: source consul: upstreams: invalid service name "we.b"`, nil},
		{`virtualconsul {
			source consul 127.0.0.1:8500 {
				datacenter dc1
			}
		}`, `Testfile:3 - Error during parsing: source consul: unknown property "datacenter"`, nil},
		{`virtualconsul {
			source consul 127.0.0.1:8500 {
				upstreams web
		`, "Unexpected EOF", nil},
		{`virtualconsul {
			source xds
		}`, "Testfile:2 - Error during parsing: source xds: want ADDRESS (or CONSUL_GRPC_ADDR)", nil},
		{`virtualconsul {
			source xds 127.0.0.1:18000 {
				node
			}
		}`, "Testfile:3 - Error during parsing: Wrong argument count", nil},
		{`virtualconsul {
			source xds 127.0.0.1:18000 {
				protocol incremental
			}
		}`, `Testfile:3 - Error during parsing: source xds: bad protocol "incremental"`, nil},
		{`virtualconsul {
			source xds 127.0.0.1:18000 {
				max_message_size 3g
			}
		}`, `Testfile:3 - Error during parsing: source xds: bad max_message_size "3g"`, nil},
		{`virtualconsul {
			source xds 127.0.0.1:18000 {
				tls ` + dir + `/ca.pem ` + dir + `/cert.pem ` + dir + `/key.pem
			}
		}`, "Testfile:3 - Error during parsing: source xds: tls: " + dir + "/ca.pem: no PEM certificate", nil},
		{`virtualconsul {
			source envoy 127.0.0.1:8653 {
				timeout 0s
			}
		}`, `Testfile:3 - Error during parsing: source envoy: timeout: invalid duration "0s"`, nil},
		{`virtualconsul {
			source envoy 127.0.0.1:8653 {
				retries 3
			}
		}`, `Testfile:3 - Error during parsing: source envoy: unknown property "retries"`, nil},
		{`virtualconsul {
			source envoy 127.0.0.1:8653 extra
		}`, "source envoy: want ADDRESS", nil},
	}
	for i, tc := range tests {
		c := caddy.NewTestController("dns", tc.input)
		v, err := parse(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("test %d: error = %v, want %q", i, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("test %d: %v", i, err)
			continue
		}
		tc.check(t, v)
	}
}

// noInlineTable returns a virtual_dns listener whose DNS filter has no
// inline table: structurally invalid.
func noInlineTable(t testing.TB) *anypb.Any {
	cfg, err := anypb.New(&dnsfilter.DnsFilterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := anypb.New(&listener.Listener{Name: "virtual_dns", ListenerFilters: []*listener.ListenerFilter{{
		Name: dnsFilterName, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: cfg}}}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// listenerAny returns a Listener resource named name with a DNS filter
// holding domains.
func listenerAny(t testing.TB, name string, domains map[string][]string) *anypb.Any {
	var vds []*dnstable.DnsTable_DnsVirtualDomain
	for n, a := range domains {
		vds = append(vds, &dnstable.DnsTable_DnsVirtualDomain{Name: n, Endpoint: &dnstable.DnsTable_DnsEndpoint{
			EndpointConfig: &dnstable.DnsTable_DnsEndpoint_AddressList{AddressList: &dnstable.DnsTable_AddressList{Address: a}}}})
	}
	cfg, err := anypb.New(&dnsfilter.DnsFilterConfig{ServerConfig: &dnsfilter.DnsFilterConfig_ServerContextConfig{
		ConfigSource: &dnsfilter.DnsFilterConfig_ServerContextConfig_InlineDnsTable{InlineDnsTable: &dnstable.DnsTable{VirtualDomains: vds}}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := anypb.New(&listener.Listener{Name: name, ListenerFilters: []*listener.ListenerFilter{{
		Name: dnsFilterName, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: cfg}}}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestListenerEntries(t *testing.T) {
	other, _ := anypb.New(&listener.Listener{Name: "public_listener"})
	vd := listenerAny(t, "virtual_dns:127.0.0.1:8653", map[string][]string{webKey: {"240.0.0.1"}})
	got, found, err := ListenerEntries([]*anypb.Any{other, vd})
	if err != nil || !found || len(got) != 1 || got[0].Name != webKey || got[0].Addresses[0] != "240.0.0.1" {
		t.Fatalf("entries = %+v, %v, %v", got, found, err)
	}
	if got, found, err := ListenerEntries([]*anypb.Any{other}); err != nil || found || len(got) != 0 {
		t.Fatalf("no virtual_dns listener: %+v, %v, %v (want no table, not an empty one)", got, found, err)
	}
	empty := listenerAny(t, "virtual_dns", map[string][]string{})
	if got, found, err := ListenerEntries([]*anypb.Any{empty}); err != nil || !found || len(got) != 0 {
		t.Fatalf("a virtual_dns listener without names: %+v, %v, %v (want an empty table)", got, found, err)
	}
	noFilter, _ := anypb.New(&listener.Listener{Name: "virtual_dns"})
	if _, _, err := ListenerEntries([]*anypb.Any{noFilter}); err == nil || !strings.Contains(err.Error(), "has no envoy.filters.udp.dns_filter filter") {
		t.Fatalf("no filter: %v", err)
	}
	cluster, _ := anypb.New(&dnstable.DnsTable{})
	if _, _, err := ListenerEntries([]*anypb.Any{vd, cluster}); err == nil {
		t.Fatal("a non-listener resource was accepted")
	}
	if s := (&xdsSource{}).table([]*anypb.Any{other}); s.Result != SyncNoTable || !strings.Contains(s.Err.Error(), "none of the 1 listeners") {
		t.Fatalf("no virtual_dns listener: %+v", s)
	}
	// Entries DNS cannot ask for are left out and counted, the rest served.
	bad := listenerAny(t, "virtual_dns", map[string][]string{"web.consul": {"240.0.0.1"}, "a.b.virtual.default.ns.default.ap.dc1.dc.consul": {"240.0.0.2"},
		"ip.virtual.default.ns.default.ap.dc1.dc.consul": {"not-an-ip"}, "none.virtual.default.ns.default.ap.dc1.dc.consul": nil,
		"half.virtual.default.ns.default.ap.dc1.dc.consul": {"x", "240.0.0.5"}, webKey: {"240.0.0.1"}})
	s := (&xdsSource{}).table([]*anypb.Any{bad})
	if s.Result != SyncOK || s.Table.Len() != 3 || s.Skipped[table.SkipName] != 1 || s.Skipped[table.SkipAddress] != 1 || s.Skipped[table.SkipNoAddress] != 1 {
		t.Fatalf("entries DNS cannot ask for: %+v (want ok, 3 entries, one skipped per reason)", s)
	}
	if a, _ := s.Table.Lookup("half.virtual.default.ns.default.ap.dc1.dc.consul"); len(a) != 1 || a[0].String() != "240.0.0.5" {
		t.Fatalf("an entry with one bad address: %v, want its good one", a)
	}
	// A structurally invalid response is rejected by the source (and NACKed).
	if s := (&xdsSource{}).table([]*anypb.Any{noInlineTable(t)}); s.Result != SyncRejected || !strings.Contains(s.Err.Error(), "no inline_dns_table") {
		t.Fatalf("invalid response: %+v", s)
	}
	x := &xdsSource{}
	if s := x.table([]*anypb.Any{vd}); s.Result != SyncOK {
		t.Fatalf("good table: %+v", s)
	}
	if s := x.table([]*anypb.Any{vd}); s.Result != SyncUnchanged {
		t.Fatalf("same table again: %+v", s)
	}
	// The listener withdrawn (a state-of-the-world response without it):
	// an empty table once, then no table.
	if s := x.table([]*anypb.Any{other}); s.Result != SyncOK || s.Table.Len() != 0 {
		t.Fatalf("virtual_dns withdrawn: %+v, want an empty table", s)
	}
	if s := x.table([]*anypb.Any{other}); s.Result != SyncNoTable {
		t.Fatalf("still without virtual_dns: %+v, want no table", s)
	}
}

func FuzzListenerEntries(f *testing.F) {
	vd := listenerAny(f, "virtual_dns", map[string][]string{webKey: {"240.0.0.1"}, "x": {"::1"}})
	b, _ := proto.Marshal(vd)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		a := &anypb.Any{TypeUrl: listenerTypeURL, Value: data}
		entries, _, err := ListenerEntries([]*anypb.Any{a})
		if err == nil {
			_, _ = table.Build(entries) // must not panic
		}
	})
}

// TestEnvoyBackoffWindow: a failure opens a fixed window; a later failure
// may push its end later, an earlier one never pulls it in, and repeated
// failures do not make it grow.
func TestEnvoyBackoffWindow(t *testing.T) {
	e := &Envoy{backoff: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	e.fail(t0, context.DeadlineExceeded)
	if got := time.Unix(0, e.until.Load()); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("window ends %v, want t0+5s", got)
	}
	e.fail(t0.Add(-time.Second), context.DeadlineExceeded) // a slow query's late report
	if got := time.Unix(0, e.until.Load()); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("shortened to %v", got)
	}
	e.fail(t0.Add(2*time.Second), context.DeadlineExceeded)
	if got := time.Unix(0, e.until.Load()); !got.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("window ends %v, want t0+7s (extended, the same 5s length)", got)
	}
	for i := 0; i < 10; i++ {
		e.fail(t0.Add(2*time.Second), context.DeadlineExceeded)
	}
	if got := time.Unix(0, e.until.Load()); !got.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("repeated failures grew the window to %v", got)
	}
	if !e.failing.Load() {
		t.Fatal("not failing")
	}
	e.ok()
	if e.failing.Load() {
		t.Fatal("still failing after an answer")
	}
}

// TestEnvoyAddressResolvedOnce: a hostname in `source envoy ADDRESS` is
// resolved when the Corefile is read, so that no query waits on a lookup.
func TestEnvoyAddressResolvedOnce(t *testing.T) {
	v, err := parse(caddy.NewTestController("dns", `virtualconsul {
		source envoy localhost:8653
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if a := v.remote.address; a != "127.0.0.1:8653" && a != "[::1]:8653" {
		t.Fatalf("listener address %q, want localhost resolved", a)
	}
}
