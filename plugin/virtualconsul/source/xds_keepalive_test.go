package source

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

func TestXDSKeepaliveOption(t *testing.T) {
	for _, tc := range []struct {
		opt  string
		want time.Duration
		err  string
	}{
		{"", xdsKeepalive, ""},
		{"keepalive 1m", time.Minute, ""},
		{"keepalive 5s", 0, "bad keepalive"},
		{"keepalive 6m", 0, "bad keepalive"},
	} {
		v, err := parse(caddy.NewTestController("dns", "virtualconsul {\n source xds 127.0.0.1:1 {\n "+tc.opt+"\n }\n}"))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.opt, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.opt, err)
		}
		if got := v.src.(*xdsSource).keepalive; got != tc.want {
			t.Errorf("%q: keepalive %v, want %v", tc.opt, got, tc.want)
		}
	}
}

// freezer forwards TCP to a server until frozen, then forwards nothing,
// in either direction: a hung control plane whose connection stays open.
type freezer struct {
	l      net.Listener
	to     string
	frozen atomic.Bool
}

func (f *freezer) serve() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.to)
		if err != nil {
			c.Close()
			continue
		}
		go f.pipe(c, s)
		go f.pipe(s, c)
	}
}

func (f *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for f.frozen.Load() {
			time.Sleep(50 * time.Millisecond) // hold everything, as a stopped process would
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestXDSKeepaliveNoticesHungServer: a control plane that stops answering
// on an open, idle stream is noticed by the keepalive (here its 10s floor:
// within ping + timeout, ~20s), not after minutes.
func TestXDSKeepaliveNoticesHungServer(t *testing.T) {
	t.Parallel() // ~20s of waiting, overlapped with the other tests
	v1 := listenerAny(t, "virtual_dns", map[string][]string{webKey: {"240.0.0.1"}})
	srv := &scriptedDelta{
		answers: make(chan *discovery.DeltaDiscoveryRequest, 10),
		token:   make(chan string, 10),
		script:  []*discovery.DeltaDiscoveryResponse{{Nonce: "1", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "1", v1)}}},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// the server accepts pings as often as Consul's do
	g := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second}))
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go g.Serve(l)
	defer g.Stop()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{l: pl, to: l.Addr().String()}
	go f.serve()
	defer pl.Close()

	x := &xdsSource{address: pl.Addr().String(), node: "web-sidecar-proxy", maxMsg: defaultMaxMessageSize,
		protocol: protoDelta, using: protoDelta, keepalive: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan Sync, 10)
	go x.Run(ctx, func(s Sync) { reports <- s })
	if s := <-reports; s.Result != SyncOK {
		t.Fatalf("first report %+v", s)
	}
	<-srv.answers
	f.frozen.Store(true)
	start := time.Now()
	select {
	case s := <-reports:
		if s.Result != SyncError {
			t.Fatalf("report %+v, want the stream failing", s)
		}
		t.Logf("hung server noticed after %v", time.Since(start).Round(time.Millisecond))
		if d := time.Since(start); d > 25*time.Second {
			t.Fatalf("noticed after %v, want within ~20s", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a hung server went unnoticed for 30s")
	}
}
