package endpointsvc

import (
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// AutoPath implements CoreDNS's autopath.AutoPather, so that
// `autopath @endpointsvc` works as `autopath @kubernetes` does: with
// schema kubernetes and pods verified, the search path of the client Pod
// that asked (k8sdns.Server.AutoPath), from the table served now - the
// snapshot's while the API server is away. Anything else: nil, no
// autopath.
func (e *Endpointsvc) AutoPath(state request.Request) []string {
	d, ok := e.schema.(*dnsSchema)
	if !ok || !d.srv.PodsVerified {
		return nil
	}
	t := e.tbl.Load()
	if t == nil {
		return nil
	}
	kt, _ := t.model.(*k8sdns.Table)
	return d.srv.AutoPath(kt, state)
}
