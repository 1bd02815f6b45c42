package test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testpki"
)

// TestReplicaPrivate (issue 31, item 1): a real meshdns leader
// (corefile/cluster.Corefile with `replicate { token_file; tls }`, its
// table from the example's state file through `source file`: a leader
// serving only a snapshot turns followers away until its source answers) answers a stream request without the token with
// 401 and no byte of the table, and streams with it; a real follower (the
// shipped node-local Corefile, https:// and the CA) answers from the
// stream; a follower that trusts another CA fails, and its log says why.
func TestReplicaPrivate(t *testing.T) {
	dir := t.TempDir()
	CopyDir(t, filepath.Join(repoRoot, "corefile"), dir)
	pki := testpki.Write(t, dir)
	b, err := os.ReadFile(filepath.Join(repoRoot, "corefile", "cluster.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "schema kubernetes\n"
	cf := strings.Replace(string(b), anchor, anchor+"        replicate 127.0.0.1:9155 {\n            token_file token\n            tls server.pem server-key.pem\n        }\n", 1)
	for old, repl := range map[string]string{
		"source kubernetes data/cluster.kubeconfig\n":   "source file data/cluster.snapshot.json\n",
		"        snapshot data/cluster.snapshot.json\n": "",
	} {
		if !strings.Contains(cf, old) {
			t.Fatalf("corefile/cluster.Corefile has no %q", old)
		}
		cf = strings.Replace(cf, old, repl, 1)
	}
	leader := Start(t, cf, Options{Dir: dir, Files: replicaTokenFiles})
	base := "https://" + leader.Addr(9155) + "/v1/replicate"

	roots := x509.NewCertPool()
	ca, _ := os.ReadFile(pki.CA)
	roots.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	for _, auth := range []string{"", "Bearer wrong", replicaToken} {
		req, _ := http.NewRequest(http.MethodGet, base, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "shop") || strings.Contains(string(body), `"namespace"`) {
			t.Errorf("Authorization %q: %s %q, want 401 and no table", auth, resp.Status, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, base+"?v=2", nil)
	req.Header.Set("Authorization", "Bearer "+replicaToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	var got []string
	for len(got) < 50 {
		l, err := br.ReadString('\n')
		if err != nil {
			break
		}
		got = append(got, l)
		if strings.Contains(l, `"synced":true`) {
			break
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(got) == 0 || !strings.HasPrefix(got[0], `{"epoch":`) || !strings.Contains(strings.Join(got, ""), `"name":"web"`) {
		t.Errorf("with the token: %s, lines %q", resp.Status, got)
	}

	follow := func(caPEM []byte) *Server {
		_, port, _ := net.SplitHostPort(leader.Addr(9155))
		p, _ := strconv.Atoi(port)
		fcf := replicaFollowerCorefile(t, "https://"+leader.Addr(9155))
		fcf = strings.Replace(fcf, "token_file token\n", "token_file token\n            tls ca.pem\n", 1)
		if !strings.Contains(fcf, "tls ca.pem") {
			t.Fatalf("no token_file line in the follower's Corefile:\n%s", fcf)
		}
		files := map[string]string{"token": replicaToken + "\n", "ca.pem": string(caPEM)}
		return Start(t, fcf, Options{Ports: map[int]int{p: p}, Files: files, WaitDNS: true})
	}
	good := follow(ca)
	within(t, 5*time.Second, good.DNS(), "web.shop.svc.cluster.local", dns.TypeA, "10.96.0.20")

	other := testpki.Write(t, t.TempDir())
	otherCA, _ := os.ReadFile(other.CA)
	bad := follow(otherCA)
	Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(bad.Log(), "the leader's certificate is not signed by the CA in") {
			return "the follower with another CA logs no clear error:\n" + bad.Log()
		}
		return ""
	})
	if r, err := TryQuery(bad.DNS(), "web.shop.svc.cluster.local", dns.TypeA, "udp"); err == nil && len(r.Answer) > 0 {
		t.Errorf("the follower with another CA answers %v", r.Answer)
	}
}
