//go:build tools

// Package tools pins stock CoreDNS v1.15.0 (every stock plugin), built by
// build/peer-tools.sh coredns as the baseline of meshdns's binary figures.
package tools

import _ "github.com/coredns/coredns"
