package table

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const (
	webKey = "web.virtual.default.ns.default.ap.dc1.dc.consul"
	apiKey = "api.virtual.default.ns.default.ap.dc1.dc.consul"
)

func addrs(t *testing.T, tbl *Table, name string) []string {
	t.Helper()
	a, ok := tbl.Lookup(name)
	if !ok {
		return nil
	}
	var out []string
	for _, x := range a {
		out = append(out, x.String())
	}
	sort.Strings(out)
	return out
}

func TestBuild(t *testing.T) {
	tbl, err := Build([]Entry{
		{Name: webKey, Addresses: []string{"240.0.0.1"}},
		{Name: "API.virtual.default.ns.default.ap.dc1.dc.consul.", Addresses: []string{"fd00::1"}},
		{Name: "db.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.3", "240.0.0.3"}},
		{Name: "db.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.3"}},
		{Name: "amb.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.4"}},
		{Name: "amb.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.5"}},
		{Name: "mapped.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"::ffff:240.0.0.6"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Len() != 5 {
		t.Fatalf("Len = %d, want 5", tbl.Len())
	}
	for name, want := range map[string][]string{
		webKey: {"240.0.0.1"},
		apiKey: {"fd00::1"},
		"db.virtual.default.ns.default.ap.dc1.dc.consul":     {"240.0.0.3"},
		"amb.virtual.default.ns.default.ap.dc1.dc.consul":    {"240.0.0.4", "240.0.0.5"},
		"mapped.virtual.default.ns.default.ap.dc1.dc.consul": {"240.0.0.6"},
		"nope.virtual.default.ns.default.ap.dc1.dc.consul":   nil,
	} {
		if got := addrs(t, tbl, name); !reflect.DeepEqual(got, want) {
			t.Errorf("Lookup(%q) = %v, want %v", name, got, want)
		}
	}
	if v := tbl.vips[tbl.index["mapped.virtual.default.ns.default.ap.dc1.dc.consul"]]; v.fam != Fam4 {
		t.Errorf("an IPv4-mapped VIP is family %d, want 4", v.fam)
	}
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		e   Entry
		err string
	}{
		{Entry{Name: "web.virtual.consul", Addresses: []string{"240.0.0.1"}}, `entry 2 ("web.virtual.consul"): not a full-form virtual name`},
		{Entry{Name: "web.virtual.default.ns.default.ap.dc1.dc.example", Addresses: []string{"240.0.0.1"}}, "not under consul."},
		{Entry{Name: webKey}, `entry 2 ("` + webKey + `"): no address`},
		{Entry{Name: webKey, Addresses: []string{"240.0.0.300"}}, `bad address "240.0.0.300"`},
		{Entry{Name: webKey, Addresses: []string{"fe80::1%eth0"}}, `bad address "fe80::1%eth0"`},
		{Entry{Name: webKey, Addresses: []string{"0.0.0.0"}}, `bad address "0.0.0.0"`},
		{Entry{Name: webKey, Addresses: []string{"::"}}, `bad address "::"`},
		{Entry{Name: webKey, Addresses: []string{"240.0.0.1", ""}}, `bad address ""`},
	}
	for _, tc := range tests {
		_, err := Build([]Entry{{Name: apiKey, Addresses: []string{"240.0.0.2"}}, tc.e})
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Build(%+v) error = %v, want %q", tc.e, err, tc.err)
		}
	}
}

func decode(s string) (*Table, error) {
	b := NewBuilder(0)
	if err := Decode(strings.NewReader(s), b); err != nil {
		return nil, err
	}
	return b.Table(), nil
}

const configDump = `{
 "configs": [
  {"@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump", "bootstrap": {"node": {"id": "web-sidecar"}}},
  {"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
   "dynamic_listeners": [
    {"name": "public_listener:10.0.0.5:20000", "active_state": {"listener": {"name": "public_listener:10.0.0.5:20000"}}},
    {"name": "virtual_dns:127.0.0.1:8653",
     "active_state": {"version_info": "1", "listener": {
      "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
      "name": "virtual_dns:127.0.0.1:8653",
      "address": {"socket_address": {"protocol": "UDP", "address": "127.0.0.1", "port_value": 8653}},
      "listener_filters": [{"name": "envoy.filters.udp.dns_filter", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.udp.dns_filter.v3.DnsFilterConfig",
        "stat_prefix": "virtual_dns",
        "server_config": {"inline_dns_table": {"virtual_domains": [
          {"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}, "answer_ttl": "5s"},
          {"name": "api.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.2"]}}}
        ]}}}}]}}}
   ]}
 ]}`

