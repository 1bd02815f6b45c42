package main

// The fleet mode (-fleet N): what N nodes' consul sources cost one real
// Consul server. One meshdns process with N server blocks, each with its
// own virtualconsul `source consul` (its own client, its own token file so
// the counting proxy can tell the sources apart), follows a one-node
// Consul v1.16.3 server (persistent, so it can be restarted: an election)
// through the counting proxy. The catalog is the issue's: 20 services with
// transparent-proxy sidecars, 2 terminating gateways linking 2 services
// each. Phases, each counted at the proxy:
//
//   - unrelated changes: a plain service registered and deregistered;
//     requests per source per change (the agent probes apart)
//   - a freeze: the server SIGSTOPped 15 s, then continued; reads of
//     services that did not change, per source
//   - an election: the server killed and started again on its data; reads
//     of unchanged services per source
//   - the first retry: the proxy fails every request (in flight and new)
//     for 5 s; the spread of each source's first request after that
//   - Consul's CPU (utime+stime of its process): the fleet idle, the fleet
//     under unrelated changes, and instead of it a fleet of N Consul-DNS
//     clients that each ask every VIP name once per 5 s (a cache with
//     meshdns's TTL in front of Consul's DNS)

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
)

// fleetServer is the one-node Consul server of the fleet run.
type fleetServer struct {
	bin, dir string
	ports    []int
	cmd      *exec.Cmd
	logf     *os.File
}

func (s *fleetServer) http() string { return fmt.Sprintf("127.0.0.1:%d", s.ports[0]) }
func (s *fleetServer) dns() string  { return fmt.Sprintf("127.0.0.1:%d", s.ports[1]) }

