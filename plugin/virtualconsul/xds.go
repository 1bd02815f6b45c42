package virtualconsul

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coredns/caddy"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dnsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/udp/dns_filter/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// xDS names.
const (
	listenerTypeURL    = "type.googleapis.com/envoy.config.listener.v3.Listener"
	dnsFilterTypeURL   = "type.googleapis.com/envoy.extensions.filters.udp.dns_filter.v3.DnsFilterConfig"
	dnsFilterName      = "envoy.filters.udp.dns_filter"
	virtualDNSListener = "virtual_dns" // the prefix of the listener's name
)

// Reconnects of the xds source back off from xdsRetryMin up to xdsRetryMax.
const (
	xdsRetryMin = 250 * time.Millisecond
	xdsRetryMax = 10 * time.Second
)

func init() { sourceTypes["xds"] = newXDSSource }

// newXDSSource reads
//
//	source xds ADDRESS {
//	    node ID
//	    cluster NAME
//	    tls CA CERT KEY
//	}
func newXDSSource(c *caddy.Controller, args []string) (source, error) {
	if len(args) != 1 {
		return nil, errors.New("want ADDRESS")
	}
	x := &xdsSource{address: args[0], node: "meshdns"}
	if h, err := os.Hostname(); err == nil && h != "" {
		x.node = h
	}
	seen := map[string]bool{}
	err := sourceBlock(c, func(opt string, args []string) error {
		if seen[opt] {
			return c.Errf("source xds: %s given twice", opt)
		}
		seen[opt] = true
		switch opt {
		case "node", "cluster":
			if len(args) != 1 {
				return c.ArgErr()
			}
			if opt == "node" {
				x.node = args[0]
			} else {
				x.cluster = args[0]
			}
		case "tls":
			if len(args) != 3 {
				return c.ArgErr()
			}
			for i := range args {
				args[i] = conf.Path(c, args[i])
			}
			cfg, err := loadClientTLS(args[0], args[1], args[2])
			if err != nil {
				return c.Errf("source xds: tls: %v", err)
			}
			x.tls = cfg
		default:
			return c.Errf("source xds: unknown property %q", opt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// loadClientTLS reads a CA bundle and a client key pair.
func loadClientTLS(ca, cert, key string) (*tls.Config, error) {
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", ca)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// xdsSource subscribes to listeners over an ADS stream and takes the inline
// DNS table of the DNS filter of the listener named virtual_dns…. Every good
// version is ACKed; a version whose table is invalid is NACKed and the
// previous table keeps serving. A broken stream reconnects with a capped
// exponential backoff.
type xdsSource struct {
	address string
	node    string
	cluster string
	tls     *tls.Config // nil: plaintext

	// Run's goroutine only:
	acked     string        // the last version ACKed
	nacked    string        // the last version NACKed
	nackDelay time.Duration // how long to hold the next NACK of that version
	last      [32]byte      // hash of the entries of the last table reported
	built     bool
}

func (x *xdsSource) Name() string { return "xds" }

func (x *xdsSource) Run(ctx context.Context, report func(Sync)) {
	var retry time.Duration
	for ctx.Err() == nil {
		got, err := x.stream(ctx, report)
		if ctx.Err() != nil {
			return
		}
		report(Sync{Result: SyncError, Err: fmt.Errorf("xds %s: %w", x.address, err)})
		if got {
			retry = 0 // the stream worked: start the backoff over
		}
		retry = pause.Double(retry, xdsRetryMin, xdsRetryMax)
		if !pause.Sleep(ctx, retry) {
			return
		}
	}
}

// stream runs one ADS stream until it breaks; got says whether any
// response arrived on it.
func (x *xdsSource) stream(ctx context.Context, report func(Sync)) (got bool, err error) {
	creds := insecure.NewCredentials()
	if x.tls != nil {
		creds = credentials.NewTLS(x.tls)
	}
	// Keepalive pings find a hung control plane; 5 minutes is as often as
	// a gRPC server allows by default.
	conn, err := grpc.NewClient(x.address, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second}))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	node := &core.Node{Id: x.node, Cluster: x.cluster, UserAgentName: "meshdns"}
	req := &discovery.DiscoveryRequest{Node: node, TypeUrl: listenerTypeURL, VersionInfo: x.acked}
	if err := st.Send(req); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		if resp.GetTypeUrl() != listenerTypeURL {
			continue // not subscribed; nothing to ACK
		}
		s := x.table(resp.GetResources())
		ack := &discovery.DiscoveryRequest{Node: node, TypeUrl: listenerTypeURL, ResponseNonce: resp.GetNonce()}
		if s.Result == SyncRejected {
			ack.VersionInfo = x.acked
			ack.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: s.Err.Error()}
			s.Err = fmt.Errorf("xds %s: version %q NACKed: %w", x.address, resp.GetVersionInfo(), s.Err)
			if resp.GetVersionInfo() == x.nacked {
				// A control plane answers a NACK by sending the same version
				// again at once: hold each repeated NACK (1s, doubling up to
				// xdsRetryMax, 10s) instead of spinning, and report it only once.
				if !pause.Sleep(ctx, x.nackDelay) {
					return got, ctx.Err()
				}
				x.nackDelay = min(2*x.nackDelay, xdsRetryMax)
			} else {
				x.nacked, x.nackDelay = resp.GetVersionInfo(), time.Second
				report(s)
			}
		} else {
			x.acked, x.nacked = resp.GetVersionInfo(), ""
			ack.VersionInfo = x.acked
			report(s)
		}
		if err := st.Send(ack); err != nil {
			return got, err
		}
	}
}

// table builds the table of one listener response.
func (x *xdsSource) table(resources []*anypb.Any) Sync {
	entries, err := ListenerEntries(resources)
	if err != nil {
		return Sync{Result: SyncRejected, Err: err}
	}
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s %s\n", e.Name, strings.Join(e.Addresses, ","))
	}
	sum := sumOf(h)
	if x.built && sum == x.last {
		return Sync{Result: SyncUnchanged}
	}
	t, err := Build(entries)
	if err != nil {
		return Sync{Result: SyncRejected, Err: err}
	}
	x.last, x.built = sum, true
	return Sync{Result: SyncOK, Table: t}
}

// ListenerEntries returns the virtual domains of the inline DNS table of the
// DNS filter of the first listener in resources whose name starts with
// virtual_dns. No such listener is an empty table (the control plane
// removed it); a listener or filter that does not decode is an error.
func ListenerEntries(resources []*anypb.Any) ([]Entry, error) {
	for _, r := range resources {
		if r.GetTypeUrl() != listenerTypeURL {
			return nil, fmt.Errorf("resource of type %q in a listener response", r.GetTypeUrl())
		}
		var l listener.Listener
		if err := r.UnmarshalTo(&l); err != nil {
			return nil, fmt.Errorf("listener: %w", err)
		}
		if !strings.HasPrefix(l.GetName(), virtualDNSListener) {
			continue
		}
		return dnsFilterEntries(&l)
	}
	return nil, nil
}

// dnsFilterEntries reads the DNS filter's inline table of listener l.
func dnsFilterEntries(l *listener.Listener) ([]Entry, error) {
	for _, f := range l.GetListenerFilters() {
		tc := f.GetTypedConfig()
		if f.GetName() != dnsFilterName && tc.GetTypeUrl() != dnsFilterTypeURL {
			continue
		}
		if tc == nil {
			return nil, fmt.Errorf("listener %s: DNS filter without typed_config", l.GetName())
		}
		var cfg dnsfilter.DnsFilterConfig
		if err := tc.UnmarshalTo(&cfg); err != nil {
			return nil, fmt.Errorf("listener %s: DNS filter: %w", l.GetName(), err)
		}
		table := cfg.GetServerConfig().GetInlineDnsTable()
		if table == nil {
			return nil, fmt.Errorf("listener %s: DNS filter has no inline_dns_table", l.GetName())
		}
		entries := make([]Entry, 0, len(table.GetVirtualDomains()))
		for _, d := range table.GetVirtualDomains() {
			entries = append(entries, Entry{Name: d.GetName(), Addresses: d.GetEndpoint().GetAddressList().GetAddress()})
		}
		return entries, nil
	}
	return nil, fmt.Errorf("listener %s has no %s filter", l.GetName(), dnsFilterName)
}
