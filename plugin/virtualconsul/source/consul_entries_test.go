package source

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// catalogJSON is a read of one service as Consul v1.16.3 answers
// /v1/catalog/service/NAME, one element per instance kind it holds.
const catalogJSON = `[
 {"Datacenter": "DC9", "ServiceName": "web-sidecar-proxy", "ServiceKind": "connect-proxy",
  "ServiceProxy": {"DestinationServiceName": "Web"},
  "ServiceTaggedAddresses": {"consul-virtual": {"Address": "240.0.0.1", "Port": 20000}}},
 {"Datacenter": "DC2", "Namespace": "team", "Partition": "part", "ServiceName": "api-sidecar-proxy",
  "ServiceKind": "connect-proxy", "ServiceProxy": {"DestinationServiceName": "api"},
  "ServiceTaggedAddresses": {"consul-virtual": {"Address": "240.0.0.2"}}},
 {"Datacenter": "dc9", "ServiceName": "native", "ServiceConnect": {"Native": true},
  "ServiceTaggedAddresses": {"consul-virtual": {"Address": "240.0.0.3", "Port": 9090}}},
 {"Datacenter": "dc9", "ServiceName": "gw", "ServiceKind": "terminating-gateway",
  "ServiceTaggedAddresses": {"consul-virtual:ext": {"Address": "240.0.0.4"}, "consul-virtual:team/ext2": {"Address": "240.0.0.5"},
   "consul-virtual:bad.name": {"Address": "240.0.0.6"}, "lan": {"Address": "10.0.0.1"}}},
 {"Datacenter": "dc9", "ServiceName": "plain", "ServiceTaggedAddresses": {"consul-virtual": {"Address": "240.0.0.9"}}},
 {"Datacenter": "dc9", "ServiceName": "mesh", "ServiceKind": "mesh-gateway",
  "ServiceTaggedAddresses": {"consul-virtual": {"Address": "240.0.0.10"}}}
]`

func decodeCatalog(t testing.TB, data string) []*catalogEntry {
	var svcs []*catalogEntry
	if err := json.Unmarshal([]byte(data), &svcs); err != nil {
		t.Fatal(err)
	}
	return svcs
}

func names(es []table.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name+"="+strings.Join(e.Addresses, ","))
	}
	slices.Sort(out)
	return out
}

