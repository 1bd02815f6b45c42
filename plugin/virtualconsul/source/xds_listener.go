package source

import (
	"fmt"
	"strings"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dnsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/udp/dns_filter/v3"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
	"google.golang.org/protobuf/types/known/anypb"
)

// ListenerEntries returns the virtual domains of the inline DNS table of the
// DNS filter of the first listener in resources whose name starts with
// virtual_dns; found is false when no listener is so named. That alone is
// not an empty table (Consul 1.16 pushes no such listener at all): the
// source takes it as one only when the listener was there before
// (withdrawn). A listener with the filter and no names is an empty table. Any resource or filter
// that does not decode is an error (the version is NACKed).
func ListenerEntries(resources []*anypb.Any) (entries []table.Entry, found bool, err error) {
	for _, r := range resources {
		if r.GetTypeUrl() != listenerTypeURL {
			return nil, false, fmt.Errorf("resource of type %q in a listener response", r.GetTypeUrl())
		}
		var l listener.Listener
		if err := r.UnmarshalTo(&l); err != nil {
			return nil, false, fmt.Errorf("listener: %w", err)
		}
		if found || !strings.HasPrefix(l.GetName(), table.VirtualDNSListener) {
			continue // every resource is still checked
		}
		found = true
		if entries, err = dnsFilterEntries(&l); err != nil {
			return nil, false, err
		}
	}
	return entries, found, nil
}

// dnsFilterEntries reads the DNS filter's inline table of listener l.
func dnsFilterEntries(l *listener.Listener) ([]table.Entry, error) {
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
		inline := cfg.GetServerConfig().GetInlineDnsTable()
		if inline == nil {
			return nil, fmt.Errorf("listener %s: DNS filter has no inline_dns_table", l.GetName())
		}
		entries := make([]table.Entry, 0, len(inline.GetVirtualDomains()))
		for _, d := range inline.GetVirtualDomains() {
			entries = append(entries, table.Entry{Name: d.GetName(), Addresses: d.GetEndpoint().GetAddressList().GetAddress()})
		}
		return entries, nil
	}
	return nil, fmt.Errorf("listener %s has no %s filter", l.GetName(), dnsFilterName)
}
