package test

// The chart's servers value: the Corefile it renders (zones, ports, extra
// plugins, their blocks) and the ports and probes that follow from it. A
// rendered Corefile is also started with the real binary and asked.

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// helmServers is a servers value with two blocks: a zone on its own port
// with an extra plugin (hosts, with a block), and the cluster block with
// other health/ready/metrics addresses and endpointsvc's replicate.
const helmServers = `
servers:
- zones: [{zone: example.org}, {zone: example.net, scheme: "dns://"}]
  port: 1053
  plugins:
  - name: errors
  - name: hosts
    configBlock: |-
      10.1.2.3 a.example.org
      fallthrough
  - name: whoami
- zones: [{zone: .}]
  port: 53
  plugins:
  - name: health
    parameters: :8086
  - name: ready
    parameters: 0.0.0.0:8186
  - name: prometheus
    parameters: "[::]:9253"
  - name: endpointsvc
    parameters: cluster.local
    configBlock: |-
      source kubernetes
      schema kubernetes
      replicate 127.0.0.1:9155
  - name: forward
    parameters: . /etc/resolv.conf
extraConfig: |-
  # rendered after the server blocks
`

// helmServersCorefile is the Corefile helmServers renders.
const helmServersCorefile = `example.org:1053 dns://example.net:1053 {
    errors
    hosts {
        10.1.2.3 a.example.org
        fallthrough
    }
    whoami
}
.:53 {
    health :8086
    ready 0.0.0.0:8186
    prometheus [::]:9253
    endpointsvc cluster.local {
        source kubernetes
        schema kubernetes
        replicate 127.0.0.1:9155
    }
    forward . /etc/resolv.conf
}

# rendered after the server blocks
`

func TestHelmValuesServers(t *testing.T) {
	objs := renderWith(t, helmServers)
	corefile, _ := field(objs[helmConfigMap], "data.Corefile").(string)
	if corefile != helmServersCorefile {
		t.Errorf("Corefile:\n%s\nwant:\n%s", corefile, helmServersCorefile)
	}
	wantField(t, objs, helmService, "spec.ports", `
- {name: dns, port: 1053, protocol: UDP, targetPort: 1053}
- {name: dns-tcp, port: 1053, protocol: TCP, targetPort: 1053}
- {name: dns-53, port: 53, protocol: UDP, targetPort: 53}
- {name: dns-tcp-53, port: 53, protocol: TCP, targetPort: 53}
- {name: metrics, port: 9253, protocol: TCP, targetPort: 9253}
- {name: replication, port: 9155, protocol: TCP, targetPort: 9155}`)
	ctr := "spec.template.spec.containers.0."
	wantField(t, objs, helmDeployment, ctr+"ports", `
- {name: dns, containerPort: 1053, protocol: UDP}
- {name: dns-tcp, containerPort: 1053, protocol: TCP}
- {name: dns-53, containerPort: 53, protocol: UDP}
- {name: dns-tcp-53, containerPort: 53, protocol: TCP}
- {name: metrics, containerPort: 9253, protocol: TCP}
- {name: replication, containerPort: 9155, protocol: TCP}`)
	wantField(t, objs, helmDeployment, ctr+"readinessProbe.httpGet.port", "8186")
	wantField(t, objs, helmDeployment, ctr+"livenessProbe.httpGet.port", "8086")
}

// TestHelmValuesServersServe starts the real binary with the first server
// block the chart renders (the second needs an API server) and asks it.
func TestHelmValuesServersServe(t *testing.T) {
	objs := renderWith(t, helmServers)
	corefile, _ := field(objs[helmConfigMap], "data.Corefile").(string)
	block, _, ok := strings.Cut(corefile, "\n.:53 {")
	if !ok {
		t.Fatalf("no first server block in:\n%s", corefile)
	}
	s := Start(t, block+"\n", Options{WaitDNS: true})
	addr := s.Addr(1053)
	if got := Rdata(Query(t, addr, "a.example.org.", dns.TypeA, "udp")); strings.Join(got, " ") != "10.1.2.3" {
		t.Errorf("A a.example.org from the rendered hosts block: %v", got)
	}
	m := Query(t, addr, "b.example.net.", dns.TypeA, "tcp")
	if len(m.Extra) == 0 {
		t.Errorf("whoami of the rendered block did not answer b.example.net: %v", m)
	}
}

// TestHelmValuesServersDefaultPort: a server without a port or zones is
// ".", served on 53.
func TestHelmValuesServersDefaultPort(t *testing.T) {
	objs := renderWith(t, "servers: [{plugins: [{name: whoami}]}]\n")
	corefile, _ := field(objs[helmConfigMap], "data.Corefile").(string)
	if corefile != ". {\n    whoami\n}\n" {
		t.Errorf("Corefile %q", corefile)
	}
	wantField(t, objs, helmService, "spec.ports", `
- {name: dns, port: 53, protocol: UDP, targetPort: 53}
- {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}`)
	// no ready and health plugins: the probes keep CoreDNS's own ports
	wantField(t, objs, helmDeployment, "spec.template.spec.containers.0.readinessProbe.httpGet.port", "8181")
	// a probe with no keys of its own is its httpGet alone
	objs = mustRender(t, "--set", "readinessProbe.periodSeconds=null,livenessProbe.enabled=false")
	wantField(t, objs, helmDeployment, "spec.template.spec.containers.0.readinessProbe", "{httpGet: {path: /ready, port: 8181, scheme: HTTP}}")
	wantField(t, objs, helmDeployment, "spec.template.spec.containers.0.livenessProbe", "null")
}
