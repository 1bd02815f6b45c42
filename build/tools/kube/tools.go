//go:build tools

// Package tools pins the Kubernetes components the end-to-end tests run:
// kube-apiserver for the API-server tests, and the rest of a one-node
// cluster (kubelet, kube-proxy, kube-controller-manager, kube-scheduler,
// kubectl) for the cluster tests.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