func (s *fleetServer) start() {
	if s.ports == nil {
		s.ports = freePorts(6)
		hcl := fmt.Sprintf(`bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
disable_update_check = true
server = true
bootstrap_expect = 1
data_dir = %q
connect { enabled = true }
ports { http = %d, dns = %d, grpc = %d, serf_lan = %d, serf_wan = %d, server = %d, grpc_tls = -1, https = -1 }
performance { raft_multiplier = 1 }
log_level = "warn"
limits { http_max_conns_per_client = 15000 }
`, filepath.Join(s.dir, "data"), s.ports[0], s.ports[1], s.ports[2], s.ports[3], s.ports[4], s.ports[5])
		if err := os.WriteFile(filepath.Join(s.dir, "server.hcl"), []byte(hcl), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	s.logf, _ = os.OpenFile(filepath.Join(s.dir, "consul.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	s.cmd = exec.Command(s.bin, "agent", "-config-file", filepath.Join(s.dir, "server.hcl"))
	s.cmd.Stdout, s.cmd.Stderr = s.logf, s.logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + s.http() + "/v1/status/leader")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(b) > 4 {
				return
			}
		}
		if time.Now().After(deadline) {
			fatalf("consul server has no leader after 60 s; its log (tail):\n%s", tail(filepath.Join(s.dir, "consul.log"), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *fleetServer) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill() // by PID
		_ = s.cmd.Wait()
		s.cmd = nil
		s.logf.Close()
	}
}

func (s *fleetServer) signal(sig syscall.Signal) { _ = s.cmd.Process.Signal(sig) }

// cpu is the server process's user+system time so far.
func (s *fleetServer) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// fleetRequest is one request the proxy saw.
type fleetRequest struct {
	at    time.Time
	src   string // the source's token
	path  string
	probe bool // /v1/agent/version: per time, not per change
}

// fleetProxy is the counting proxy: proxyChildren child processes
// (benchconsul -proxy-child, proxychild.go), each forwarding to the server
// and reporting every request it saw on its stdout; while failing they
// answer 503 to new requests and cut those in flight. Children, not one
// in-process proxy, because a proxied request holds two descriptors and an
// extinction at 1,000 sources puts ~11,000 requests in flight at once (8
// re-reads and the watches of each source) against a hard open-file limit
// of 20,000 this machine's processes cannot raise.
type fleetProxy struct {
	target   string
	mu       sync.Mutex
	reqs     []fleetRequest
	children []*proxyChild
}

type proxyChild struct {
	cmd  *exec.Cmd
	ctl  io.WriteCloser
	addr string
	done chan struct{} // closed when its report stream ends
}

// proxyChildren is how many proxies serve n sources: ~500 sources each.
func proxyChildren(n int) int { return max(1, (n+499)/500) }

// serve starts the children and returns their addresses (sources are dealt
// out over them in turn) and a stop.
func (p *fleetProxy) serve(n int) ([]string, func()) {
	self, err := os.Executable()
	if err != nil {
		fatalf("%v", err)
	}
	var addrs []string
	for range proxyChildren(n) {
		cmd := exec.Command(self, "-proxy-child", p.target)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		ctl, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			fatalf("proxy child: %v", err)
		}
		c := &proxyChild{cmd: cmd, ctl: ctl, done: make(chan struct{})}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		if !sc.Scan() {
			fatalf("proxy child: no address")
		}
		c.addr = sc.Text()
		go func() {
			defer close(c.done)
			for sc.Scan() {
				r, ok := parseChildLine(sc.Text())
				if !ok {
					continue
				}
				p.mu.Lock()
				p.reqs = append(p.reqs, r)
				p.mu.Unlock()
			}
		}()
		p.children = append(p.children, c)
		addrs = append(addrs, c.addr)
	}
	return addrs, func() {
		for _, c := range p.children {
			if c.cmd.Process != nil {
				_ = c.cmd.Process.Kill() // by PID
				_ = c.cmd.Wait()
			}
		}
		p.children = nil
	}
}

// fail starts (cutting every request in flight) or ends a failure, in
// every child.
func (p *fleetProxy) fail(on bool) {
	cmd := "0\n"
	if on {
		cmd = "1\n"
	}
	for _, c := range p.children {
		if _, err := io.WriteString(c.ctl, cmd); err != nil {
			fatalf("proxy child: %v", err)
		}
	}
}

func (p *fleetProxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

func (p *fleetProxy) since(i int) []fleetRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs[i:])
}

// fleetCatalog is the catalog: 20 sidecar services, 2 terminating
// gateways with 2 linked services each.
func fleetCatalog(c *api.Client) (names []string, err error) {
	for i := range 20 {
		names = append(names, fmt.Sprintf("svc%d", i))
	}
	if err := registerAll(c, names); err != nil {
		return nil, err
	}
	for g := range 2 {
		gw := fmt.Sprintf("tgw%d", g)
		var linked []api.LinkedService
		for l := range 2 {
			ext := fmt.Sprintf("ext%d-%d", g, l)
			names = append(names, ext)
			linked = append(linked, api.LinkedService{Name: ext})
			if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "ext-node", Address: "10.0.1.1",
				Service: &api.AgentService{ID: ext, Service: ext, Port: 443}}, nil); err != nil {
				return nil, err
			}
		}
		if _, _, err := c.ConfigEntries().Set(&api.TerminatingGatewayConfigEntry{Kind: api.TerminatingGateway, Name: gw, Services: linked}, nil); err != nil {
			return nil, err
		}
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "gw-node", Address: "10.0.2.1",
			Service: &api.AgentService{Kind: api.ServiceKindTerminatingGateway, ID: gw, Service: gw, Port: 8443}}, nil); err != nil {
			return nil, err
		}
	}
	// A service gone extinct once, as in any catalog that has lived: until
	// one has, Consul answers the extinction probe with the catalog's
	// index, which moves with every change.
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "bench-node", Address: "10.0.0.1",
		Service: &api.AgentService{ID: "warm-up", Service: "warm-up", Port: 9999}}, nil); err != nil {
		return nil, err
	}
	if _, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: "bench-node", ServiceID: "warm-up"}, nil); err != nil {
		return nil, err
	}
	return names, nil
}

