package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dnstable "github.com/envoyproxy/go-control-plane/envoy/data/dns/v3"
	dnsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/udp/dns_filter/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// consulBin returns the real Consul v1.16.3 (MPL), built once per machine
// by build/peer-tools.sh.
func consulBin(t testing.TB) string { return peerTool(t, "consul") }

// consulAgent is a real Consul agent on loopback ports of its own: in dev
// mode (in memory), or as a one-node server with a data directory that
// survives restarts (for the outage drill).
type consulAgent struct {
	t          testing.TB
	bin, dir   string
	persistent bool
	ports      [6]int // http dns grpc serf_lan serf_wan server
	token      string // sent with the helper's own API calls
	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	log        *syncBuffer
}

// startConsul starts an agent and waits for its leader.
func startConsul(t testing.TB, persistent bool) *consulAgent {
	t.Helper()
	return startConsulWith(t, persistent, "", "")
}

// startConsulWith is startConsul with extra HCL configuration and the
// token the helper's own API calls use.
func startConsulWith(t testing.TB, persistent bool, extraHCL, token string) *consulAgent {
	t.Helper()
	a := &consulAgent{t: t, bin: consulBin(t), dir: t.TempDir(), persistent: persistent, token: token}
	for i := range a.ports {
		a.ports[i] = freePort(t)
	}
	os.MkdirAll(filepath.Join(a.dir, "conf"), 0o755)
	os.MkdirAll(filepath.Join(a.dir, "data"), 0o755)
	hcl := fmt.Sprintf(`bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
connect { enabled = true }
ports { http = %d, dns = %d, grpc = %d, serf_lan = %d, serf_wan = %d, server = %d, grpc_tls = -1, https = -1 }
log_level = "warn"
`, a.ports[0], a.ports[1], a.ports[2], a.ports[3], a.ports[4], a.ports[5])
	if strings.Contains(extraHCL, "log_level") {
		hcl = strings.Replace(hcl, "log_level = \"warn\"\n", "", 1)
	}
	hcl += extraHCL
	if persistent {
		hcl += "server = true\nbootstrap_expect = 1\nperformance { raft_multiplier = 1 }\n"
	}
	if err := os.WriteFile(filepath.Join(a.dir, "conf", "base.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("consul log:\n%s", a.log.String())
		}
	})
	a.Start()
	return a
}

func (a *consulAgent) HTTP() string { return "127.0.0.1:" + strconv.Itoa(a.ports[0]) }
func (a *consulAgent) DNS() string  { return "127.0.0.1:" + strconv.Itoa(a.ports[1]) }

// Start runs the agent (again) and waits until it has a leader.
func (a *consulAgent) Start() {
	t := a.t
	t.Helper()
	args := []string{"agent", "-config-dir", filepath.Join(a.dir, "conf")}
	if a.persistent {
		args = append(args, "-data-dir", filepath.Join(a.dir, "data"))
	} else {
		args = append(args, "-dev")
	}
	a.mu.Lock()
	if a.log == nil {
		a.log = &syncBuffer{}
	}
	cmd := exec.Command(a.bin, args...)
	cmd.Stdout, cmd.Stderr = a.log, a.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		a.mu.Unlock()
		t.Fatalf("starting consul: %v", err)
	}
	a.cmd, a.done = cmd, make(chan struct{})
	done := a.done
	go func() { _ = cmd.Wait(); close(done) }()
	a.mu.Unlock()
	Eventually(t, 30*time.Second, func() string {
		var leader string
		if err := a.get("/v1/status/leader", &leader); err != nil {
			return "consul leader: " + err.Error()
		}
		if leader == "" {
			return "consul has no leader yet"
		}
		return ""
	})
}

// Pause stops the agent's process (SIGSTOP by PID): it keeps its sockets
// but answers nothing, a hung agent. Resume continues it.
func (a *consulAgent) Pause()  { a.signal(syscall.SIGSTOP) }
func (a *consulAgent) Resume() { a.signal(syscall.SIGCONT) }

func (a *consulAgent) signal(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		_ = a.cmd.Process.Signal(sig)
	}
}

