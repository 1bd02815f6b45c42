package endpointsvc

import (
	"context"

	"github.com/coredns/coredns/plugin/pkg/upstream"
	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// chaseKey marks a context that is chasing a CNAME target through the
// server; its value is the number of lookups nested so far.
type chaseKey struct{}

// maxChase bounds how many lookups through the server one reply nests (a
// loop of names pointing at each other through other zones ends there).
const maxChase = 8

// boundedUpstream looks names up through the whole server
// (plugin/pkg/upstream), at most maxChase deep.
type boundedUpstream struct{ u *upstream.Upstream }

func (b boundedUpstream) Lookup(ctx context.Context, state request.Request, name string, typ uint16) (*dns.Msg, error) {
	depth, _ := ctx.Value(chaseKey{}).(int)
	if depth >= maxChase {
		return nil, errTooDeep
	}
	return b.u.Lookup(context.WithValue(ctx, chaseKey{}, depth+1), state, name, typ)
}

type tooDeep struct{}

func (tooDeep) Error() string { return "CNAME chain through the server too deep" }

var errTooDeep error = tooDeep{}
