package source

import (
	"context"
	"errors"
	"io"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// sotwStream runs one state-of-the-world ADS stream: every listener
// response carries every listener, and is ACKed with its version or NACKed
// with the last version ACKed.
func (x *xdsSource) sotwStream(ctx context.Context, conn *grpc.ClientConn, node *core.Node, report func(Sync)) (got bool, err error) {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: listenerTypeURL, VersionInfo: x.acked}); err != nil {
		return false, sendError(err, func() error { _, err := st.Recv(); return err })
	}
	answers := receive(ctx, st.Recv)
	for {
		resp, err := nextAnswer(ctx, x, answers, report)
		if err != nil {
			return got, err
		}
		if !got {
			got = true
			x.following()
		}
		if resp.GetTypeUrl() != listenerTypeURL {
			continue // not subscribed; nothing to ACK
		}
		nack, err := x.handle(ctx, resp.GetVersionInfo(), resp.GetResources(), report)
		if err != nil {
			return got, err
		}
		ack := &discovery.DiscoveryRequest{Node: node, TypeUrl: listenerTypeURL, ResponseNonce: resp.GetNonce(), VersionInfo: x.acked, ErrorDetail: nack}
		if nack == nil {
			x.acked = resp.GetVersionInfo()
			ack.VersionInfo = x.acked
		}
		if err := st.Send(ack); err != nil {
			return got, sendError(err, func() error { _, err := nextAnswer(ctx, x, answers, report); return err })
		}
	}
}

// sendError is the error of a failed Send on a stream whose Recv is recv.
// A Send that finds the stream ended by the server says only io.EOF; the
// server's status (a refused token, an unimplemented method) is what Recv
// then returns.
func sendError(err error, recv func() error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	if rerr := recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
		return rerr
	}
	return err
}
