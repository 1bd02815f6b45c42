package source

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coredns/caddy"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// xDS names.
const (
	listenerTypeURL  = "type.googleapis.com/envoy.config.listener.v3.Listener"
	dnsFilterTypeURL = "type.googleapis.com/envoy.extensions.filters.udp.dns_filter.v3.DnsFilterConfig"
	dnsFilterName    = "envoy.filters.udp.dns_filter"
	tokenHeader      = "x-consul-token"
)

// Reconnects of the xds source back off from xdsRetryMin up to xdsRetryMax.
const (
	xdsRetryMin = 250 * time.Millisecond
	xdsRetryMax = 10 * time.Second
)

// defaultMaxMessageSize bounds a response the xds source accepts. gRPC's
// own default, 4 MiB, is one listener of ~55,000 names: every update of a
// larger mesh would fail forever. 64 MiB holds ~900,000.
const defaultMaxMessageSize = 64 << 20

// Keepalive of the ADS connection: a ping every xdsKeepalive (Consul's
// servers accept one every 15s), unanswered within xdsPingTimeout breaks
// the stream; a server that refuses pings that often has them doubled up
// to xdsPingMax (gRPC's default policy accepts one every 5 minutes).
const (
	xdsKeepalive   = 15 * time.Second
	xdsPingTimeout = 15 * time.Second
	xdsPingMax     = 5 * time.Minute
)

// The xDS variants: delta (incremental) ADS, which Consul's servers and
// agents serve (hashicorp/consul#9855), and state-of-the-world ADS, which
// they refuse ("not implemented") and some control planes alone offer.
const (
	protoDelta = "delta"
	protoSotW  = "sotw"
	protoAuto  = "auto" // delta, falling back once to sotw when refused
)

func init() { sourceTypes["xds"] = newXDSSource }

