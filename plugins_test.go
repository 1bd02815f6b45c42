package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// TestReadmePluginCount: the README's "carries N of stock CoreDNS's M
// plugins (... left out: ...)" is true of plugins.cfg and of the plugin.cfg
// of the CoreDNS module this build compiles against.
func TestReadmePluginCount(t *testing.T) {
	ours := cfgNames(t, "plugins.cfg")
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/coredns/coredns").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/coredns/coredns: %v", err)
	}
	stock := cfgNames(t, filepath.Join(strings.TrimSpace(string(dir)), "plugin.cfg"))
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)carries (\d+) of stock CoreDNS's (\d+) plugins.*?left out: (.*?)\)`).FindSubmatch(readme)
	if m == nil {
		t.Fatal(`README.md lacks "carries N of stock CoreDNS's M plugins (...; left out: ...)"`)
	}
	if got, want := string(m[1]), strconv.Itoa(len(ours)); got != want {
		t.Errorf("README says %s plugins carried, plugins.cfg lists %s", got, want)
	}
	if got, want := string(m[2]), strconv.Itoa(len(stock)); got != want {
		t.Errorf("README says stock CoreDNS has %s plugins, its plugin.cfg lists %s", got, want)
	}
	// every plugin left out is named in the README's list (the cloud
	// backends under one word)
	left := strings.Join(strings.Fields(string(m[3])), " ")
	for name := range stock {
		if ours[name] {
			continue
		}
		if !strings.Contains(left, name) && !(strings.Contains(left, "cloud backends") && cloudBackends[name]) {
			t.Errorf("plugin %s is left out but the README does not say so", name)
		}
	}
}

var cloudBackends = map[string]bool{"route53": true, "azure": true, "clouddns": true}

func cfgNames(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pluginscfg.Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	names := map[string]bool{}
	for _, p := range ps {
		names[p.Name] = true
	}
	return names
}