// fleetMeshdns runs one meshdns with n blocks following the proxies in turn.
func fleetMeshdns(bin, dir string, proxies []string, n int) ([]string, func(), error) {
	ports := freeDualPorts(n)
	var b strings.Builder
	addrs := make([]string, n)
	for i, port := range ports {
		tok := filepath.Join(dir, fmt.Sprintf("token%d", i))
		if err := os.WriteFile(tok, []byte(fmt.Sprintf("src-%d\n", i)), 0o600); err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(&b, "consul.:%d {\n    bind 127.0.0.1\n    virtualconsul {\n        source consul %s {\n            token_file %s\n        }\n        authoritative\n    }\n}\n", port, proxies[i%len(proxies)], tok)
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(b.String()), 0o644); err != nil {
		return nil, nil, err
	}
	logf, _ := os.Create(filepath.Join(dir, "meshdns.log"))
	cmd := exec.Command(bin, "-conf", "Corefile")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	// meshdns exiting before it is stopped ends the run at once, with why
	// (a 5-minute wait for sources that no process serves says nothing)
	exited := make(chan struct{})
	var stopping atomic.Bool
	go func() {
		err := cmd.Wait()
		close(exited)
		if !stopping.Load() {
			fatalf("meshdns exited (%v); its log (tail):\n%s", err, tail(filepath.Join(dir, "meshdns.log"), 20))
		}
	}()
	return addrs, func() {
		if stopping.Swap(true) {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		logf.Close()
	}, nil
}

// settle waits until no request but agent probes reached the proxy for
// quiet, at most limit.
func settle(p *fleetProxy, quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		time.Sleep(quiet / 4)
		last := time.Time{}
		for _, r := range p.since(0) {
			if !r.probe && r.at.After(last) {
				last = r.at
			}
		}
		if time.Since(last) > quiet {
			return
		}
	}
}

// unchangedReads counts the reads of names (catalog service reads and
// gateway-services) among reqs, per source.
func unchangedReads(reqs []fleetRequest, names []string, n int) float64 {
	c := 0
	for _, r := range reqs {
		for _, nm := range names {
			if r.path == "/v1/catalog/service/"+nm || r.path == "/v1/catalog/service/"+nm+"-sidecar-proxy" || r.path == "/v1/catalog/gateway-services/"+nm {
				c++
				break
			}
		}
	}
	return float64(c) / float64(n)
}