// Stop kills the agent by PID (a crash, not a graceful leave).
func (a *consulAgent) Stop() {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

func (a *consulAgent) get(path string, out any) error {
	c := http.Client{Timeout: 3 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+a.HTTP()+path, nil)
	req.Header.Set("X-Consul-Token", a.token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}

func (a *consulAgent) GRPC() string { return "127.0.0.1:" + strconv.Itoa(a.ports[2]) }

// putJSON PUTs body to path and decodes the answer into out.
func (a *consulAgent) putJSON(path, body string, out any) {
	a.t.Helper()
	if b := a.put(path, body); json.Unmarshal(b, out) != nil {
		a.t.Fatalf("consul PUT %s: not JSON: %s", path, b)
	}
}

// CreateToken makes an ACL token with a new policy of rules and returns
// its secret.
func (a *consulAgent) CreateToken(name, rules string) string {
	a.t.Helper()
	var p struct{ ID string }
	a.putJSON("/v1/acl/policy", fmt.Sprintf(`{"Name": %q, "Rules": %q}`, name, rules), &p)
	var tok struct{ SecretID string }
	a.putJSON("/v1/acl/token", fmt.Sprintf(`{"Description": %q, "Policies": [{"ID": %q}]}`, name, p.ID), &tok)
	return tok.SecretID
}

// Log is the agent's output so far.
func (a *consulAgent) Log() string { return a.log.String() }

// put PUTs body to path with the helper's token and returns the answer;
// anything but 200 fails the test.
func (a *consulAgent) put(path, body string) []byte {
	a.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+a.HTTP()+path, strings.NewReader(body))
	req.Header.Set("X-Consul-Token", a.token)
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		a.t.Fatalf("consul PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		a.t.Fatalf("consul PUT %s: %s: %s", path, resp.Status, b)
	}
	return b
}

// Register registers service name with a transparent-proxy sidecar, which
// gets the service's virtual IP.
//
// It returns once Consul's catalog shows the sidecar's virtual IP, so that
// tests measure meshdns and not Consul. Consul assigns the VIP when it
// writes the proxy to the catalog, and only once its leader has turned
// virtual IPs on: a registration it handles before then (right after its
// election) leaves the proxy without one, and registering the same
// definition again changes nothing in the catalog (the agent syncs only a
// changed service). So every 2 s the sidecar is registered again with a
// new Meta value, which makes the agent write it. Consul 1.16's leader
// turns virtual IPs on in a routine that, when its first attempt fails
// without an error, tries again only a minute later
// (virtualIPVersionCheckInterval, agent/consul/leader_connect.go): seen in
// 2 of ~20 runs, so the wait is 75 s.
func (a *consulAgent) Register(name string, port int) {
	a.t.Helper()
	body := func(try int) string {
		return fmt.Sprintf(`{"Name": %q, "Port": %d, "Connect": {"SidecarService": {"Meta": {"registration": "%d"}, "Proxy": {"Mode": "transparent"}}}}`, name, port, try)
	}
	a.put("/v1/agent/service/register", body(0))
	start, last := time.Now(), time.Now()
	for try := 1; a.vip(name) == ""; {
		if time.Since(start) > 75*time.Second {
			a.t.Fatalf("consul gave %s-sidecar-proxy no virtual IP in 75 s", name)
		}
		if time.Since(last) > 2*time.Second {
			a.t.Logf("consul: %s-sidecar-proxy has no virtual IP %v after its registration: registering again", name, time.Since(start).Round(time.Millisecond))
			a.put("/v1/agent/service/register", body(try))
			try++
			last = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// vip is the consul-virtual tagged address of name's sidecar in the
// catalog, or "".
func (a *consulAgent) vip(name string) string {
	var proxies []struct {
		ServiceTaggedAddresses map[string]struct{ Address string }
	}
	if err := a.get("/v1/catalog/service/"+name+"-sidecar-proxy", &proxies); err != nil || len(proxies) == 0 {
		return ""
	}
	return proxies[0].ServiceTaggedAddresses["consul-virtual"].Address
}

// RegisterPlain registers a service without a sidecar (no VIP).
func (a *consulAgent) RegisterPlain(name string, port int) {
	a.t.Helper()
	a.put("/v1/agent/service/register", fmt.Sprintf(`{"Name": %q, "Port": %d}`, name, port))
}

// Deregister removes service name and its sidecar.
func (a *consulAgent) Deregister(name string) {
	a.t.Helper()
	a.put("/v1/agent/service/deregister/"+name+"-sidecar-proxy", "")
	a.put("/v1/agent/service/deregister/"+name, "")
}

// DefineService writes a service definition (with a sidecar) into the
// agent's config directory: the agent loads it at its next start, as an
// operator's change made while the agent was down.
func (a *consulAgent) DefineService(name string, port int) {
	a.t.Helper()
	def := fmt.Sprintf("service {\n  name = %q\n  port = %d\n  connect { sidecar_service { proxy { mode = \"transparent\" } } }\n}\n", name, port)
	if err := os.WriteFile(filepath.Join(a.dir, "conf", name+".hcl"), []byte(def), 0o644); err != nil {
		a.t.Fatal(err)
	}
}

// aOf returns the A answers (sorted) and rcode of name at addr over proto.
func aOf(addr, name, proto string) ([]string, int, error) {
	r, err := TryQuery(addr, name, dns.TypeA, proto)
	if err != nil {
		return nil, -1, err
	}
	return Rdata(r), r.Rcode, nil
}

// sameAnswer says "" when meshdns and Consul's own DNS give the same A
// answer (records and rcode) for name.
func sameAnswer(mesh, consul, name string) string {
	for _, proto := range []string{"udp", "tcp"} {
		got, grc, err := aOf(mesh, name, proto)
		if err != nil {
			return "meshdns: " + err.Error()
		}
		want, wrc, err := aOf(consul, name, proto)
		if err != nil {
			return "consul: " + err.Error()
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || grc != wrc {
			return fmt.Sprintf("%s over %s: meshdns %v %s, consul %v %s", name, proto,
				got, dns.RcodeToString[grc], want, dns.RcodeToString[wrc])
		}
	}
	return ""
}

// xdsServer is a real go-control-plane ADS server (snapshot cache) on a
// loopback port that stays the same across Stop/Start.
type xdsServer struct {
	t     testing.TB
	port  int
	cache cache.SnapshotCache
	nacks atomic.Int64 // requests carrying an error_detail
	acks  sync.Map     // version → true, ACKed by some client
	srv   *grpc.Server
	node  string
	tls   *tls.Config // nil: plaintext

	refuseDelta  bool         // serve state-of-the-world only: delta streams get Unimplemented
	deltaStreams atomic.Int64 // streams opened, by protocol
	sotwStreams  atomic.Int64
	nonces       sync.Map // delta: response nonce → the version it carried
}

func startXDS(t testing.TB, node string) *xdsServer {
	t.Helper()
	return startXDSTLS(t, node, nil)
}

// startXDSTLS is startXDS serving TLS with cfg.
func startXDSTLS(t testing.TB, node string, cfg *tls.Config) *xdsServer {
	t.Helper()
	return startXDSWith(t, &xdsServer{node: node, tls: cfg})
}

// startXDSSotWOnly is startXDS refusing delta streams.
func startXDSSotWOnly(t testing.TB, node string) *xdsServer {
	t.Helper()
	return startXDSWith(t, &xdsServer{node: node, refuseDelta: true})
}

func startXDSWith(t testing.TB, x *xdsServer) *xdsServer {
	t.Helper()
	x.t, x.port, x.cache = t, freePort(t), cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	x.Start()
	t.Cleanup(x.Stop)
	return x
}

func (x *xdsServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(x.port) }

func (x *xdsServer) Start() {
	x.t.Helper()
	cb := xdsserver.CallbackFuncs{
		StreamOpenFunc:      func(context.Context, int64, string) error { x.sotwStreams.Add(1); return nil },
		DeltaStreamOpenFunc: func(context.Context, int64, string) error { x.deltaStreams.Add(1); return nil },
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				x.nacks.Add(1)
			} else if req.GetResponseNonce() != "" {
				x.acks.Store(req.GetVersionInfo(), true)
			}
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
			x.nonces.Store(resp.GetNonce(), resp.GetSystemVersionInfo())
		},
		StreamDeltaRequestFunc: func(_ int64, req *discovery.DeltaDiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				x.nacks.Add(1)
			} else if v, ok := x.nonces.Load(req.GetResponseNonce()); ok {
				x.acks.Store(v, true)
			}
			return nil
		},
	}
	var srv discovery.AggregatedDiscoveryServiceServer = xdsserver.NewServer(context.Background(), x.cache, cb)
	if x.refuseDelta {
		srv = sotwOnly{srv}
	}
	var opts []grpc.ServerOption
	if x.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(x.tls)))
	}
	g := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	var l net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger for a moment after Stop
		if l, err = net.Listen("tcp", x.Addr()); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		x.t.Fatalf("xds listen: %v", err)
	}
	x.srv = g
	go g.Serve(l)
}

