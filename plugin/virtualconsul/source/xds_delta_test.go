package source

import (
	"context"
	"net"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// scriptedDelta is a delta ADS server that sends a fixed script of
// responses, each after the client's answer to the previous one, and
// records those answers and the first request's token.
type scriptedDelta struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	script  []*discovery.DeltaDiscoveryResponse
	answers chan *discovery.DeltaDiscoveryRequest
	token   chan string
}

func (s *scriptedDelta) DeltaAggregatedResources(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	s.token <- first(md.Get(tokenHeader))
	req, err := st.Recv()
	if err != nil {
		return err
	}
	if req.GetTypeUrl() != listenerTypeURL || len(req.GetResourceNamesSubscribe()) != 0 || req.GetNode().GetId() != "web-sidecar-proxy" {
		s.answers <- req // the test fails on it
	}
	for _, resp := range s.script {
		if err := st.Send(resp); err != nil {
			return err
		}
		req, err := st.Recv()
		if err != nil {
			return err
		}
		s.answers <- req
	}
	<-st.Context().Done()
	return nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func res(name, version string, r *anypb.Any) *discovery.Resource {
	return &discovery.Resource{Name: name, Version: version, Resource: r}
}

// TestXDSDeltaStream: listeners added, replaced and removed across delta
// responses; the virtual_dns listener removed is an empty table (Consul
// withdraws it when the proxy has no upstream VIPs left), a response that
// still lacks it after that reports no table; an invalid table is NACKed
// and not applied, so the next response is read against the listeners
// held before it; the token goes as x-consul-token.
func TestXDSDeltaStream(t *testing.T) {
	pub, _ := anypb.New(&listener.Listener{Name: "public_listener"})
	v1 := listenerAny(t, "virtual_dns", map[string][]string{webKey: {"240.0.0.1"}})
	v2 := listenerAny(t, "virtual_dns", map[string][]string{webKey: {"240.0.0.2"}})
	bad := noInlineTable(t)
	srv := &scriptedDelta{
		answers: make(chan *discovery.DeltaDiscoveryRequest, 10),
		token:   make(chan string, 1),
		script: []*discovery.DeltaDiscoveryResponse{
			{Nonce: "1", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("public_listener", "a", pub), res("virtual_dns", "1", v1)}},
			{Nonce: "2", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "2", v2)}},
			{Nonce: "3", TypeUrl: listenerTypeURL, RemovedResources: []string{"virtual_dns"}},
			{Nonce: "4", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "3", bad)}},
			{Nonce: "5", TypeUrl: listenerTypeURL, RemovedResources: []string{"public_listener"}},
			{Nonce: "6", TypeUrl: listenerTypeURL, Resources: []*discovery.Resource{res("virtual_dns", "4", v1)}},
		},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go g.Serve(l)
	defer g.Stop()

	t.Setenv("CONSUL_HTTP_TOKEN", "env-token")
	x := &xdsSource{address: l.Addr().String(), node: "web-sidecar-proxy", maxMsg: defaultMaxMessageSize, protocol: protoAuto, using: protoDelta}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan Sync, 10)
	go x.Run(ctx, func(s Sync) { reports <- s })

	if tok := <-srv.token; tok != "env-token" {
		t.Fatalf("x-consul-token = %q, want the environment's", tok)
	}
	want := []struct {
		result, web string // web's VIP in the reported table
		nack        bool
	}{
		{SyncOK, "240.0.0.1", false},
		{SyncOK, "240.0.0.2", false},
		{SyncOK, "", false}, // withdrawn: an empty table
		{SyncRejected, "", true},
		{SyncNoTable, "", false}, // virtual_dns stayed removed (the rejected one was not applied): still no table, not another withdrawal
		{SyncOK, "240.0.0.1", false},
	}
	for i, w := range want {
		var s Sync
		select {
		case s = <-reports:
		case <-time.After(5 * time.Second):
			t.Fatalf("response %d: no report", i+1)
		}
		if s.Result != w.result {
			t.Fatalf("response %d: %s (%v), want %s", i+1, s.Result, s.Err, w.result)
		}
		if w.web != "" {
			if got, _ := s.Table.Lookup(webKey); len(got) != 1 || got[0].String() != w.web {
				t.Fatalf("response %d: web = %v, want %s", i+1, got, w.web)
			}
		} else if s.Result == SyncOK && s.Table.Len() != 0 {
			t.Fatalf("response %d: withdrawn listener left %d names", i+1, s.Table.Len())
		}
		a := <-srv.answers
		if a.GetResponseNonce() != srv.script[i].Nonce || (a.GetErrorDetail() != nil) != w.nack {
			t.Fatalf("response %d answered with nonce %q, error %v", i+1, a.GetResponseNonce(), a.GetErrorDetail())
		}
	}
}

// refusingADS ends every stream at once with a refused token, before
// reading anything, as Consul does for a token it does not know.
type refusingADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
}

func (refusingADS) DeltaAggregatedResources(discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return status.Error(codes.Unauthenticated, "unauthenticated: ACL not found")
}

// TestXDSRefusedStreamStatus: a stream the server ends before reading the
// first request reports the server's status, not the io.EOF its Send got
// (seen once in CI against Consul: the failing line said "EOF").
func TestXDSRefusedStreamStatus(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, refusingADS{})
	go g.Serve(l)
	defer g.Stop()
	x := &xdsSource{address: l.Addr().String(), node: "web-sidecar-proxy", maxMsg: defaultMaxMessageSize, protocol: protoDelta, using: protoDelta}
	for i := range 30 {
		_, err := x.stream(context.Background(), func(Sync) {})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("stream %d: %v, want the server's Unauthenticated", i, err)
		}
	}
}
