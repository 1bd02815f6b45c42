package clustergen

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestExternalKeepsDraws: a seed's cluster with Config.External is the one
// without but for the Services' external IPs and LoadBalancer status,
// which a share of them has (hostnames among the ingresses, an address
// shared by two Services).
func TestExternalKeepsDraws(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		cfg := Small()
		plain := Generate(seed, cfg)
		cfg.External = true
		ext := Generate(seed, cfg)
		withIPs, hostnames, shared := 0, 0, 0
		owners := map[string]int{}
		for i, s := range ext.Services {
			c := s.DeepCopy()
			if len(c.Spec.ExternalIPs) > 0 || len(c.Status.LoadBalancer.Ingress) > 0 {
				withIPs++
			}
			for _, ip := range c.Spec.ExternalIPs {
				owners[ip]++
			}
			for _, in := range c.Status.LoadBalancer.Ingress {
				if in.Hostname != "" {
					hostnames++
				}
			}
			c.Spec.ExternalIPs, c.Status = nil, corev1.ServiceStatus{}
			if !reflect.DeepEqual(c, plain.Services[i]) {
				t.Fatalf("seed %d: Service %d differs beyond its external addresses", seed, i)
			}
		}
		for _, n := range owners {
			if n > 1 {
				shared++
			}
		}
		if !reflect.DeepEqual(ext.Slices, plain.Slices) || !reflect.DeepEqual(ext.Namespaces, plain.Namespaces) {
			t.Fatalf("seed %d: the slices or namespaces differ", seed)
		}
		if withIPs < len(ext.Services)/4 {
			t.Errorf("seed %d: %d of %d Services with external addresses", seed, withIPs, len(ext.Services))
		}
		t.Logf("seed %d: %d Services with external addresses, %d ingress hostnames, %d shared addresses", seed, withIPs, hostnames, shared)
	}
}