func TestDecodeShapes(t *testing.T) {
	want := map[string][]string{webKey: {"240.0.0.1"}, apiKey: {"240.0.0.2"}}
	arr := `[{"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}},
	 {"name": "api.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"addressList": {"address": ["240.0.0.2"]}}}]`
	for name, in := range map[string]string{
		"virtual_domains array": arr,
		"inline_dns_table":      `{"external_retry_count": 1, "virtual_domains": ` + arr + `, "known_suffixes": []}`,
		"camelCase table":       `{"virtualDomains": ` + arr + `}`,
		"config_dump":           configDump,
	} {
		tbl, err := decode(in)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for k, v := range want {
			if got := addrs(t, tbl, k); !reflect.DeepEqual(got, v) {
				t.Errorf("%s: %s = %v, want %v", name, k, got, v)
			}
		}
	}
	if tbl, err := decode(" []\n"); err != nil || tbl.Len() != 0 {
		t.Errorf("empty array: %v, %v", tbl, err)
	}
}

// dumpListener is a virtual_dns listener's JSON whose table maps web to ip.
func dumpListener(ip string) string {
	return `{"name": "virtual_dns:127.0.0.1:8653", "listener_filters": [{"name": "envoy.filters.udp.dns_filter", "typed_config": {
	  "server_config": {"inline_dns_table": {"virtual_domains": [
	    {"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["` + ip + `"]}}}]}}}}]}`
}