// TestConsulEntries: every kind of catalog entry that carries a VIP in
// Consul v1.16.3 gives its entry (a sidecar its destination's, a
// Connect-native service its own, a terminating gateway those of its
// linked services); a typical service and a mesh gateway give none, nor
// does a name DNS cannot ask for.
func TestConsulEntries(t *testing.T) {
	p := (&consulSource{}).entries(decodeCatalog(t, catalogJSON))
	want := []string{
		"api.virtual.team.ns.part.ap.dc2.dc.consul=240.0.0.2",
		"ext.virtual.default.ns.default.ap.dc9.dc.consul=240.0.0.4",
		"ext2.virtual.default.ns.default.ap.dc9.dc.consul=240.0.0.5",
		"native.virtual.default.ns.default.ap.dc9.dc.consul=240.0.0.3",
		"web.virtual.default.ns.default.ap.dc9.dc.consul=240.0.0.1",
	}
	if got := names(p.entries); !slices.Equal(got, want) {
		t.Fatalf("entries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Checked when they vanish (their VIP may outlive the carrier): the
	// gateway's and the Connect-native's, not those of proxies that front
	// no instance of their destination.
	slices.Sort(p.watch)
	if want := []string{"ext.virtual.default.ns.default.ap.dc9.dc.consul", "ext2.virtual.default.ns.default.ap.dc9.dc.consul",
		"native.virtual.default.ns.default.ap.dc9.dc.consul"}; !slices.Equal(p.watch, want) {
		t.Fatalf("watch %v, want %v", p.watch, want)
	}
	if p.pending || !p.gateway || p.dc != "dc9" {
		t.Fatalf("pending %v gateway %v dc %q, want false true dc9", p.pending, p.gateway, p.dc)
	}
	up := (&consulSource{upstreams: map[string]bool{"api": true, "ext": true}}).entries(decodeCatalog(t, catalogJSON))
	if got := names(up.entries); len(got) != 2 || !strings.HasPrefix(got[0], "api.") || !strings.HasPrefix(got[1], "ext.") {
		t.Fatalf("upstreams api ext: %v", got)
	}
}

// TestConsulEntriesInstances: two instances of a sidecar carrying the same
// VIP give one entry (a service read again after a second instance
// registered gives the table it gave before: no rebuild); two VIPs give two
// (ambiguous).
func TestConsulEntriesInstances(t *testing.T) {
	inst := func(vip string) string {
		return `{"Datacenter": "dc1", "ServiceName": "web-sidecar-proxy", "ServiceKind": "connect-proxy",
		 "ServiceProxy": {"DestinationServiceName": "web", "DestinationServiceID": "web-1"},
		 "ServiceTaggedAddresses": {"consul-virtual": {"Address": "` + vip + `"}}}`
	}
	p := (&consulSource{}).entries(decodeCatalog(t, "["+inst("240.0.0.1")+","+inst("240.0.0.1")+"]"))
	if got := names(p.entries); len(got) != 1 || len(p.watch) != 1 {
		t.Fatalf("two instances, one VIP: entries %v watch %v, want one of each", got, p.watch)
	}
	p = (&consulSource{}).entries(decodeCatalog(t, "["+inst("240.0.0.1")+","+inst("240.0.0.2")+"]"))
	if got := names(p.entries); len(got) != 2 {
		t.Fatalf("two instances, two VIPs: entries %v, want two", got)
	}
}

// TestConsulEntriesPending: a sidecar or a Connect-native service without
// its VIP is pending, and so is a listed service whose read is empty (a
// stale read during a deregistration and registration must be read again,
// never cached as "no entries"); a gateway without linked services is not.
func TestConsulEntriesPending(t *testing.T) {
	for _, tc := range []struct {
		data    string
		pending bool
	}{
		{`[]`, true},
		{`[{"ServiceKind": "connect-proxy", "ServiceProxy": {"DestinationServiceName": "web"}}]`, true},
		{`[{"ServiceName": "n", "ServiceConnect": {"Native": true}}]`, true},
		{`[{"ServiceName": "gw", "ServiceKind": "terminating-gateway"}]`, false},
		{`[{"ServiceName": "plain"}]`, false},
	} {
		if p := (&consulSource{}).entries(decodeCatalog(t, tc.data)); p.pending != tc.pending {
			t.Errorf("%s: pending %v, want %v", tc.data, p.pending, tc.pending)
		}
	}
}

func FuzzConsulEntries(f *testing.F) {
	f.Add([]byte(catalogJSON))
	f.Add([]byte(`[{"Namespace":"a.b","ServiceKind":"connect-proxy","ServiceTaggedAddresses":{"consul-virtual":{"Address":"x"}},"ServiceProxy":{"DestinationServiceName":"w..b"}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var svcs []*catalogEntry
		if json.Unmarshal(data, &svcs) != nil {
			return
		}
		_, _ = table.Build((&consulSource{}).entries(svcs).entries) // an invalid entry is an error, never a panic
	})
}

func TestConsulFilter(t *testing.T) {
	if f := (&consulSource{}).filter(); f != `ServiceKind == "connect-proxy" or ServiceKind == "terminating-gateway" or ServiceConnect.Native == true` {
		t.Errorf("filter = %s", f)
	}
	s := &consulSource{upstreams: map[string]bool{"web": true, "api": true}}
	want := `(ServiceKind == "connect-proxy" and (ServiceProxy.DestinationServiceName matches "(?i)^api$" or ServiceProxy.DestinationServiceName matches "(?i)^web$"))` +
		` or (ServiceConnect.Native == true and (ServiceName matches "(?i)^api$" or ServiceName matches "(?i)^web$"))` +
		` or ServiceKind == "terminating-gateway"`
	if f := s.filter(); f != want {
		t.Errorf("filter = %s", f)
	}
}
