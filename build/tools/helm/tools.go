//go:build tools

// Package tools pins Helm v3.22.0 (cmd/helm), built by build/peer-tools.sh
// helm: the chart tests (test/helm_test.go) lint and render charts/meshdns
// with it and install it on the one-node cluster.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
