package test

// The start of the one-node cluster, in order: clean up after an earlier
// run, record the kernel parameters, network and cgroups, credentials,
// etcd and the API server, controller-manager and scheduler, the "outside
// world" DNS server, containerd with the images, kube-proxy, the kubelet,
// and deploy/kubernetes applied as the cluster DNS.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startNodeCluster starts the cluster; on error everything started so far
// is torn down again.
func startNodeCluster() (c *nodeCluster, err error) {
	c = &nodeCluster{paths: newNodePaths(nodeStateDir), procs: map[string]*nodeProc{}}
	if err := c.step("tools", func() (err error) { c.bins, err = nodeTools(); return err }); err != nil {
		return nil, err
	}
	if err := lockNodeState(); err != nil {
		return nil, err
	}
	if err := c.step("cleanup", func() error {
		sum, err := resetNodeState(c.bins["kube-proxy"])
		if sum != "" {
			fmt.Fprintf(os.Stderr, "one-node cluster: cleaned up after an earlier run: %s\n", sum)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := recordSysctls(c.paths.state); err != nil {
		return nil, err
	}
	if err := recordIptables(c.paths.state); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(os.Stderr, "one-node cluster: start failed (%v); tearing down: %s\n", err, c.teardown())
			c = nil
		}
	}()
	steps := []struct {
		name string
		f    func() error
	}{
		{"host", c.setupHost},
		{"api", c.startAPI},
		{"controllers", c.startControllers},
		{"containerd+images", c.startContainerd},
		{"node", c.startNode},
		{"dns", c.deployDNS},
	}
	for _, s := range steps {
		if err := c.step(s.name, s.f); err != nil {
			return c, err
		}
	}
	return c, nil
}

// setupHost creates the network, cgroups, credentials and config files.
func (c *nodeCluster) setupHost() error {
	if err := setupNodeNetwork(); err != nil {
		return err
	}
	if err := makeNodeCgroups(); err != nil {
		return err
	}
	var err error
	if c.pki, err = writeNodePKI(filepath.Join(c.paths.state, "pki"), "https://"+nodeIP+":6443"); err != nil {
		return err
	}
	files := map[string]string{
		c.paths.containerd: c.paths.containerdConfig(),
		filepath.Join(c.paths.cniConfDir, "10-node.conflist"): c.paths.cniConfig(),
		c.paths.kubeletConf: c.paths.kubeletConfig(),
		c.paths.resolvConf:  "nameserver " + nodeIP + "\n",
		c.paths.outsideConf: outsideCorefile(),
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, d := range []string{c.paths.hostLogs, c.paths.images} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return c.adminClient()
}

// localPort returns a free loopback TCP port.
func localPort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if handOut(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port")
}

// startAPI starts etcd and kube-apiserver and waits for /readyz.
func (c *nodeCluster) startAPI() error {
	cp, err := localPort()
	if err != nil {
		return err
	}
	pp, err := localPort()
	if err != nil {
		return err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(cp)
	peer := "http://127.0.0.1:" + strconv.Itoa(pp)
	if _, err := c.startProc("etcd", c.bins["etcd"], "--name", "node", "--data-dir", filepath.Join(c.paths.state, "etcd"),
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "node="+peer, "--log-level", "warn"); err != nil {
		return err
	}
	p := c.pki
	c.apiArgs = []string{c.bins["kube-apiserver"],
		"--bind-address=" + nodeIP, "--advertise-address=" + nodeIP, "--secure-port=6443",
		"--etcd-servers=" + c.etcdURL, "--service-cluster-ip-range=" + serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub, "--service-account-signing-key-file=" + p.saKey,
		"--token-auth-file=" + p.tokens, "--authorization-mode=Node,RBAC",
		"--tls-cert-file=" + p.apiCert, "--tls-private-key-file=" + p.apiKey,
		"--cert-dir=" + filepath.Join(c.paths.state, "apiserver-certs"),
		"--allow-privileged=true", "--kubelet-preferred-address-types=InternalIP",
		"--profiling=false", "--v=0",
	}
	return c.StartAPIServer()
}

// StartAPIServer (re)starts kube-apiserver and waits until /readyz answers.
func (c *nodeCluster) StartAPIServer() error {
	if _, err := c.startProc("kube-apiserver", c.apiArgs...); err != nil {
		return err
	}
	return c.waitAPIReady()
}

// waitAPIReady waits until the API server's /readyz answers 200.
func (c *nodeCluster) waitAPIReady() error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.caPEM)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return waitFor(90*time.Second, c.proc("kube-apiserver"), "API server /readyz", func() error {
		req, _ := http.NewRequest("GET", "https://"+nodeIP+":6443/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.pki.adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

// startControllers starts the controller-manager (default flags but one
// instance without leader election, service-account credentials per
// controller as kubeadm runs it, and the keys the token controllers need)
// and the scheduler, then the "outside world" DNS server.
func (c *nodeCluster) startControllers() error {
	if _, err := c.startProc("kube-controller-manager", c.bins["kube-controller-manager"],
		"--kubeconfig="+c.pki.kubeconfig["kube-controller-manager"], "--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.pki.saKey, "--root-ca-file="+c.pki.caCert,
		"--bind-address="+nodeIP, "--secure-port=10257", "--v=0"); err != nil {
		return err
	}
	if _, err := c.startProc("kube-scheduler", c.bins["kube-scheduler"],
		"--kubeconfig="+c.pki.kubeconfig["kube-scheduler"], "--leader-elect=false",
		"--bind-address="+nodeIP, "--secure-port=10259", "--v=0"); err != nil {
		return err
	}
	p, err := c.startProc("outside-dns", meshdnsBin, "-conf", c.paths.outsideConf)
	if err != nil {
		return err
	}
	return waitFor(20*time.Second, p, "outside DNS answer", func() error {
		_, err := TryQuery(nodeIP+":53", extName, 1, "udp")
		return err
	})
}

// startContainerd starts containerd and imports the three images.
func (c *nodeCluster) startContainerd() error {
	client := filepath.Join(c.paths.images, "nodeclient")
	built := make(chan error, 1)
	go func() { built <- buildNodeClient(client) }()
	p, err := c.startProc("containerd", c.bins["containerd"], "--config", c.paths.containerd)
	if err != nil {
		return err
	}
	if err := waitFor(30*time.Second, p, "containerd socket", func() error {
		_, err := hostRun(c.bins["ctr"], "-a", c.paths.ctrdSock, "version")
		return err
	}); err != nil {
		return err
	}
	if err := <-built; err != nil {
		return err
	}
	mesh, err := meshdnsImageSpec(meshdnsBin)
	if err != nil {
		return err
	}
	cl, err := clientImageSpec(client)
	if err != nil {
		return err
	}
	for _, spec := range []imageSpec{pauseImageSpec(), mesh, cl} {
		if err := importImage(c.bins["ctr"], c.paths.ctrdSock, c.paths.images, spec); err != nil {
			return err
		}
	}
	return nil
}

// startNode starts kube-proxy and the kubelet and waits for the node to be
// Ready.
func (c *nodeCluster) startNode() error {
	if _, err := c.startProc("kube-proxy", c.bins["kube-proxy"],
		"--kubeconfig="+c.pki.kubeconfig["kube-proxy"], "--proxy-mode=iptables",
		"--cluster-cidr="+clusterCIDR, "--hostname-override="+nodeName, "--bind-address="+nodeIP,
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--nodeport-addresses="+nodeIP+"/32", "--metrics-bind-address="+nodeIP+":10249",
		"--healthz-bind-address="+nodeIP+":10256", "--v=0"); err != nil {
		return err
	}
	kl, err := c.startProc("kubelet", c.bins["kubelet"], "--config="+c.paths.kubeletConf,
		"--kubeconfig="+c.pki.kubeconfig["kubelet"], "--root-dir="+c.paths.kubeletRoot,
		"--cert-dir="+filepath.Join(c.paths.state, "kubelet-pki"),
		"--hostname-override="+nodeName, "--node-ip="+nodeIP, "--v=0")
	if err != nil {
		return err
	}
	return waitFor(90*time.Second, kl, "Ready node", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready: %v", nodeName, n.Status.Conditions)
	})
}