func runFleet(consulBin, meshdns string, n, changes int) {
	dir, err := os.MkdirTemp("", "benchfleet-")
	if err != nil {
		fatalf("%v", err)
	}
	defer runCleanups()
	onExit(func() { os.RemoveAll(dir) })
	srv := &fleetServer{bin: consulBin, dir: dir}
	onExit(srv.stop)
	srv.start()
	client, _ := api.NewClient(&api.Config{Address: srv.http()})
	names, err := fleetCatalog(client)
	if err != nil {
		fatalf("catalog: %v", err)
	}
	read := append(slices.Clone(names), "tgw0", "tgw1")
	p := &fleetProxy{target: srv.http()}
	proxies, stopProxy := p.serve(n)
	onExit(stopProxy)
	addrs, stopMesh, err := fleetMeshdns(meshdns, dir, proxies, n)
	if err != nil {
		fatalf("%v", err)
	}
	onExit(stopMesh)
	t0 := time.Now()
	if !visible(addrs, "ext1-1.virtual.consul.", true, 5*time.Minute) {
		log.Printf("proxy: %d requests so far; meshdns log (tail):\n%s\nconsul log (tail):\n%s", p.mark(),
			tail(filepath.Join(dir, "meshdns.log"), 40), tail(filepath.Join(dir, "consul.log"), 20))
		fatalf("not every source answers ext1-1.virtual.consul after 5 minutes")
	}
	log.Printf("%d sources synced %d names in %v", n, len(names), time.Since(t0).Round(time.Millisecond))
	settle(p, 3*time.Second, time.Minute)

	// Unrelated changes: a plain service registered, then deregistered
	// (a service gone extinct), each counted apart.
	from := p.mark()
	var regs, deregs []fleetRequest
	for i := range changes {
		at := p.mark()
		if _, err := client.Catalog().Register(&api.CatalogRegistration{Node: "bench-node", Address: "10.0.0.1",
			Service: &api.AgentService{ID: "unrelated", Service: "unrelated", Port: 9000 + i}}, nil); err != nil {
			fatalf("%v", err)
		}
		settle(p, 2*time.Second, time.Minute)
		regs = append(regs, p.since(at)...)
		at = p.mark()
		if _, err := client.Catalog().Deregister(&api.CatalogDeregistration{Node: "bench-node", ServiceID: "unrelated"}, nil); err != nil {
			fatalf("%v", err)
		}
		settle(p, 2*time.Second, time.Minute)
		deregs = append(deregs, p.since(at)...)
	}
	reqs := p.since(from)
	perChange := func(reqs []fleetRequest, changes int) (total float64, by map[string]float64) {
		by = map[string]float64{}
		c := 0
		for _, r := range reqs {
			if r.probe {
				continue
			}
			c++
			k := r.path
			if strings.HasPrefix(k, "/v1/catalog/service/") && k != "/v1/catalog/service/meshdns-virtualconsul-extinction-probe" {
				k = "/v1/catalog/service/<name>"
			}
			if strings.HasPrefix(k, "/v1/catalog/gateway-services/") {
				k = "/v1/catalog/gateway-services/<gw>"
			}
			by[k]++
		}
		d := float64(n * changes)
		for k := range by {
			by[k] /= d
		}
		return float64(c) / d, by
	}
	total, by := perChange(reqs, 2*changes)
	fmt.Printf("\nfleet: %d sources, Consul v1.16.3 one-node server, 20 sidecar services, 2 terminating gateways with 2 linked services each\n", n)
	fmt.Printf("unrelated change (a plain service registered or deregistered, %d of each): %.2f requests per source per change %v\n", changes, total, fmtBy(by))
	total, by = perChange(regs, changes)
	fmt.Printf("  of which a registration: %.2f %v\n", total, fmtBy(by))
	total, by = perChange(deregs, changes)
	fmt.Printf("  of which a deregistration (an extinction): %.2f %v\n", total, fmtBy(by))

	// A freeze of 15 s.
	from = p.mark()
	srv.signal(syscall.SIGSTOP)
	time.Sleep(15 * time.Second)
	srv.signal(syscall.SIGCONT)
	settle(p, 5*time.Second, 2*time.Minute)
	reqs = p.since(from)
	fmt.Printf("server frozen 15 s: reads of unchanged services per source %.2f (requests per source %.2f)\n", unchangedReads(reqs, read, n), float64(countNonProbe(reqs))/float64(n))

	// An election: the server killed and started on its data.
	from = p.mark()
	srv.stop()
	time.Sleep(2 * time.Second)
	srv.start()
	settle(p, 5*time.Second, 2*time.Minute)
	reqs = p.since(from)
	fmt.Printf("server restarted (an election): reads of unchanged services per source %.2f (requests per source %.2f)\n", unchangedReads(reqs, read, n), float64(countNonProbe(reqs))/float64(n))

	// The first retry after a failure of every request.
	settle(p, 3*time.Second, time.Minute)
	from = p.mark()
	t := time.Now()
	p.fail(true)
	time.Sleep(5 * time.Second)
	p.fail(false)
	first := map[string]time.Time{}
	seen := map[string]bool{}
	for _, r := range p.since(from) {
		if r.probe || r.src == "" {
			continue
		}
		// a source's first request after t is the one the cut answered
		// (or its next round's); the one after that is its first retry
		if !seen[r.src] {
			if r.at.Sub(t) < 20*time.Millisecond {
				seen[r.src] = true
				continue
			}
		}
		if _, ok := first[r.src]; !ok {
			first[r.src] = r.at
		}
	}
	var offs []time.Duration
	for _, at := range first {
		offs = append(offs, at.Sub(t))
	}
	slices.Sort(offs)
	if len(offs) > 0 {
		fmt.Printf("first retry after every request failed: %d sources, from %v to %v after the failure (spread %v; p5-p95 %v)\n",
			len(offs), offs[0].Round(time.Millisecond), offs[len(offs)-1].Round(time.Millisecond),
			(offs[len(offs)-1] - offs[0]).Round(time.Millisecond), (offs[len(offs)*95/100] - offs[len(offs)*5/100]).Round(time.Millisecond))
	}
	settle(p, 5*time.Second, 2*time.Minute)

	// Consul's CPU: idle, under changes, and a fleet of DNS clients.
	c0 := srv.cpu()
	time.Sleep(30 * time.Second)
	idle := srv.cpu() - c0
	c0 = srv.cpu()
	for i := range 10 {
		client.Catalog().Register(&api.CatalogRegistration{Node: "bench-node", Address: "10.0.0.1",
			Service: &api.AgentService{ID: "unrelated", Service: "unrelated", Port: 9100 + i}}, nil)
		time.Sleep(1500 * time.Millisecond)
		client.Catalog().Deregister(&api.CatalogDeregistration{Node: "bench-node", ServiceID: "unrelated"}, nil)
		time.Sleep(1500 * time.Millisecond)
	}
	busy := srv.cpu() - c0
	stopMesh()
	settle(p, 2*time.Second, 30*time.Second)
	c0 = srv.cpu()
	queries := dnsFleet(srv.dns(), names, n, 30*time.Second)
	dnsCPU := srv.cpu() - c0
	fmt.Printf("Consul server CPU, %d meshdns sources: idle %v per 30 s; 20 unrelated changes in 30 s: %v (%.1f ms per change above idle)\n",
		n, idle, busy, float64((busy-idle).Microseconds())/1000/20)
	fmt.Printf("Consul server CPU, %d Consul-DNS clients asking the %d VIP names every 5 s (%d queries in 30 s): %v per 30 s\n",
		n, len(names), queries, dnsCPU)
}