// TestDecodeConfigDumpChoice: the table comes from the static virtual_dns
// listener if there is one, else from the active state of the dynamic one,
// never from its warming or draining state, whatever the order of keys;
// configs other than the listeners are skipped.
func TestDecodeConfigDumpChoice(t *testing.T) {
	bigCluster := `{"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump", "dynamic_active_clusters": [` +
		strings.Repeat(`{"cluster": {"name": "c", "load_assignment": {"endpoints": [{"lb_endpoints": [{"endpoint": {}}]}]}}},`, 2000) + `{}]}`
	dynamic := `{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "dynamic_listeners": [
	  {"name": "virtual_dns:127.0.0.1:8653", "warming_state": {"listener": ` + dumpListener("240.0.0.3") + `},
	   "active_state": {"listener": ` + dumpListener("240.0.0.2") + `},
	   "draining_state": {"listener": ` + dumpListener("240.0.0.4") + `}}]}`
	static := `{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "static_listeners": [{"listener": ` + dumpListener("240.0.0.1") + `}]}`
	for name, c := range map[string]struct{ in, want string }{
		"active, not warming or draining": {`{"configs": [` + bigCluster + `, ` + dynamic + `]}`, "240.0.0.2"},
		"static before dynamic":           {`{"configs": [` + dynamic + `, ` + static + `]}`, "240.0.0.1"},
	} {
		for range 20 { // map order must not matter
			tbl, err := decode(c.in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got, _ := tbl.Lookup(webKey); len(got) != 1 || got[0].String() != c.want {
				t.Fatalf("%s: web = %v, want %s", name, got, c.want)
			}
		}
	}
	warmingOnly := `{"configs": [{"dynamic_listeners": [{"name": "virtual_dns:127.0.0.1:8653", "warming_state": {"listener": ` + dumpListener("240.0.0.3") + `}}]}]}`
	if _, err := decode(warmingOnly); err == nil || !strings.Contains(err.Error(), "no static or active listener") {
		t.Fatalf("a warming listener alone: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := map[string]string{
		"":       "empty table",
		"42":     "want a JSON array or object",
		"[":      "virtual_domains",
		"[] []":  "trailing data",
		"{}":     "no virtual_domains array and no config_dump configs",
		`[null]`: `entry 1 (""): name is not under consul.`,
		`[1]`:    "entry 1: json: cannot unmarshal",
		`[{"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}},
		  {"name": "api.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"cluster_name": "api"}}]`: `entry 2 ("api.virtual.default.ns.default.ap.dc1.dc.consul"): no address`,
		`{"virtual_domains": [{"name": "web.virtual.consul", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}}]}`: `entry 1 ("web.virtual.consul"): not a full-form`,
		`{"configs": [{"dynamic_listeners": [{"name": "public_listener"}]}]}`:                                             "no static or active listener named virtual_dns",
		`{"configs": [{"dynamic_listeners": [{"name": "virtual_dns:127.0.0.1:8653"}]}]}`:                                  "no static or active listener named virtual_dns",
		`{"configs": [{"static_listeners": [{"listener": {"name": "virtual_dns"}}]}]}`:                                    "has no inline_dns_table",
		`{"configs": {}}`: "config_dump: want [",
		`{"virtual_domains": [], "virtual_domains": []}`: "given twice",
	}
	for in, want := range tests {
		_, err := decode(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) error = %v, want %q", in, err, want)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	tbl, err := Build([]Entry{
		{Name: webKey, Addresses: []string{"240.0.0.1"}},
		{Name: apiKey, Addresses: []string{"fd00::2"}},
		{Name: "amb.virtual.default.ns.default.ap.dc1.dc.consul", Addresses: []string{"240.0.0.4", "fd00::4"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tbl.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := decode(buf.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if back.Len() != tbl.Len() {
		t.Fatalf("round trip has %d entries, want %d", back.Len(), tbl.Len())
	}
	for k := range tbl.index {
		if a, b := addrs(t, tbl, k), addrs(t, back, k); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: %v after the round trip, want %v", k, b, a)
		}
	}
}

func TestBuildMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("large table")
	}
	b := NewBuilder(1_000_000)
	for i := 0; i < 1_000_000; i++ {
		v := i + 1
		a := netip.AddrFrom4([4]byte{240 + byte(v>>24), byte(v >> 16), byte(v >> 8), byte(v)})
		if err := b.Add(Entry{Name: fmt.Sprintf("svc-%d.virtual.default.ns.default.ap.dc1.dc.consul", i), Addresses: []string{a.String()}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Table().Len(); n != 1_000_000 {
		t.Fatalf("Len = %d", n)
	}
}

// FuzzDecode feeds arbitrary table files to the decoder: it must never
// panic, and a table it accepts must survive a snapshot round trip.
func FuzzDecode(f *testing.F) {
	f.Add(`[{"name": "web.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}}]`)
	f.Add(`{"virtual_domains": [{"name": "a.web.virtual.x.ns.y.ap.z.dc.consul.", "endpoint": {"address_list": {"address": ["fd00::1", "240.0.0.1"]}}}]}`)
	f.Add(configDump)
	f.Add(`{"configs": []}`)
	f.Add(`[null, 1, "x"]`)
	f.Fuzz(func(t *testing.T, in string) {
		tbl, err := decode(in)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := tbl.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := decode(buf.String())
		if err != nil {
			t.Fatalf("snapshot of an accepted table is rejected: %v\n%s", err, buf.String())
		}
		if back.Len() != tbl.Len() {
			t.Fatalf("round trip has %d entries, want %d", back.Len(), tbl.Len())
		}
	})
}

// BenchmarkDecode measures a table file of 100,000 entries (as gen-table
// writes it) from JSON to a Table: the build part of a reload.
func BenchmarkDecode(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString("[")
	for i := 0; i < 100_000; i++ {
		if i > 0 {
			buf.WriteString(",\n")
		}
		v := i + 1
		fmt.Fprintf(&buf, `{"name":"svc-%d.virtual.default.ns.default.ap.dc1.dc.consul","endpoint":{"address_list":{"address":["%d.%d.%d.%d"]}}}`, i, 240+v>>24, v>>16&255, v>>8&255, v&255)
	}
	buf.WriteString("\n]\n")
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		nb := NewBuilder(0)
		if err := Decode(bytes.NewReader(data), nb); err != nil {
			b.Fatal(err)
		}
		if nb.Table().Len() != 100_000 {
			b.Fatal("short table")
		}
	}
}

// TestTableDualAndDatacenter: one IPv4 and one IPv6 VIP are one service
// (a third VIP makes the name ambiguous), and a table's datacenter and its
// dual keys survive the snapshot's round trip.
func TestTableDualAndDatacenter(t *testing.T) {
	b := NewBuilder(0)
	b.SetDatacenter("dc2")
	for _, e := range []Entry{
		{Name: "d.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"fd00::1", "240.0.0.1"}},
		{Name: "x.virtual.default.ns.default.ap.dc2.dc.consul", Addresses: []string{"240.0.0.2", "fd00::2", "fd00::3"}},
	} {
		if err := b.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	tbl := b.Table()
	var buf strings.Builder
	if err := tbl.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	b2 := NewBuilder(0)
	if err := Decode(strings.NewReader(buf.String()), b2); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for _, tb := range []*Table{tbl, b2.Table()} {
		if tb.Datacenter() != "dc2" {
			t.Fatalf("datacenter %q, want dc2", tb.Datacenter())
		}
		i := tb.index["d.virtual.default.ns.default.ap.dc2.dc.consul"]
		if v := tb.vips[i]; v.fam != FamDual || netip.AddrFrom4([4]byte(v.ip[:4])).String() != "240.0.0.1" || net.IP(tb.IPv6Of(i)).String() != "fd00::1" {
			t.Fatalf("dual key: %+v", v)
		}
		if v := tb.vips[tb.index["x.virtual.default.ns.default.ap.dc2.dc.consul"]]; v.fam != FamAmbiguous {
			t.Fatalf("three VIPs: fam %d, want ambiguous", v.fam)
		}
		if a, _ := tb.Lookup("x.virtual.default.ns.default.ap.dc2.dc.consul"); len(a) != 3 {
			t.Fatalf("ambiguous VIPs %v", a)
		}
	}
}
