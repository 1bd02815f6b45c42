package main

import "github.com/coredns/coredns/coremain"

// version is stamped at build time from `git describe` (see build/build.sh).
var version = "dev"

// versionLine is what `meshdns -version` prints after "meshdns-":
// the meshdns version and the CoreDNS version it is built on.
func versionLine() string {
	return version + " (" + coremain.CoreName + "-" + coremain.CoreVersion + ")"
}
