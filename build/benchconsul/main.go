// Command benchconsul measures what the virtualconsul consul source costs a
// Consul agent per catalog change: a real Consul dev agent with -services
// connect-proxy services in its catalog (each the sidecar of a service, so
// each service has a virtual IP), -meshdns meshdns processes following the
// same agent through a counting HTTP proxy, then -changes registrations
// and deregistrations of one more service's proxy. It prints the requests that
// reached the agent per meshdns per change (the watchdog's
// /v1/agent/version probes apart: they are per time, not per change), how
// many were reads through the leader (neither ?stale nor ?cached), and how
// long each change took to be answered by every meshdns.
//
// build/bench-virtualconsul-catalog.sh runs it with the project's binaries.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
)

func main() {
	var (
		consulBin = flag.String("consul", "", "the consul binary")
		meshdns   = flag.String("meshdns", "bin/meshdns", "the meshdns binary")
		services  = flag.Int("services", 500, "proxy services in the catalog")
		procs     = flag.Int("procs", 20, "meshdns processes following the agent")
		changes   = flag.Int("changes", 50, "registrations (each followed by a deregistration) of one service")
		fleet     = flag.Int("fleet", 0, "the fleet mode (fleet.go): this many consul sources in one meshdns against one Consul server")
		child     = flag.String("proxy-child", "", "internal: serve as one of the fleet's counting proxies, forwarding to this address (proxychild.go)")
	)
	flag.Parse()
	if *child != "" {
		runProxyChild(*child)
		return
	}
	if *consulBin == "" {
		log.Fatal("benchconsul: -consul is required")
	}
	if *fleet > 0 {
		raiseFileLimit(*fleet)
		runFleet(*consulBin, *meshdns, *fleet, *changes)
		return
	}
	dir, err := os.MkdirTemp("", "benchconsul-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	fail := func(f string, a ...any) {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		log.Fatalf(f, a...)
	}

	agent, stop := startConsul(*consulBin, dir)
	stops = append(stops, stop)
	client, err := api.NewClient(&api.Config{Address: agent})
	if err != nil {
		fail("%v", err)
	}
	t0 := time.Now()
	names := make([]string, *services)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d", i)
	}
	if err := registerAll(client, names); err != nil {
		fail("registering: %v", err)
	}
	log.Printf("%d proxy services registered, every VIP assigned, in %v", *services, time.Since(t0).Round(time.Millisecond))

	counter := newCounter(agent)
	proxyAddr, stopProxy := counter.serve()
	stops = append(stops, stopProxy)

	dnsAddrs := make([]string, *procs)
	for i := range dnsAddrs {
		addr, stop, err := startMeshdns(*meshdns, filepath.Join(dir, fmt.Sprintf("m%d", i)), proxyAddr)
		if err != nil {
			fail("meshdns %d: %v", i, err)
		}
		stops = append(stops, stop)
		dnsAddrs[i] = addr
	}
	last := fmt.Sprintf("svc%d.virtual.consul.", *services-1)
	t0 = time.Now()
	if !visible(dnsAddrs, last, true, 60*time.Second) {
		fail("not every meshdns answers %s after 60 s", last)
	}
	log.Printf("%d meshdns processes synced %d names in %v", *procs, *services, time.Since(t0).Round(time.Millisecond))

	time.Sleep(time.Second)
	counter.reset()
	start := time.Now()
	var lat []time.Duration
	for i := range *changes {
		for _, up := range []bool{true, false} {
			t := time.Now()
			if up {
				err = register(client, "bench-new", 20000, i)
			} else {
				err = deregister(client, "bench-new")
			}
			if err != nil {
				fail("change %d: %v", i, err)
			}
			if !visible(dnsAddrs, "bench-new.virtual.consul.", up, 30*time.Second) {
				fail("change %d (%v) not visible in every meshdns within 30 s", i, up)
			}
			lat = append(lat, time.Since(t))
		}
	}
	elapsed := time.Since(start)
	time.Sleep(time.Second) // requests the last change set off
	c := counter.snapshot()
	n := float64(*procs * len(lat))
	fmt.Printf("\nvirtualconsul consul source under catalog changes: Consul 1.16.3 dev agent, %d proxy services, %d meshdns, %d changes (%d registrations + %d deregistrations) in %v\n",
		*services, *procs, len(lat), *changes, *changes, elapsed.Round(time.Millisecond))
	fmt.Printf("requests that reached the agent per meshdns per change: %.2f (list %.2f, proxy reads %.2f, other %.2f)\n",
		float64(c.list+c.reads+c.other)/n, float64(c.list)/n, float64(c.reads)/n, float64(c.other)/n)
	fmt.Printf("reads through the leader (neither ?stale nor ?cached): %d of %d\n", c.leader, c.list+c.reads+c.other+c.probes)
	fmt.Printf("watchdog probes (/v1/agent/version): %d, %.2f per meshdns per minute\n", c.probes, float64(c.probes)/float64(*procs)/elapsed.Minutes())
	slices.Sort(lat)
	fmt.Printf("change visible in every meshdns: p50 %v, p90 %v, max %v\n",
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}