// newXDSSource reads
//
//	source xds [ADDRESS] {
//	    node ID
//	    node_name NAME
//	    namespace NAME
//	    partition NAME
//	    cluster NAME
//	    tls CA [CERT KEY]
//	    tls_server_name NAME
//	    token_file PATH
//	    first_response DURATION
//	    max_message_size SIZE
//	    protocol auto|delta|sotw
//	    keepalive DURATION
//	}
//
// ADDRESS defaults to CONSUL_GRPC_ADDR; TLS and the token to the other
// CONSUL_* variables (xds_conn.go).
func newXDSSource(c *caddy.Controller, args []string) (Source, error) {
	addr, https, err := xdsAddress(args)
	if err != nil {
		return nil, err
	}
	x := &xdsSource{address: addr, node: "meshdns", maxMsg: defaultMaxMessageSize, protocol: protoAuto, keepalive: xdsKeepalive, firstResponse: xdsFirstResponse}
	if h, err := os.Hostname(); err == nil && h != "" {
		x.node = h
	}
	tlsOpts := xdsTLS{on: https}
	seen := map[string]bool{}
	err = sourceBlock(c, func(opt string, args []string) error {
		if seen[opt] {
			return c.Errf("source xds: %s given twice", opt)
		}
		seen[opt] = true
		if opt != "tls" && len(args) != 1 {
			return c.ArgErr()
		}
		switch opt {
		case "node":
			x.node = args[0]
		case "node_name", "namespace", "partition":
			if x.meta == nil {
				x.meta = map[string]string{}
			}
			x.meta[opt] = args[0]
		case "cluster":
			x.cluster = args[0]
		case "tls_server_name":
			tlsOpts.serverName = args[0]
		case "first_response":
			d, err := time.ParseDuration(args[0])
			if err != nil || d < time.Second || d > 10*time.Minute {
				return c.Errf("source xds: bad first_response %q: want a duration from 1s to 10m", args[0])
			}
			x.firstResponse = d
		case "token_file":
			x.tokenFile = conf.Path(c, args[0])
		case "max_message_size":
			n, err := conf.ParseSize(args[0])
			if err != nil || n > 1<<31-1 {
				return c.Errf("source xds: bad max_message_size %q: want a size up to 2g, such as 64m", args[0])
			}
			x.maxMsg = int(n)
		case "keepalive":
			d, err := time.ParseDuration(args[0])
			if err != nil || d < 10*time.Second || d > xdsPingMax {
				return c.Errf("source xds: bad keepalive %q: want a duration from 10s (gRPC's floor) to 5m", args[0])
			}
			x.keepalive = d
		case "protocol":
			switch args[0] {
			case protoAuto, protoDelta, protoSotW:
				x.protocol = args[0]
			default:
				return c.Errf("source xds: bad protocol %q: want auto, delta or sotw", args[0])
			}
		case "tls":
			return parseTLS(c, args, &tlsOpts)
		default:
			return c.Errf("source xds: unknown property %q", opt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if x.tls, err = tlsOpts.config(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	x.using = protoDelta
	if x.protocol == protoSotW {
		x.using = protoSotW
	}
	return x, nil
}

// parseTLS reads `tls CA [CERT KEY]` (paths relative to the Corefile's;
// CA a PEM file or a directory of them).
func parseTLS(c *caddy.Controller, args []string, t *xdsTLS) error {
	if len(args) != 1 && len(args) != 3 {
		return c.ArgErr()
	}
	for i := range args {
		args[i] = conf.Path(c, args[i])
	}
	t.on, t.ca = true, args[0]
	if err := addCAs(x509.NewCertPool(), t.ca); err != nil { // checked here for the error's line
		return c.Errf("source xds: tls: %v", err)
	}
	if len(args) == 3 {
		t.cert, t.key = args[1], args[2]
		if _, err := tls.LoadX509KeyPair(t.cert, t.key); err != nil {
			return c.Errf("source xds: tls: %v", err)
		}
	}
	return nil
}

// xdsSource subscribes to listeners over an ADS stream, delta or
// state-of-the-world (xds_delta.go, xds_sotw.go), and takes the inline DNS
// table of the DNS filter of the listener named virtual_dns…. Every good
// response is ACKed; one whose table is invalid is NACKed and the previous
// table keeps serving, as it does when no listener carries a table. A
// broken stream reconnects with a capped exponential backoff.
type xdsSource struct {
	address   string
	node      string            // the proxy's service ID, for Consul
	meta      map[string]string // Node.Metadata: node_name, namespace, partition (Consul's servers find the proxy by them)
	cluster   string
	tls       *tls.Config // nil: plaintext
	tokenFile string      // "" : the environment's, if any
	maxMsg    int
	protocol  string        // protoAuto, protoDelta or protoSotW
	keepalive time.Duration // the keepalive ping interval (keepalive), xdsKeepalive by default
	// firstResponse bounds the wait for a stream's first listener
	// response (0: xdsFirstResponse).
	firstResponse time.Duration

	// Run's goroutine only:
	using     string        // the protocol the next stream speaks
	tokenFrom string        // where the last stream's token came from, for the log
	logged    string        // the protocol last logged as in use
	acked     string        // sotw: the last version ACKed
	nacked    string        // the content last NACKed
	nackDelay time.Duration // how long to hold the next NACK of that content
	last      [32]byte      // hash of the entries of the last table reported
	built     bool
	ping      time.Duration // the ping interval once a server refused keepalive's: 0 for keepalive
	// silent fires when the stream has had no listener response for
	// first_response; nil once one arrived or it fired (xds_conn.go).
	silent <-chan time.Time
	// hadTable: the last listener set applied held a virtual_dns
	// listener, so one without it is a withdrawal (an empty table), not a
	// server that pushes none. Not taken from the snapshot: Consul 1.16
	// never pushes the listener, and a table restored at start-up may come
	// from anywhere.
	hadTable bool
}

func (x *xdsSource) Name() string { return "xds" }

func (x *xdsSource) Key() string { return "xds " + x.address + " " + x.node + " " + x.cluster }

func (x *xdsSource) Run(ctx context.Context, report func(Sync)) {
	var retry time.Duration
	for ctx.Err() == nil {
		got, err := x.stream(ctx, report)
		if ctx.Err() != nil {
			return
		}
		if !got && x.protocol == protoAuto && x.using == protoDelta && refused(err) {
			x.using = protoSotW // once: a server that refuses delta is not asked again
			log.Infof("Source xds: %s refuses delta ADS (%v); falling back to state-of-the-world", x.address, err)
			continue
		}
		if got && tooManyPings(err) && cmp.Or(x.ping, x.keepalive) < xdsPingMax {
			// A server that refuses pings this often (gRPC's default
			// policy: one every 5 minutes) closed a working stream: ping
			// half as often from now on and reconnect at once; not a failure.
			x.ping = min(2*cmp.Or(x.ping, x.keepalive), xdsPingMax)
			log.Warningf("Source xds: %s refuses keepalive pings this often: pinging every %v", x.address, x.ping)
			continue
		}
		report(Sync{Result: SyncError, Reason: reasonOf(err), Err: x.explain(err)})
		if got {
			retry = 0 // the stream worked: start the backoff over
		}
		retry = pause.Double(retry, xdsRetryMin, xdsRetryMax)
		if !pause.Sleep(ctx, retry) {
			return
		}
	}
}

// tooManyPings reports whether err is a stream closed by the server's
// GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
func tooManyPings(err error) bool {
	return err != nil && strings.Contains(err.Error(), "too_many_pings")
}

// refused reports whether err is a server's refusal of the protocol: gRPC's
// Unimplemented, or the Unknown "not implemented" that Consul's xDS server
// answers state-of-the-world with.
func refused(err error) bool {
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unimplemented || (s.Code() == codes.Unknown && strings.Contains(s.Message(), "not implemented")))
}

// explain words a stream's error for the log: a refused token says where
// the token came from.
func (x *xdsSource) explain(err error) error {
	if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
		return fmt.Errorf("xds %s: the server refused the token %s as node %q: %w", x.address, x.tokenFrom, x.node, err)
	}
	return fmt.Errorf("xds %s: %w", x.address, err)
}

// token returns the ACL token a stream sends as x-consul-token: token_file
// (read at every connect, so a rotated token is picked up), else
// CONSUL_GRPC_TOKEN, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE; from says
// which, for the log.
func (x *xdsSource) token() (tok, from string, err error) {
	if x.tokenFile != "" {
		b, err := os.ReadFile(x.tokenFile)
		if err != nil {
			return "", "from token_file", err
		}
		if tok = strings.TrimSpace(string(b)); tok == "" {
			return "", "from token_file", fmt.Errorf("token_file %s is empty", x.tokenFile)
		}
		return tok, "from token_file " + x.tokenFile, nil
	}
	for _, env := range []string{"CONSUL_GRPC_TOKEN", "CONSUL_HTTP_TOKEN"} {
		if tok = os.Getenv(env); tok != "" {
			return tok, "from " + env, nil
		}
	}
	if f := os.Getenv("CONSUL_HTTP_TOKEN_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", "from CONSUL_HTTP_TOKEN_FILE", err
		}
		return strings.TrimSpace(string(b)), "from CONSUL_HTTP_TOKEN_FILE " + f, nil
	}
	return "", "(none given)", nil
}

// stream runs one ADS stream until it breaks; got says whether any
// response arrived on it.
func (x *xdsSource) stream(ctx context.Context, report func(Sync)) (got bool, err error) {
	tok, from, err := x.token()
	if err != nil {
		return false, err
	}
	x.tokenFrom = from
	creds := insecure.NewCredentials()
	var hs *handshakes
	if x.tls != nil {
		hs = newHandshakes(x.tls)
		creds = hs
	}
	// Keepalive pings find a hung control plane: a ping unanswered within
	// ping+min(ping, 15s) breaks the stream (30s by default, as often as
	// Consul's servers accept pings: every 15s).
	ping := cmp.Or(x.ping, x.keepalive)
	conn, err := grpc.NewClient(x.address, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.maxMsg)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ping, Timeout: min(ping, xdsPingTimeout)}))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	x.silent = time.After(cmp.Or(x.firstResponse, xdsFirstResponse))
	if tok != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, tokenHeader, tok)
	}
	node := &core.Node{Id: x.node, Cluster: x.cluster, UserAgentName: "meshdns", Metadata: x.metadata()}
	if x.using == protoDelta {
		got, err = x.deltaStream(sctx, conn, node, report)
	} else {
		got, err = x.sotwStream(sctx, conn, node, report)
	}
	return got, classify(err, hs)
}

