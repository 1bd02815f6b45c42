package orch

import "testing"

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		qname, zone string
		want        name
	}{
		{"svc.orch.", "svc.orch.", name{kind: kindApex}},
		{"atlas.svc.orch.", "svc.orch.", name{kind: kindService, service: "atlas", namespace: "default"}},
		{"atlas.prod.svc.orch.", "svc.orch.", name{kind: kindService, service: "atlas", namespace: "prod"}},
		{"_http._tcp.atlas.svc.orch.", "svc.orch.", name{kind: kindSRV, service: "atlas", namespace: "default", port: "http", proto: "tcp"}},
		{"_http._tcp.atlas.prod.svc.orch.", "svc.orch.", name{kind: kindSRV, service: "atlas", namespace: "prod", port: "http", proto: "tcp"}},
		{"node-1.node.svc.orch.", "svc.orch.", name{kind: kindNode, node: "node-1"}},
		{"host.example.node.svc.orch.", "svc.orch.", name{kind: kindNode, node: "host.example"}},
		{"node.svc.orch.", "svc.orch.", name{kind: kindService, service: "node", namespace: "default"}},
		{"atlas.", ".", name{kind: kindService, service: "atlas", namespace: "default"}},
		{".", ".", name{kind: kindApex}},
		{"a.b.c.svc.orch.", "svc.orch.", name{}},
		{"_http.atlas.svc.orch.", "svc.orch.", name{}},
		{"_http._tcp.svc.orch.", "svc.orch.", name{}},
		{"_._tcp.atlas.svc.orch.", "svc.orch.", name{}},
		{"_http._tcp._atlas.svc.orch.", "svc.orch.", name{}},
		{"_http._tcp.a.b.c.svc.orch.", "svc.orch.", name{}},
		{"atlas._prod.svc.orch.", "svc.orch.", name{}},
		{"xsvc.orch.", "svc.orch.", name{}},
		{"example.org.", "svc.orch.", name{}},
		{".node.svc.orch.", "svc.orch.", name{}},
		{"a..node.svc.orch.", "svc.orch.", name{}},
		{"a..svc.orch.", "svc.orch.", name{}},
	} {
		if got := parseName(tc.qname, tc.zone, "default"); got != tc.want {
			t.Errorf("parseName(%q, %q) = %+v, want %+v", tc.qname, tc.zone, got, tc.want)
		}
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"svc.orch.", "atlas.svc.orch.", "_http._tcp.atlas.prod.svc.orch.", "n.node.svc.orch.", "..svc.orch.", "_._.svc.orch."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		n := parseName(q, "svc.orch.", "default")
		switch n.kind {
		case kindService, kindSRV:
			if n.service == "" || n.namespace == "" {
				t.Fatalf("%q: empty service or namespace: %+v", q, n)
			}
			if n.kind == kindSRV && (n.port == "" || n.proto == "") {
				t.Fatalf("%q: empty port or proto: %+v", q, n)
			}
		case kindNode:
			if n.node == "" {
				t.Fatalf("%q: empty node: %+v", q, n)
			}
		}
	})
}
