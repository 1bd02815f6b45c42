// Command meshdns is a CoreDNS build carrying the stock CoreDNS plugins
// listed in plugins.cfg (imported by zplugins.go) plus meshdns's own:
// virtualconsul, endpointsvc and mdnsfallback.
package main

//go:generate go run ./build/genplugins

import (
	"flag"
	"os"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	"github.com/meshdns/meshdns/internal/nodelocal"
	_ "github.com/meshdns/meshdns/plugin/endpointsvc"
	_ "github.com/meshdns/meshdns/plugin/mdnsfallback"
	_ "github.com/meshdns/meshdns/plugin/virtualconsul"
)

// ourDirectives are meshdns's own plugins, in the order they run. Each is
// appended here by the issue that makes it work, together with its import.
var ourDirectives = []string{"virtualconsul", "endpointsvc", "mdnsfallback", "inspect"}

// anchorDirective is the stock directive ours follow: everything before it
// (cache, rewrite, acl, …) runs before our plugins, everything after it
// (kubernetes, file, forward, …) after them.
const anchorDirective = "hosts"

func init() {
	dnsserver.Directives = insertAfter(dnsserver.Directives, anchorDirective, ourDirectives...)
	caddy.AppName = "meshdns"
	caddy.AppVersion = versionLine()
	caddy.SetDefaultCaddyfileLoader("meshdns", caddy.LoaderFunc(defaultLoader))
}

// insertAfter returns a copy of list with extra inserted right after anchor.
// It panics (in init, before serving) when anchor is missing or an extra
// directive is already present, since either means a broken build.
func insertAfter(list []string, anchor string, extra ...string) []string {
	at := -1
	for i, d := range list {
		if d == anchor {
			at = i
		}
		for _, e := range extra {
			if d == e {
				panic("meshdns: directive " + e + " is already registered")
			}
		}
	}
	if at < 0 {
		panic("meshdns: anchor directive " + anchor + " not found")
	}
	out := make([]string, 0, len(list)+len(extra))
	out = append(out, list[:at+1]...)
	out = append(out, extra...)
	return append(out, list[at+1:]...)
}

// nodeLocalSetup is -node-local-setup: prepare the node for the node-local
// resolver (internal/nodelocal, deploy/node-local) and exit instead of
// serving.
var nodeLocalSetup = flag.String("node-local-setup", "",
	"add these addresses (comma-separated) to lo with the node-local conntrack bypass, then exit")

func main() {
	flag.Parse() // coremain.Run parses the same flags again
	if *nodeLocalSetup != "" {
		os.Exit(nodelocal.Main(*nodeLocalSetup, os.Stdout, os.Stderr))
	}
	coremain.Run()
}
