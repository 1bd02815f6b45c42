package source

import (
	"context"
	"maps"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// deltaStream runs one delta (incremental) ADS stream: a wildcard
// subscription to listeners (the first request names none), each response
// adding or replacing some listeners and removing others. The listeners
// held are those of this stream only: a new stream starts from nothing, and
// the server's first response sends every listener. A response whose
// listeners do not decode or whose table is invalid is NACKed and not
// applied.
func (x *xdsSource) deltaStream(ctx context.Context, conn *grpc.ClientConn, node *core.Node, report func(Sync)) (got bool, err error) {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: listenerTypeURL}); err != nil {
		return false, sendError(err, func() error { _, err := st.Recv(); return err })
	}
	held := map[string]*discovery.Resource{}
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
		next := maps.Clone(held)
		for _, r := range resp.GetResources() {
			if r.GetResource() == nil {
				delete(next, r.GetName()) // "does not exist", for a name asked for
				continue
			}
			next[r.GetName()] = r
		}
		for _, name := range resp.GetRemovedResources() {
			delete(next, name)
		}
		key, resources := deltaContent(next)
		nack, err := x.handle(ctx, key, resources, report)
		if err != nil {
			return got, err
		}
		if nack == nil {
			held = next
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: listenerTypeURL, ResponseNonce: resp.GetNonce(), ErrorDetail: nack}); err != nil {
			return got, sendError(err, func() error { _, err := nextAnswer(ctx, x, answers, report); return err })
		}
	}
}

// deltaContent returns the listeners held, in name order (so the same set
// always yields the same table), and a key naming them with their versions.
func deltaContent(held map[string]*discovery.Resource) (string, []*anypb.Any) {
	names := slices.Sorted(maps.Keys(held))
	var key strings.Builder
	resources := make([]*anypb.Any, 0, len(names))
	for i, n := range names {
		if i > 0 {
			key.WriteByte(' ')
		}
		key.WriteString(n + "@" + held[n].GetVersion())
		resources = append(resources, held[n].GetResource())
	}
	return key.String(), resources
}
