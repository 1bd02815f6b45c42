package test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// replicaLeaderCorefile is the shipped cluster Corefile
// (shippedClusterCorefile) serving the replication stream on 9155, as
// deploy/kubernetes/configmap.yaml does once it says `replicate :9155`.
func replicaLeaderCorefile(t *testing.T, kubeconfig string) string {
	t.Helper()
	cf := shippedClusterCorefile(t, kubeconfig)
	if strings.Contains(cf, "replicate ") {
		return cf
	}
	const anchor = "schema kubernetes\n"
	if !strings.Contains(cf, anchor) {
		t.Fatalf("the shipped Corefile has no %q:\n%s", anchor, cf)
	}
	return strings.Replace(cf, anchor, anchor+"            replicate 127.0.0.1:9155\n", 1)
}

// replicaFollowerCorefile is the node-local Corefile of
// deploy/node-local/configmap.yaml, changed only as far as a test on
// loopback needs: it listens on 127.0.0.1 instead of the node-local and
// cluster DNS addresses, follows the leader's stream at url, keeps its
// snapshot in the test's directory and forwards to a loopback port where
// nothing answers.
func replicaFollowerCorefile(t *testing.T, url string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "node-local", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatalf("node-local configmap.yaml: %v", err)
	}
	cf := cm.Data["Corefile"]
	for _, r := range []struct{ old, new string }{
		{"bind 169.254.20.10 10.96.0.10", "bind 127.0.0.1"},
		{"169.254.20.10:", "127.0.0.1:"},
		{"source replica http://{$MESHDNS_UPSTREAM_SERVICE_HOST}:9155", "source replica " + url},
		{"/var/lib/meshdns-node-local/", ""},
		{"/var/run/secrets/meshdns-replication/", ""},
		{"forward . {$MESHDNS_UPSTREAM_SERVICE_HOST}", "forward . 127.0.0.1:5301"},
		{"ttl 30\n", "ttl 30\n        stale_ede\n"}, // the option, to see it end to end
	} {
		if !strings.Contains(cf, r.old) {
			t.Fatalf("the node-local Corefile has no %q:\n%s", r.old, cf)
		}
		cf = strings.ReplaceAll(cf, r.old, r.new)
	}
	return cf
}

// startReplicaFollower runs a node-local meshdns following the leader at
// addr (127.0.0.1:PORT; its port is kept as it is in the Corefile).
func startReplicaFollower(t *testing.T, addr string) *Server {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return Start(t, replicaFollowerCorefile(t, "http://"+addr), Options{Ports: map[int]int{p: p}, Files: replicaTokenFiles})
}

// replicaToken is the stream's token in the tests: the shipped Corefiles
// read it from a file "token" in the server's directory once the tests
// rewrite their paths (the Secret meshdns-replication in a cluster).
const replicaToken = "e2e-replication-token"

// replicaTokenFiles writes it (Options.Files).
var replicaTokenFiles = map[string]string{"token": replicaToken + "\n"}

// replicaProxy is a TCP proxy on loopback between followers and a
// leader, which the test can cut: Cut closes every connection and turns
// new ones away until Resume.
type replicaProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startReplicaProxy(t *testing.T, target string) *replicaProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replicaProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *replicaProxy) Addr() string { return p.ln.Addr().String() }

func (p *replicaProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies src to dst, then closes both.
func (p *replicaProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
	dst.Close()
	src.Close()
}

// Cut drops every connection and refuses new ones.
func (p *replicaProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// SwitchTo sends new connections to target, and drops the open ones (a
// follower's URL that now reaches another replica, as a Service does).
func (p *replicaProxy) SwitchTo(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
}

// Resume lets connections through again.
func (p *replicaProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *replicaProxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// replicaObjects creates n ClusterIP Services in ns, svc0 … svc<n-1>,
// each with a slice of three ready endpoints, and the headless Service
// "db" with three endpoints; it returns the Services' cluster IPs.
func replicaObjects(t *testing.T, k *kubeAPI, ns string, n int) map[string]string {
	t.Helper()
	ips := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("svc%d", i)
		ips[name] = createService(t, k, ns, name, corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
		createSlice(t, k, ns, name+"-a", name, discoveryv1.AddressTypeIPv4,
			endpoint(fmt.Sprintf("10.244.%d.1", i), "n1", true, false),
			endpoint(fmt.Sprintf("10.244.%d.2", i), "n2", true, false),
			endpoint(fmt.Sprintf("10.244.%d.3", i), "n3", true, false))
	}
	createService(t, k, ns, "db", corev1.ServiceTypeClusterIP, func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	createSlice(t, k, ns, "db-a", "db", discoveryv1.AddressTypeIPv4, replicaDBEndpoints(true)...)
	return ips
}

// replicaDBEndpoints are db's endpoints, the first ready or not.
func replicaDBEndpoints(firstReady bool) []discoveryv1.Endpoint {
	return []discoveryv1.Endpoint{
		endpoint("10.244.200.1", "n1", firstReady, false),
		endpoint("10.244.200.2", "n2", true, false),
		endpoint("10.244.200.3", "n3", true, false),
	}
}

// replicaSetPort changes the port of ns/name's only port.
func replicaSetPort(t *testing.T, k *kubeAPI, ns, name string, port int32) {
	t.Helper()
	s, err := k.Client.CoreV1().Services(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Ports[0].Port = port
	if _, err := k.Client.CoreV1().Services(ns).Update(ctxT(t), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// replicaAnswers are the canonical answers of addr to names' A and SRV
// questions.
func replicaAnswers(addr string, names []string) []string {
	var out []string
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeSRV} {
			out = append(out, ask(addr, question{n, qt}))
		}
	}
	return out
}

// replicaSame fails unless addr answers names as want.
func replicaSame(t *testing.T, addr string, names, want []string, when string) {
	t.Helper()
	got := replicaAnswers(addr, names)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: answer %d (%s) changed:\n  got:  %s\n  want: %s", when, i, names[i/2], got[i], want[i])
		}
	}
}

// replicaDelta is a metric's growth over f.
func replicaDelta(s *Server, f func(), name string, labels ...string) float64 {
	before := s.Metric(name, labels...)
	f()
	return s.Metric(name, labels...) - before
}

// apiWatches is the number of watches the API server serves now.
func apiWatches(t *testing.T, k *kubeAPI) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/metrics", k.port), nil)
	req.Header.Set("Authorization", "Bearer "+kubeToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return metricValue(string(b), "apiserver_longrunning_requests", `verb="WATCH"`)
}

// replicaStaleEDE reports whether addr's answer to a cluster name carries
// Extended DNS Error 3, Stale Answer.
func replicaStaleEDE(t *testing.T, addr string) bool {
	t.Helper()
	r, err := TryQuery(addr, "svc19.shop.svc.cluster.local", dns.TypeA, "udp")
	if err != nil {
		t.Fatal(err)
	}
	if o := r.IsEdns0(); o != nil {
		for _, x := range o.Option {
			if e, ok := x.(*dns.EDNS0_EDE); ok && e.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
				return true
			}
		}
	}
	return false
}
