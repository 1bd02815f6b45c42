//go:build tools

// Package tools pins the Consul agent the end-to-end tests run (v1.16.3, the
// last MPL-2.0 line; later lines are BSL and must not be used).
package tools

import _ "github.com/hashicorp/consul"