// startConsul runs a dev agent on free loopback ports; it returns its HTTP
// address.
func startConsul(bin, dir string) (string, func()) {
	p := freePorts(6)
	hcl := fmt.Sprintf(`bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
connect { enabled = true }
ports { http = %d, dns = %d, grpc = %d, serf_lan = %d, serf_wan = %d, server = %d, grpc_tls = -1, https = -1 }
log_level = "warn"
limits { http_max_conns_per_client = 1000 }
`, p[0], p[1], p[2], p[3], p[4], p[5])
	conf := filepath.Join(dir, "consul.hcl")
	if err := os.WriteFile(conf, []byte(hcl), 0o644); err != nil {
		log.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(dir, "consul.log"))
	cmd := exec.Command(bin, "agent", "-dev", "-config-file", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p[0])
	stop := func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); logf.Close() }
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/status/leader")
		if err == nil {
			var b [64]byte
			n, _ := resp.Body.Read(b[:])
			resp.Body.Close()
			if n > 2 {
				return addr, stop
			}
		}
		if time.Now().After(deadline) {
			stop()
			log.Fatal("consul has no leader after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// register writes a connect proxy for name into the catalog (on a node of
// its own, as a sidecar on another machine: no local agent state, no
// checks); Consul gives name a VIP. try changes the entry's Meta, since
// Consul skips an identical registration.
func register(c *api.Client, name string, port, try int) error {
	_, err := c.Catalog().Register(&api.CatalogRegistration{Node: "bench-node", Address: "10.0.0.1",
		Service: &api.AgentService{Kind: api.ServiceKindConnectProxy, ID: name + "-sidecar-proxy", Service: name + "-sidecar-proxy",
			Port: port, Meta: map[string]string{"try": fmt.Sprint(try)},
			Proxy: &api.AgentServiceConnectProxyConfig{DestinationServiceName: name, Mode: api.ProxyModeTransparent}}}, nil)
	return err
}

func deregister(c *api.Client, name string) error {
	_, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: "bench-node", ServiceID: name + "-sidecar-proxy"}, nil)
	return err
}