// metadata returns the Node.Metadata of the proxy's identity, nil when
// the Corefile gives none.
func (x *xdsSource) metadata() *structpb.Struct {
	if len(x.meta) == 0 {
		return nil
	}
	f := make(map[string]*structpb.Value, len(x.meta))
	for k, v := range x.meta {
		f[k] = structpb.NewStringValue(v)
	}
	return &structpb.Struct{Fields: f}
}

// following logs, once per change, the protocol a working stream speaks.
func (x *xdsSource) following() {
	if x.logged != x.using {
		x.logged = x.using
		name := "delta ADS"
		if x.using == protoSotW {
			name = "state-of-the-world ADS"
		}
		log.Infof("Source xds: following %s over %s as node %q", x.address, name, x.node)
	}
}

// handle reports the table of one response's listeners and returns the
// NACK's error detail, or nil to ACK. key names the response's content, so
// that a NACKed content sent again at once (as a control plane answers a
// NACK) is held (1 s, doubling up to xdsRetryMax) and reported only once.
func (x *xdsSource) handle(ctx context.Context, key string, resources []*anypb.Any, report func(Sync)) (*rpcstatus.Status, error) {
	x.silent = nil
	s := x.table(resources)
	if s.Result != SyncRejected {
		x.nacked = ""
		report(s)
		return nil, nil
	}
	detail := &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: s.Err.Error()}
	s.Err = fmt.Errorf("xds %s: version %q NACKed: %w", x.address, key, s.Err)
	if key == x.nacked {
		if !pause.Sleep(ctx, x.nackDelay) {
			return nil, ctx.Err()
		}
		x.nackDelay = min(2*x.nackDelay, xdsRetryMax)
	} else {
		x.nacked, x.nackDelay = key, time.Second
		report(s)
	}
	return detail, nil
}

