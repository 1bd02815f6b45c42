package test

import (
	"strings"
	"testing"
)

// TestHelmValuesReplication (issue 31, item 1): the stream's credential
// and TLS in both releases. By default the cluster release makes the
// token Secret (a ServiceAccount token Secret) and the NetworkPolicy; a
// given Secret replaces it; TLS values turn both Corefiles' lines and
// mounts on.
func TestHelmValuesReplication(t *testing.T) {
	const (
		secret = "Secret kube-system/meshdns-replication"
		sa     = "ServiceAccount kube-system/meshdns-replication"
		policy = "NetworkPolicy kube-system/meshdns"
	)
	objs := mustRender(t)
	wantField(t, objs, secret, "type", "kubernetes.io/service-account-token")
	wantField(t, objs, secret, "metadata.annotations", "{kubernetes.io/service-account.name: meshdns-replication}")
	wantField(t, objs, sa, "automountServiceAccountToken", "false")
	wantField(t, objs, policy, "spec.ingress.1.ports", "[{port: 9155, protocol: TCP}]")

	tlsValues := `
replication:
  secretName: my-token
  tls: {secretName: repl-tls, serverName: meshdns.kube-system.svc, clientCertificates: true}
  networkPolicy: {from: [{ipBlock: {cidr: 10.250.0.0/16}}]}
`
	objs = renderWith(t, tlsValues)
	for _, k := range []string{secret, sa} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered with replication.secretName given", k)
		}
	}
	wantField(t, objs, policy, "spec.ingress.1.from", "[{ipBlock: {cidr: 10.250.0.0/16}}]")
	spec := "spec.template.spec."
	wantField(t, objs, helmDeployment, spec+"volumes.2.secret.secretName", "my-token")
	wantField(t, objs, helmDeployment, spec+"volumes.3.secret", "{secretName: repl-tls, items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}, {key: ca.crt, path: ca.crt}]}")
	corefile, _ := field(objs[helmConfigMap], "data.Corefile").(string)
	const dir = "/var/run/secrets/meshdns-replication-tls/"
	if want := "replicate :9155 {\n            token_file /var/run/secrets/meshdns-replication/token\n            tls " + dir + "tls.crt " + dir + "tls.key " + dir + "ca.crt\n        }\n"; !strings.Contains(corefile, want) {
		t.Errorf("the cluster Corefile has no %q:\n%s", want, corefile)
	}

	objs = renderWith(t, tlsValues+"mode: node-local\n")
	wantField(t, objs, helmNodeLocalDS, spec+"volumes.2.secret.secretName", "my-token")
	corefile, _ = field(objs[helmNodeLocalCM], "data.Corefile").(string)
	if want := "source replica https://" + nodeLocalUpstreamVar + ":9155 {\n            token_file /var/run/secrets/meshdns-replication/token\n            tls " + dir + "tls.crt " + dir + "tls.key " + dir + "ca.crt\n            tls_servername meshdns.kube-system.svc\n        }\n"; !strings.Contains(corefile, want) {
		t.Errorf("the node-local Corefile has no %q:\n%s", want, corefile)
	}
}
