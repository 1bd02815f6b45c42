//go:build tools

// Package tools pins the kube-apiserver the end-to-end tests run.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
