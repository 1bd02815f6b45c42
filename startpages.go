package main

import (
	"os"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/internal/startpages"
)

// After every start and reload, once every plugin's OnStartup has run (the
// Kubernetes informers of endpointsvc and of the stock kubernetes plugin
// have synced or timed out by then), meshdns gives back the executable's
// pages that only start-up used: see internal/startpages.
// MESHDNS_KEEP_STARTUP_PAGES=1 keeps them.
//
// The release runs from an event hook on InstanceStartupEvent. Caddy drops
// every event hook before a SIGUSR1 reload and expects the setup of the new
// instance to register them again, so the hook is (re)registered from a
// parsing callback, which runs on every instance start.
func init() {
	last := dnsserver.Directives[len(dnsserver.Directives)-1]
	caddy.RegisterParsingCallback("dns", last, func(caddy.Context) error {
		registerStartpagesHook()
		return nil
	})
}

const startpagesHook = "meshdns-startpages"

// registerStartpagesHook registers the release hook unless it still is: a
// restart through the reload plugin keeps the hooks, and RegisterEventHook
// panics on a name it already holds.
func registerStartpagesHook() {
	defer func() { _ = recover() }()
	caddy.RegisterEventHook(startpagesHook, releaseStartpages)
}

func releaseStartpages(ev caddy.EventName, _ any) error {
	if ev != caddy.InstanceStartupEvent || os.Getenv(startpages.Env) == "1" {
		return nil
	}
	before, after, err := startpages.Release()
	if err != nil {
		clog.Warningf("meshdns: releasing start-up pages: %v", err)
		return nil
	}
	clog.Infof("meshdns: released start-up pages of the executable: resident file-backed memory %.1f → %.1f MiB (%s=1 keeps them)",
		float64(before)/(1<<20), float64(after)/(1<<20), startpages.Env)
	return nil
}
