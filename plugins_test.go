package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/internal/pluginscfg"
)

// TestPluginsCfg: zplugins.go is what plugins.cfg generates (go generate
// was run after the last edit), every listed plugin is registered, and the
// heavy ones left out are not.
func TestPluginsCfg(t *testing.T) {
	b, err := os.ReadFile("plugins.cfg")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pluginscfg.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := os.ReadFile("zplugins.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gen, pluginscfg.Source(ps)) {
		t.Fatal("zplugins.go is not what plugins.cfg generates: run go generate .")
	}
	for _, p := range ps {
		if p.Name == "on" {
			continue // an event hook, not a directive
		}
		if _, err := caddy.DirectiveAction("dns", p.Name); err != nil {
			t.Errorf("plugin %s listed but not registered: %v", p.Name, err)
		}
	}
	for _, out := range []string{"route53", "azure", "clouddns", "trace", "etcd", "nomad", "dnssec", "erratic"} {
		if _, err := caddy.DirectiveAction("dns", out); err == nil {
			t.Errorf("plugin %s is built in, want it left out", out)
		}
	}
}
