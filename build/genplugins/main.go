// Command genplugins writes zplugins.go, the imports of the stock CoreDNS
// plugins listed in plugins.cfg (run by `go generate` in the repository's
// root).
package main

import (
	"fmt"
	"os"

	"github.com/meshdns/meshdns/internal/pluginscfg"
)

func main() {
	b, err := os.ReadFile("plugins.cfg")
	if err != nil {
		fail(err)
	}
	ps, err := pluginscfg.Parse(b)
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile("zplugins.go", pluginscfg.Source(ps), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "genplugins:", err)
	os.Exit(1)
}
