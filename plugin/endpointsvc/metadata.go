package endpointsvc

import (
	"context"

	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// Metadata implements metadata.Provider for schema kubernetes: with the
// metadata plugin in the server block, the kubernetes plugin's keys
// (kubernetes/namespace, kubernetes/service, kubernetes/client-namespace,
// …; k8sdns.Server.Metadata), from the table served now. The orch schema
// provides none.
func (e *Endpointsvc) Metadata(ctx context.Context, state request.Request) context.Context {
	d, ok := e.schema.(*dnsSchema)
	if !ok {
		return ctx
	}
	var t *k8sdns.Table
	if tb := e.tbl.Load(); tb != nil {
		t, _ = tb.model.(*k8sdns.Table)
	}
	d.srv.Metadata(t, state, func(key, value string) {
		metadata.SetValueFunc(ctx, key, func() string { return value })
	})
	return ctx
}
