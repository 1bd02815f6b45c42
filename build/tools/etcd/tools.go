//go:build tools

// Package tools pins etcd v3.6.4 (the version kube-apiserver v1.34 is
// tested with), built by build/peer-tools.sh for the end-to-end tests and
// benchmarks. Debian's etcd 3.4 lacks the RequestWatchProgress storage
// feature, so kube-apiserver refuses client-go's streaming lists on it.
package tools

import _ "go.etcd.io/etcd/server/v3"