// sotwOnly is an ADS server that refuses delta streams, as a control plane
// that implements state-of-the-world only.
type sotwOnly struct {
	discovery.AggregatedDiscoveryServiceServer
}

func (sotwOnly) DeltaAggregatedResources(discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return status.Error(codes.Unimplemented, "method DeltaAggregatedResources not implemented")
}

func (x *xdsServer) Stop() {
	if x.srv != nil {
		x.srv.Stop()
		x.srv = nil
	}
}

func (x *xdsServer) Acked(version string) bool {
	_, ok := x.acks.Load(version)
	return ok
}

// Set publishes version with a virtual_dns listener holding domains
// (full-form name → addresses).
func (x *xdsServer) Set(version string, domains map[string][]string) {
	x.t.Helper()
	x.setTable(version, domains, true)
}

// SetInvalid publishes version with a virtual_dns listener whose DNS filter
// has no inline table: structurally invalid, which meshdns NACKs.
func (x *xdsServer) SetInvalid(version string) {
	x.t.Helper()
	x.setTable(version, nil, false)
}

func (x *xdsServer) setTable(version string, domains map[string][]string, inline bool) {
	x.t.Helper()
	var vds []*dnstable.DnsTable_DnsVirtualDomain
	for name, addrs := range domains {
		vds = append(vds, &dnstable.DnsTable_DnsVirtualDomain{
			Name: name,
			Endpoint: &dnstable.DnsTable_DnsEndpoint{EndpointConfig: &dnstable.DnsTable_DnsEndpoint_AddressList{
				AddressList: &dnstable.DnsTable_AddressList{Address: addrs},
			}},
		})
	}
	filter := &dnsfilter.DnsFilterConfig{StatPrefix: "virtual_dns"}
	if inline {
		filter.ServerConfig = &dnsfilter.DnsFilterConfig_ServerContextConfig{
			ConfigSource: &dnsfilter.DnsFilterConfig_ServerContextConfig_InlineDnsTable{
				InlineDnsTable: &dnstable.DnsTable{VirtualDomains: vds},
			},
		}
	}
	cfg, err := anypb.New(filter)
	if err != nil {
		x.t.Fatal(err)
	}
	ls := []types.Resource{
		&listener.Listener{Name: "public_listener:0.0.0.0:20000"},
		&listener.Listener{
			Name: "virtual_dns:127.0.0.1:8653",
			ListenerFilters: []*listener.ListenerFilter{{
				Name:       "envoy.filters.udp.dns_filter",
				ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: cfg},
			}},
		},
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ListenerType: ls})
	if err != nil {
		x.t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), x.node, snap); err != nil {
		x.t.Fatal(err)
	}
}

