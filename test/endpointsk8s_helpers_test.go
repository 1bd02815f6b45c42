package test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeAPI is a real kube-apiserver with its etcd, on loopback ports, started
// by a test (recipe in ../shared/PEERS.md). The binary comes from
// build/peer-tools.sh, which builds it once per machine.
type kubeAPI struct {
	t          testing.TB
	dir        string
	port       int
	Kubeconfig string // a kubeconfig file for the admin token
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	Config     *rest.Config

	bin     string
	args    []string
	mu      sync.Mutex
	etcd    *exec.Cmd
	api     *exec.Cmd
	apiDone chan struct{}
	apiLog  *syncBuffer
}

const kubeToken = "meshdns-e2e-token"

// startKubeAPI starts etcd and kube-apiserver and waits for /readyz. Both
// are stopped by PID when the test ends.
func startKubeAPI(t testing.TB) *kubeAPI {
	t.Helper()
	etcdBin := peerTool(t, "etcd")
	openssl := RequireTool(t, "openssl", "openssl")
	k := &kubeAPI{t: t, dir: t.TempDir(), bin: peerTool(t, "kube-apiserver")}
	k.port = freePort(t)
	clientPort, peerPort := freePort(t), freePort(t)

	key, pub := filepath.Join(k.dir, "sa.key"), filepath.Join(k.dir, "sa.pub")
	for _, args := range [][]string{{"genrsa", "-out", key, "2048"}, {"rsa", "-in", key, "-pubout", "-out", pub}} {
		if out, err := exec.Command(openssl, args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	tokens := filepath.Join(k.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(kubeToken+",admin,admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	k.etcd = exec.Command(etcdBin, "--name", "e2e", "--data-dir", filepath.Join(k.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL, "--log-level", "error")
	etcdLog := &syncBuffer{}
	k.etcd.Stdout, k.etcd.Stderr = etcdLog, etcdLog
	k.etcd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := k.etcd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	etcdDone := make(chan struct{})
	go func() { _ = k.etcd.Wait(); close(etcdDone) }()
	t.Cleanup(func() {
		k.StopAPI()
		stopProcess(k.etcd, etcdDone, 5*time.Second)
		if t.Failed() {
			t.Logf("etcd log:\n%s", etcdLog.String())
		}
	})

	k.args = []string{
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(k.port),
		"--etcd-servers=" + etcdURL, "--service-cluster-ip-range=10.96.0.0/16,fd00:96::/108",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pub, "--service-account-signing-key-file=" + key,
		"--token-auth-file=" + tokens, "--authorization-mode=AlwaysAllow",
		"--endpoint-reconciler-type=none", "--cert-dir=" + filepath.Join(k.dir, "certs"),
		"--enable-priority-and-fairness=false", "--profiling=false", "--v=0",
	}
	k.Kubeconfig = filepath.Join(k.dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:%d
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: admin
current-context: e2e
`, k.port, kubeToken)
	if err := os.WriteFile(k.Kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.WarningHandler = rest.NoWarnings{}
	k.Config = cfg
	if k.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if k.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	k.StartAPI()
	return k
}

// StartAPI (re)starts kube-apiserver and waits until /readyz answers 200.
func (k *kubeAPI) StartAPI() {
	t := k.t
	t.Helper()
	k.mu.Lock()
	k.apiLog = &syncBuffer{}
	cmd := exec.Command(k.bin, k.args...)
	cmd.Stdout, cmd.Stderr = k.apiLog, k.apiLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		k.mu.Unlock()
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	k.api, k.apiDone = cmd, make(chan struct{})
	done, log := k.apiDone, k.apiLog
	go func() { _ = cmd.Wait(); close(done) }()
	k.mu.Unlock()

	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("kube-apiserver exited:\n%s", tail(log.String(), 40))
		default:
		}
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/readyz", k.port), nil)
		req.Header.Set("Authorization", "Bearer "+kubeToken)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("kube-apiserver not ready after 60s:\n%s", tail(log.String(), 40))
}

// StopAPI stops kube-apiserver (by PID); etcd keeps running.
func (k *kubeAPI) StopAPI() {
	k.mu.Lock()
	cmd, done := k.api, k.apiDone
	k.api = nil
	k.mu.Unlock()
	if cmd == nil {
		return
	}
	stopProcess(cmd, done, 10*time.Second)
	if k.t.Failed() {
		k.t.Logf("kube-apiserver log (tail):\n%s", tail(k.apiLog.String(), 40))
	}
}

func tail(s string, n int) string {
	var ls []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ls = append(ls, sc.Text())
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// within waits at most d until name/type answers want (see summary).
func within(t *testing.T, d time.Duration, addr, name string, qtype uint16, want ...string) {
	t.Helper()
	start := time.Now()
	want = append([]string(nil), want...)
	sort.Strings(want)
	Eventually(t, d, func() string {
		r, err := TryQuery(addr, name, qtype, "udp")
		if err != nil {
			return err.Error()
		}
		if got := summary(r); strings.Join(got, " | ") != strings.Join(want, " | ") {
			return fmt.Sprintf("%s %s: got %q, want %q", name, dns.TypeToString[qtype], got, want)
		}
		return ""
	})
	t.Logf("%s %s followed in %v", name, dns.TypeToString[qtype], time.Since(start).Round(time.Millisecond))
}

// ctxT is a context for API calls of a test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
