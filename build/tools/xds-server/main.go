// Command xds-server is a minimal go-control-plane ADS server for the
// virtualconsul outage drill (build/drill-virtualconsul.sh): it serves one
// node a virtual_dns listener whose DNS filter holds the table of a JSON file
// (an Envoy virtual_domains array), version 1 at start and one more on each
// SIGHUP (the file re-read).
//
//	xds-server -addr 127.0.0.1:18000 -node sidecar-1 -table table.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dnstable "github.com/envoyproxy/go-control-plane/envoy/data/dns/v3"
	dnsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/udp/dns_filter/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

type domain struct {
	Name     string `json:"name"`
	Endpoint struct {
		AddressList struct {
			Address []string `json:"address"`
		} `json:"address_list"`
	} `json:"endpoint"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18000", "listen address")
	node := flag.String("node", "sidecar-1", "the Node.Id served")
	table := flag.String("table", "table.json", "virtual_domains JSON file")
	flag.Parse()
	snaps := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	version := 0
	publish := func() {
		version++
		if err := set(snaps, *node, strconv.Itoa(version), *table); err != nil {
			log.Fatalf("version %d: %v", version, err)
		}
		log.Printf("published version %d of %s", version, *table)
	}
	publish()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, xdsserver.NewServer(context.Background(), snaps, nil))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			publish()
		}
	}()
	log.Fatal(g.Serve(l))
}

func set(snaps cache.SnapshotCache, node, version, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var ds []domain
	if err := json.Unmarshal(b, &ds); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var vds []*dnstable.DnsTable_DnsVirtualDomain
	for _, d := range ds {
		vds = append(vds, &dnstable.DnsTable_DnsVirtualDomain{Name: d.Name, Endpoint: &dnstable.DnsTable_DnsEndpoint{
			EndpointConfig: &dnstable.DnsTable_DnsEndpoint_AddressList{AddressList: &dnstable.DnsTable_AddressList{Address: d.Endpoint.AddressList.Address}}}})
	}
	cfg, err := anypb.New(&dnsfilter.DnsFilterConfig{StatPrefix: "virtual_dns", ServerConfig: &dnsfilter.DnsFilterConfig_ServerContextConfig{
		ConfigSource: &dnsfilter.DnsFilterConfig_ServerContextConfig_InlineDnsTable{InlineDnsTable: &dnstable.DnsTable{VirtualDomains: vds}}}})
	if err != nil {
		return err
	}
	l := &listener.Listener{Name: "virtual_dns:127.0.0.1:8653", ListenerFilters: []*listener.ListenerFilter{{
		Name: "envoy.filters.udp.dns_filter", ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: cfg}}}}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ListenerType: {l}})
	if err != nil {
		return err
	}
	return snaps.SetSnapshot(context.Background(), node, snap)
}