// listenerStandIn is a real DNS server on loopback UDP playing Envoy's
// virtual_dns listener: it answers the canonical names of its table, counts
// the questions it gets, and can be made to drop every query (hung) or be
// closed (killed).
type listenerStandIn struct {
	t       testing.TB
	addr    string
	table   map[string]string // canonical FQDN (lowercase) → IPv4 addresses, comma-separated
	srv     *dns.Server
	hung    atomic.Bool
	queries atomic.Int64
	mu      sync.Mutex
	names   []string
}

func startListenerStandIn(t testing.TB, table map[string]string) *listenerStandIn {
	t.Helper()
	l := &listenerStandIn{t: t, addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), table: table}
	l.Start()
	t.Cleanup(l.Stop)
	return l
}

func (l *listenerStandIn) Start() {
	l.t.Helper()
	pc, err := net.ListenPacket("udp", l.addr)
	if err != nil {
		l.t.Fatal(err)
	}
	l.srv = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(l.serve)}
	started := make(chan struct{})
	l.srv.NotifyStartedFunc = func() { close(started) }
	go l.srv.ActivateAndServe()
	<-started
}

func (l *listenerStandIn) Stop() {
	if l.srv != nil {
		_ = l.srv.Shutdown()
		l.srv = nil
	}
}