// table builds the table of one response's listeners.
func (x *xdsSource) table(resources []*anypb.Any) Sync {
	entries, found, err := ListenerEntries(resources)
	if err != nil {
		return Sync{Result: SyncRejected, Err: err}
	}
	switch {
	case found:
		x.hadTable = true
	case x.hadTable:
		// Withdrawn: Consul removes the listener when the proxy has no
		// upstream VIPs left. An empty table (the empty-sync rule keeps
		// the snapshot for empty_grace).
		x.hadTable = false
		log.Infof("Source xds: %s withdrew the %s… listener: its names are gone", x.address, table.VirtualDNSListener)
	default:
		return Sync{Result: SyncNoTable, Err: fmt.Errorf("xds %s: none of the %d listeners is named %s…: no table to follow (Consul before 1.17 pushes none)",
			x.address, len(resources), table.VirtualDNSListener)}
	}
	// Only a structurally invalid response is NACKed (above); entries DNS
	// cannot ask for are left out and counted.
	entries, skipped := table.Usable(entries)
	h := sha256.New()
	fmt.Fprintf(h, "skipped %d %d %d\n", skipped[table.SkipName], skipped[table.SkipAddress], skipped[table.SkipNoAddress]) // a change shows in entries_skipped
	for _, e := range entries {
		fmt.Fprintf(h, "%s %s\n", e.Name, strings.Join(e.Addresses, ","))
	}
	sum := sumOf(h)
	if x.built && sum == x.last {
		return Sync{Result: SyncUnchanged}
	}
	t, err := table.Build(entries)
	if err != nil {
		return Sync{Result: SyncRejected, Err: err}
	}
	x.last, x.built = sum, true
	return Sync{Result: SyncOK, Table: t, Skipped: skipped}
}
