package test

// Credentials of the one-node cluster: a CA, the API server's serving
// certificate (SANs: the node address, the kubernetes Service IP, the
// Service's names), the service-account signing key, and one bearer token
// per component, each with the identity Kubernetes' bootstrap RBAC policy
// expects (system:node:<node> in system:nodes, system:kube-proxy,
// system:kube-controller-manager, system:kube-scheduler) so that the API
// server runs with --authorization-mode=Node,RBAC and the shipped ClusterRole
// is what lets meshdns read the API.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// nodePKI holds the paths of the cluster's credentials.
type nodePKI struct {
	dir             string
	caCert          string
	apiCert, apiKey string
	saKey, saPub    string
	tokens          string            // the API server's token file
	kubeconfig      map[string]string // component → kubeconfig path ("admin", "kubelet", …)
	adminToken      string
	caPEM           []byte
	serverURL       string
}

// nodeIdentities are the users (and groups) of the components' tokens.
var nodeIdentities = map[string][2]string{
	"admin":                   {"admin", "system:masters"},
	"kubelet":                 {"system:node:" + nodeName, "system:nodes"},
	"kube-proxy":              {"system:kube-proxy", ""},
	"kube-controller-manager": {"system:kube-controller-manager", ""},
	"kube-scheduler":          {"system:kube-scheduler", ""},
}

// writeNodePKI creates every credential under dir.
func writeNodePKI(dir, server string) (*nodePKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &nodePKI{dir: dir, serverURL: server, kubeconfig: map[string]string{},
		caCert: filepath.Join(dir, "ca.crt"), apiCert: filepath.Join(dir, "apiserver.crt"), apiKey: filepath.Join(dir, "apiserver.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"), tokens: filepath.Join(dir, "tokens.csv")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshdns-node-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caCert, p.caPEM, 0o644); err != nil {
		return nil, err
	}
	caParsed, _ := x509.ParseCertificate(caDER)
	if err := p.writeServing(caParsed, caKey, now); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKeyPair(p.saKey, p.saPub, saKey); err != nil {
		return nil, err
	}
	return p, p.writeTokens()
}

// writeServing writes the API server's certificate and key.
func (p *nodePKI) writeServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(nodeIP), net.ParseIP(apiServiceIP), net.ParseIP("127.0.0.1")},
		DNSNames:    []string{nodeName, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.apiCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKeyPair(p.apiKey, "", key)
}

// writeKeyPair writes key (PEM, EC) and, when pubPath is set, its public key.
func writeKeyPair(keyPath, pubPath string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	if pubPath == "" {
		return nil
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// writeTokens writes the token file and one kubeconfig per component.
func (p *nodePKI) writeTokens() error {
	var csv strings.Builder
	for comp, id := range nodeIdentities {
		tok, err := randomToken()
		if err != nil {
			return err
		}
		groups := ""
		if id[1] != "" {
			groups = `,"` + id[1] + `"`
		}
		fmt.Fprintf(&csv, "%s,%s,%s%s\n", tok, id[0], id[0], groups)
		if comp == "admin" {
			p.adminToken = tok
		}
		path := filepath.Join(p.dir, comp+".kubeconfig")
		if err := os.WriteFile(path, []byte(p.kubeconfigText(tok)), 0o600); err != nil {
			return err
		}
		p.kubeconfig[comp] = path
	}
	return os.WriteFile(p.tokens, []byte(csv.String()), 0o600)
}

// kubeconfigText is a kubeconfig for token that verifies the server with
// the cluster's CA.
func (p *nodePKI) kubeconfigText(token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: u
  user:
    token: %s
contexts:
- name: node
  context: {cluster: node, user: u}
current-context: node
`, p.serverURL, p.caCert, token)
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