func countNonProbe(reqs []fleetRequest) int {
	c := 0
	for _, r := range reqs {
		if !r.probe {
			c++
		}
	}
	return c
}

func fmtBy(by map[string]float64) string {
	var keys []string
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, by[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// dnsFleet is n clients, each asking Consul's DNS for every name once per
// 5 s (spread over the period) for d; it returns the queries answered.
func dnsFleet(addr string, names []string, n int, d time.Duration) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	end := time.Now().Add(d)
	period := 5 * time.Second
	sem := make(chan struct{}, 64) // at most 64 queries in flight
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * period / time.Duration(n))
			c := dns.Client{Timeout: 2 * time.Second}
			for time.Now().Before(end) {
				start := time.Now()
				for _, nm := range names {
					sem <- struct{}{}
					m := new(dns.Msg)
					m.SetQuestion(nm+".virtual.consul.", dns.TypeA)
					if _, _, err := c.Exchange(m, addr); err == nil {
						mu.Lock()
						total++
						mu.Unlock()
					}
					<-sem
				}
				time.Sleep(period - time.Since(start))
			}
		}()
	}
	wg.Wait()
	return total
}

// freeDualPorts returns n loopback ports free for both TCP and UDP, taken
// below the kernel's ephemeral range: meshdns binds its thousand listeners
// one by one while its sources already connect, and a port taken from the
// ephemeral range could be handed to one of those connections first (a
// 1,000-source run died at start on "bind: address already in use").
func freeDualPorts(n int) []int {
	lo := ephemeralLow()
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var ports []int
	for port := lo - 1; len(ports) < n; port-- {
		if port < 1024 {
			log.Fatalf("fewer than %d free ports below %d", n, lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		closers = append(closers, l)
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			continue
		}
		closers = append(closers, u)
		ports = append(ports, port)
	}
	return ports
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil {
			return lo
		}
	}
	return 32768
}

// cleanups run, last first, when runFleet returns or fails: log.Fatal alone
// would skip its defers and leave the Consul server and the meshdns
// processes running.
var cleanups []func()

func onExit(f func()) { cleanups = append(cleanups, f) }

func runCleanups() {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

func fatalf(format string, a ...any) {
	runCleanups()
	log.Fatalf(format, a...)
}

// tail is the last n lines of a file, for a failure's report.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