// registerAll registers names and waits until each sidecar has its VIP,
// registering again (with another Meta) those still without one: Consul
// assigns VIPs only once its leader turned them on.
func registerAll(c *api.Client, names []string) error {
	for i, n := range names {
		if err := register(c, n, 30000+i, 0); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for try := 1; ; try++ {
		var missing []string
		for _, n := range names {
			svcs, _, err := c.Catalog().Service(n+"-sidecar-proxy", "", nil)
			if err != nil {
				return err
			}
			if len(svcs) == 0 || svcs[0].ServiceTaggedAddresses["consul-virtual"].Address == "" {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sidecars without a VIP after 3 minutes", len(missing))
		}
		time.Sleep(2 * time.Second)
		for _, n := range missing {
			i := slices.Index(names, n)
			if err := register(c, n, 30000+i, try); err != nil {
				return err
			}
		}
	}
}

// startMeshdns runs one meshdns following the agent at agent; it returns
// its DNS address.
func startMeshdns(bin, dir, agent string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	port := freePorts(1)[0]
	corefile := fmt.Sprintf(`consul.:%d {
    bind 127.0.0.1
    virtualconsul {
        source consul %s
        authoritative
    }
}
`, port, agent)
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(corefile), 0o644); err != nil {
		return "", nil, err
	}
	logf, _ := os.Create(filepath.Join(dir, "meshdns.log"))
	cmd := exec.Command(bin, "-conf", "Corefile")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); logf.Close() }
	return fmt.Sprintf("127.0.0.1:%d", port), stop, nil
}

// visible waits until every server answers name with an address (want) or
// with NXDOMAIN (!want), asking every 10 ms.
func visible(addrs []string, name string, want bool, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	// the poll's own load stays bounded: 2,000 queries/s at most across
	// the fleet (1,000 pollers at 10 ms were 100,000/s, and the machine's
	// two cores answered them instead of syncing)
	every := min(10*time.Millisecond*time.Duration(max(1, len(addrs)/20)), 500*time.Millisecond)
	var wg sync.WaitGroup
	ok := make([]atomic.Bool, len(addrs))
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dns.Client{Timeout: 500 * time.Millisecond}
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			for time.Now().Before(deadline) {
				r, _, err := c.Exchange(m, a)
				if err == nil && (want && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 || !want && r.Rcode == dns.RcodeNameError) {
					ok[i].Store(true)
					return
				}
				time.Sleep(every)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for tick := time.NewTicker(30 * time.Second); ; {
		select {
		case <-done:
			tick.Stop()
			n := len(addrs) - countFalse(ok)
			if n < len(addrs) {
				log.Printf("visible %s: %d of %d sources after %v", name, n, len(addrs), limit)
			}
			return n == len(addrs)
		case <-tick.C:
			log.Printf("visible %s: waiting, %d of %d sources so far", name, len(addrs)-countFalse(ok), len(addrs))
		}
	}
}

// countFalse counts the pollers not done yet.
func countFalse(ok []atomic.Bool) int {
	c := 0
	for i := range ok {
		if !ok[i].Load() {
			c++
		}
	}
	return c
}

// counter is a reverse proxy to the agent that counts what passes.
type counter struct {
	target string
	mu     sync.Mutex
	c      counts
}

type counts struct{ list, reads, other, probes, leader int }

func newCounter(target string) *counter { return &counter{target: target} }

func (c *counter) serve() (string, func()) {
	u, _ := url.Parse("http://" + c.target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1000, ResponseHeaderTimeout: 10 * time.Minute}
	rp.ErrorLog = log.New(io.Discard, "", 0) // blocking queries cut at the end
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.count(r)
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	return l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		srv.Close()
	}
}

func (c *counter) count(r *http.Request) {
	q := r.URL.Query()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/agent/version":
		c.c.probes++
		return // answered by the agent itself
	case r.URL.Path == "/v1/catalog/services":
		c.c.list++
	case strings.HasPrefix(r.URL.Path, "/v1/catalog/service/"):
		c.c.reads++
	default:
		c.c.other++
	}
	if !q.Has("stale") && !q.Has("cached") {
		c.c.leader++
	}
}

func (c *counter) reset() {
	c.mu.Lock()
	c.c = counts{}
	c.mu.Unlock()
}

func (c *counter) snapshot() counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// freePorts returns n free loopback TCP ports (also free for UDP in
// practice on loopback).
func freePorts(n int) []int {
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
