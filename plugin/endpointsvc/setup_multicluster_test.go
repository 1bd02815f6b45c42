package endpointsvc

import (
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
)

// TestParseMulticluster: `multicluster [ZONES...]` as the kubernetes
// plugin reads it - the zones it names must be the block's (the stock
// error), none named is none, schema kubernetes only - and the source
// then watches ServiceImports.
func TestParseMulticluster(t *testing.T) {
	for _, tc := range []struct {
		in   string
		keys []string
		mc   []bool // the Server's Multicluster
		err  string
	}{
		{in: "endpointsvc cluster.local clusterset.local in-addr.arpa {\n multicluster clusterset.local\n}", mc: []bool{false, true, false}},
		{in: "endpointsvc cluster.local ClusterSet.Local. {\n source kubernetes\n schema kubernetes\n multicluster clusterset.local.\n}", mc: []bool{false, true}},
		{in: "endpointsvc {\n multicluster clusterset.local\n}", keys: []string{"cluster.local:53", "clusterset.local:53"}, mc: []bool{false, true}},
		{in: "endpointsvc cluster.local clusterset.local {\n multicluster\n}"},
		{in: "endpointsvc cluster.local {\n multicluster clusterset.local\n}", err: "Testfile:2 - Error during parsing: is not authoritative for the multicluster zone clusterset.local. (authoritative zones: [cluster.local.])"},
		{in: "endpointsvc {\n source kubernetes\n multicluster clusterset.local\n}", err: "multicluster needs 'schema kubernetes'"},
	} {
		c := caddy.NewTestController("dns", tc.in)
		c.ServerBlockKeys = tc.keys
		e, err := parse(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		d := e.schema.(*dnsSchema)
		if !slices.Equal(d.srv.Multicluster, tc.mc) {
			t.Errorf("%q: multicluster zones %v of %v, want %v", tc.in, d.srv.Multicluster, e.Zones, tc.mc)
		}
		if k := e.source.(*kubesource.Source).Config(); k.Multicluster != (tc.mc != nil) {
			t.Errorf("%q: the source watches ServiceImports: %v", tc.in, k.Multicluster)
		}
	}
}