func (l *listenerStandIn) serve(w dns.ResponseWriter, r *dns.Msg) {
	l.queries.Add(1)
	q := r.Question[0]
	l.mu.Lock()
	l.names = append(l.names, q.Name)
	l.mu.Unlock()
	if l.hung.Load() {
		return // no reply: the client times out
	}
	m := new(dns.Msg)
	m.SetReply(r)
	ip, ok := l.table[strings.ToLower(q.Name)]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		// Envoy's listener answers with its default TTL of 300 s; a name
		// listed with several addresses ("a,b") gets them all
		for _, a := range strings.Split(ip, ",") {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP(a)})
		}
	default:
		m.Rcode = dns.RcodeNameError // Envoy answers NXDOMAIN for a type it lacks
	}
	w.WriteMsg(m)
}

func (l *listenerStandIn) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.names...)
}

// recursorStandIn is a public recursor stand-in: it answers every A query
// with 198.51.100.1 and remembers every name it was asked.
type recursorStandIn struct {
	addr  string
	mu    sync.Mutex
	names []string
}

func startRecursorStandIn(t testing.TB) *recursorStandIn {
	t.Helper()
	r := &recursorStandIn{addr: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r.mu.Lock()
		r.names = append(r.names, q.Question[0].Name)
		r.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("198.51.100.1")}}
		}
		w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: tl, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return r
}

func (r *recursorStandIn) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// loadStats counts the answers of a bounded query loop.
type loadStats struct {
	sent, ok, failed atomic.Int64
	done             chan struct{} // closed when the loop ended
	mu               sync.Mutex
	firstFail        string
}

// steadyLoad asks names round-robin at about qps until stop is closed or
// limit passes, counting every query that does not give the wanted A.
func steadyLoad(addr string, want map[string]string, qps int, limit time.Duration, stop <-chan struct{}) *loadStats {
	st := &loadStats{done: make(chan struct{})}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	go func() {
		defer close(st.done)
		tick := time.NewTicker(time.Second / time.Duration(qps))
		defer tick.Stop()
		end := time.After(limit)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-end:
				return
			case <-tick.C:
			}
			n := names[i%len(names)]
			st.sent.Add(1)
			got, rc, err := aOf(addr, n, "udp")
			if err == nil && rc == dns.RcodeSuccess && len(got) == 1 && got[0] == want[n] {
				st.ok.Add(1)
				continue
			}
			st.failed.Add(1)
			st.mu.Lock()
			if st.firstFail == "" {
				st.firstFail = fmt.Sprintf("%s: %v %s %v", n, got, dns.RcodeToString[rc], err)
			}
			st.mu.Unlock()
		}
	}()
	return st
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files into a directory.
type testPKI struct {
	dir          string
	serverConfig *tls.Config // the server's certificate, client certificates required
}

func newTestPKI(t testing.TB, dir string) *testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshdns test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost", "server.dc1.consul"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		write(name+".pem", "CERTIFICATE", der)
		write(name+"-key.pem", "EC PRIVATE KEY", kder)
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	server := leaf("server", 2, x509.ExtKeyUsageServerAuth)
	leaf("client", 3, x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{dir: dir, serverConfig: &tls.Config{
		Certificates: []tls.Certificate{server}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
}
