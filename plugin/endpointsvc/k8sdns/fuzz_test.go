package k8sdns_test

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	"github.com/miekg/dns"
)

// FuzzServe asks a generated cluster's table any name of any type in the
// zones of kubeadm's stanza (the kubernetes query path: name parsing and
// answers): no panic, and whatever is answered packs.
func FuzzServe(f *testing.F) {
	c := clustergen.Generate(1, clustergen.Small())
	for i, q := range clustergen.Questions(c, clustergen.Small(), rand.New(rand.NewSource(1))) {
		if i%40 == 0 {
			f.Add(q.Name, q.Type)
		}
	}
	f.Add("a.b.c.d.e.f.svc.cluster.local.", dns.TypeSRV)
	f.Add("_._.x.y.svc.cluster.local.", dns.TypeA)
	s := &k8sdns.Server{Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}, TTL: 30, PodsInsecure: true}
	tbl := k8sdns.Build(model(c))
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		if _, ok := dns.IsDomainName(name); !ok {
			return
		}
		name = dns.Fqdn(name)
		m := new(dns.Msg).SetQuestion(name, qtype)
		state := request.Request{W: &test.ResponseWriter{}, Req: m}
		zi := -1
		for i, z := range s.Zones {
			if dns.IsSubDomain(z, state.Name()) && (zi < 0 || len(z) > len(s.Zones[zi])) {
				zi = i
			}
		}
		if zi < 0 {
			return
		}
		rp := s.Serve(context.Background(), state, zi, tbl, 1)
		r := new(dns.Msg).SetReply(m)
		r.Answer, r.Extra = rp.Answer, rp.Extra
		if _, err := r.Pack(); err != nil {
			t.Fatalf("%s %s: the reply does not pack: %v\n%s", name, dns.TypeToString[qtype], err, r)
		}
	})
}

// FuzzDecodeSnapshot: a snapshot in any form (this package's, or an older
// meshdns's state document or compact form) is rejected whole, or decodes
// to a cluster that builds a table, whose own snapshot decodes again to
// the same table.
func FuzzDecodeSnapshot(f *testing.F) {
	var b bytes.Buffer
	cfg := clustergen.Config{Namespaces: 2, Services: 3, MaxSlices: 2, MaxEndpoints: 2, DualStack: true}
	if err := model(clustergen.Generate(2, cfg)).Snapshot(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	legacy, _ := os.ReadFile("testdata/spec-state.json")
	f.Add(legacy)
	f.Add([]byte(`{"format":"meshdns-state-compact/1","nodes":[],"services":[{"service":{"id":"s","name":"a","namespace":"node","status":"active","headless":true},"groups":[{"desired":"running","actual":"healthy","tasks":[["","10.0.0.1","h"]]}]}]}`))
	f.Add([]byte(`{"format":"meshdns-k8sdns/1","namespaces":["a"],"services":[],"slices":[{"namespace":"a","name":"x","service":"s","type":"IPv6","addresses":[["fd00::1","fd00::2"]],"conditions":["y-n"]}]}`))
	f.Add([]byte(`{"format":"meshdns-k8sdns/1","namespaces":["a"],"services":[],"slices":[],"pods":{"a":["10.0.0.1","::ffff:10.0.0.2","10.0.0.1"],"b":["fd00::1"]}}`))
	b.Reset()
	cfg.Pods = 6
	if err := model(clustergen.Generate(3, cfg)).Snapshot(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := k8sdns.DecodeSnapshot(b)
		if err != nil {
			return
		}
		want := k8sdns.Build(c).Describe()
		var out bytes.Buffer
		if err := c.Snapshot(&out); err != nil {
			t.Fatal(err)
		}
		back, err := k8sdns.DecodeSnapshot(out.Bytes())
		if err != nil {
			t.Fatalf("the snapshot of a valid cluster is invalid: %v\n%s", err, out.String())
		}
		if got := k8sdns.Build(back).Describe(); got != want {
			t.Fatalf("the round trip changed the table:\n%s\nwant:\n%s", got, want)
		}
	})
}
