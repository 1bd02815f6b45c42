package source

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// The catalog entries that carry virtual IPs in Consul v1.16.3
// (agent/consul/state/catalog.go, ensureServiceTxn): a connect proxy's
// entry holds its destination service's VIP and a Connect-native
// service's entry its own, both as the consul-virtual tagged address; a
// terminating gateway's entries hold the VIP of every service linked to it
// by its config entry, as consul-virtual:<service> tagged addresses.
const (
	kindProxy       = "connect-proxy"
	kindTermGateway = "terminating-gateway"
	// consulKindsFilter selects the catalog services that carry virtual
	// IPs, for the list query (a bexpr filter over service nodes).
	consulKindsFilter = `ServiceKind == "` + kindProxy + `" or ServiceKind == "` + kindTermGateway + `" or ServiceConnect.Native == true`
)

// Reasons a consul round fails (the reason label of source_failing_reason).
const (
	reasonACLFiltered = "acl_filtered" // the token hides part of the catalog
	reasonNoLeader    = "no_leader"    // the servers answering know no leader
)

// catalogEntry is the part of a catalog entry (/v1/catalog/service/NAME)
// the source uses; the api package's CatalogService lacks the kind and
// the Connect-native flag.
type catalogEntry struct {
	Datacenter             string
	ServiceName            string
	ServiceKind            string
	ServiceConnect         *struct{ Native bool }
	ServiceProxy           *struct{ DestinationServiceName, DestinationServiceID string }
	ServiceTaggedAddresses map[string]api.ServiceAddress
	Namespace, Partition   string
}

// consulReaders is how many proxies a round reads at once.
const consulReaders = 8

// read reads the catalog entries of the services names, consulReaders at a
// time, and returns their VIP entries.
func (s *consulSource) read(ctx context.Context, raw *api.Raw, names []string) (map[string]proxyEntries, error) {
	results := make([]proxyEntries, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	// The first error ends the round: the reads not yet sent are not sent
	// (a 429 or a lost leader must not cost every read of the round).
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err })
		stop()
	}
	for w := 0; w < min(consulReaders, len(names)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var svcs []*catalogEntry
				meta, err := raw.Query("/v1/catalog/service/"+url.PathEscape(names[i]), &svcs, s.query(ctx))
				if err == nil {
					err = trusted(meta)
				}
				if err != nil {
					fail(fmt.Errorf("catalog service %s: %w", names[i], err))
					continue
				}
				results[i] = s.entries(svcs)
				for _, e := range svcs {
					if e.ServiceKind == kindTermGateway {
						if err := s.linkedOnly(ctx, raw, e, &results[i]); err != nil {
							fail(err)
						}
						break
					}
				}
			}
		}()
	}
	for i := range names {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]proxyEntries, len(names))
	for i, n := range names {
		out[n] = results[i]
	}
	return out, nil
}

// linkedOnly keeps, of a terminating gateway's entries, those of the
// services its config entry links now (/v1/catalog/gateway-services): the
// gateway's tagged addresses may still hold services unlinked since (the
// agent's anti-entropy writes them back), whose VIPs Consul may have freed.
// It asks in the gateway's own namespace and partition (not ns=*).
func (s *consulSource) linkedOnly(ctx context.Context, raw *api.Raw, e *catalogEntry, p *proxyEntries) error {
	gw := e.ServiceName
	q := s.query(ctx)
	q.Namespace, q.Partition = e.Namespace, e.Partition
	var links []struct{ Service struct{ Name string } }
	meta, err := raw.Query("/v1/catalog/gateway-services/"+url.PathEscape(gw), &links, q)
	if err == nil {
		err = trusted(meta)
	}
	if err != nil {
		return fmt.Errorf("gateway services of %s: %w", gw, err)
	}
	linked := make(map[string]bool, len(links))
	for _, l := range links {
		linked[strings.ToLower(l.Service.Name)] = true
	}
	kept := p.entries[:0]
	for _, e := range p.entries {
		if linked[e.Name[:strings.IndexByte(e.Name, '.')]] {
			kept = append(kept, e)
		}
	}
	p.entries = kept
	return nil
}

// failure is a round's error with the reason the gauge shows.
type failure struct {
	reason string
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// reasonOf returns the reason label of a round's error.
func reasonOf(err error) string {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return SyncError
}

// trusted says why an answer cannot be believed whole: the token lost
// sight of part of the catalog (X-Consul-Results-Filtered-By-ACLs), which
// would serve a table missing those services, or the servers know no
// leader (KnownLeader false), whose stale data may be arbitrarily old.
func trusted(meta *api.QueryMeta) error {
	switch {
	case meta == nil:
		return nil
	case meta.ResultsFilteredByACLs:
		return &failure{reasonACLFiltered, errors.New("the ACL token filtered the results (X-Consul-Results-Filtered-By-ACLs): the token needs read on every service and node")}
	case !meta.KnownLeader:
		return &failure{reasonNoLeader, errors.New("the servers know no leader (X-Consul-KnownLeader: false)")}
	}
	return nil
}

// filter selects the services of the catalog the source reads: every
// connect proxy, Connect-native service and terminating gateway, or with
// upstreams only the proxies and native services of those (and every
// terminating gateway, whose linked services are picked after the read).
func (s *consulSource) filter() string {
	if s.upstreams == nil {
		return consulKindsFilter
	}
	var dests, natives []string
	for u := range s.upstreams { // names are [a-z0-9_-]: nothing to escape in a regexp
		// Consul keeps a service name's letter case and its filter
		// compares names as they are; upstreams holds them lowercased.
		dests = append(dests, `ServiceProxy.DestinationServiceName matches "(?i)^`+u+`$"`)
		natives = append(natives, `ServiceName matches "(?i)^`+u+`$"`)
	}
	sort.Strings(dests)
	sort.Strings(natives)
	return `(ServiceKind == "` + kindProxy + `" and (` + strings.Join(dests, " or ") + `))` +
		` or (ServiceConnect.Native == true and (` + strings.Join(natives, " or ") + `))` +
		` or ServiceKind == "` + kindTermGateway + `"`
}

// entries returns the VIP entries of one service's catalog entries. An
// entry is pending when one of them should carry a VIP and has none (yet),
// or when the service listed has no entry at all (a stale read during a
// deregistration and registration: read it again, never cache "none").
func (s *consulSource) entries(svcs []*catalogEntry) (p proxyEntries) {
	if len(svcs) == 0 {
		p.pending = true
		return p
	}
	for _, e := range svcs {
		if p.dc == "" {
			p.dc = strings.ToLower(e.Datacenter)
		}
		switch {
		case e.ServiceKind == kindProxy && e.ServiceProxy != nil:
			n := len(p.entries)
			a := e.ServiceTaggedAddresses[consulVirtualTag]
			p.add(s, e, e.ServiceProxy.DestinationServiceName, a, true)
			if len(p.entries) > n && e.ServiceProxy.DestinationServiceID != "" {
				p.watch = append(p.watch, p.entries[n].Name) // fronts an instance of its destination
			}
		case e.ServiceKind == kindTermGateway:
			p.gateway = true
			for key, a := range e.ServiceTaggedAddresses {
				if linked, ok := strings.CutPrefix(key, consulVirtualTag+":"); ok {
					// CE writes the service's name; keep only the name of
					// a namespaced form (ns/name).
					n := len(p.entries)
					p.add(s, e, linked[strings.LastIndexByte(linked, '/')+1:], a, false)
					for _, x := range p.entries[n:] {
						p.watch = append(p.watch, x.Name)
					}
				}
			}
		case e.ServiceKind == "" && e.ServiceConnect != nil && e.ServiceConnect.Native:
			n := len(p.entries)
			a := e.ServiceTaggedAddresses[consulVirtualTag]
			p.add(s, e, e.ServiceName, a, true)
			for _, x := range p.entries[n:] {
				p.watch = append(p.watch, x.Name) // an instance of its own service
			}
		}
	}
	return p
}

// add adds the entry of service svc with VIP a, found on catalog entry e;
// want says whether e should carry it (a missing VIP is then pending).
func (p *proxyEntries) add(s *consulSource, e *catalogEntry, svc string, a api.ServiceAddress, want bool) {
	svc = strings.ToLower(svc)
	if s.upstreams != nil && !s.upstreams[svc] {
		return
	}
	if !table.ValidIdentity(svc) {
		p.skipped++ // a service name DNS cannot ask for as one label (Consul allows a few, "a.b" among them)
		return
	}
	if a.Address == "" {
		p.pending = p.pending || want
		return
	}
	ns, ap, edc := strings.ToLower(e.Namespace), strings.ToLower(e.Partition), strings.ToLower(e.Datacenter)
	if ns == "" {
		ns = table.DefaultNamespace
	}
	if ap == "" {
		ap = table.DefaultPartition
	}
	if edc == "" {
		edc = table.DefaultDatacenter // Consul fills it in every catalog entry
	}
	name := svc + ".virtual." + ns + ".ns." + ap + ".ap." + edc + ".dc.consul"
	if _, err := table.CanonicalName(name); err != nil {
		p.skipped++ // a namespace, partition or datacenter DNS cannot ask for
		return
	}
	for _, x := range p.entries {
		if x.Name == name && x.Addresses[0] == a.Address {
			return // another instance of the same service: the same entry
		}
	}
	p.entries = append(p.entries, table.Entry{Name: name, Addresses: []string{a.Address}})
}

// token returns the ACL token of this round: token_file, else
// CONSUL_HTTP_TOKEN_FILE, read again every round (a rotated token is used
// at once, not after the next failure); "" leaves the client's own
// (CONSUL_HTTP_TOKEN).
func (s *consulSource) token() (string, error) {
	path := s.tokenFile
	if path == "" {
		path = os.Getenv(api.HTTPTokenFileEnvName)
	}
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// agentDatacenter asks the agent its own datacenter (/v1/agent/self,
// Config.Datacenter), once per client. A token without agent:read is
// refused it (any HTTP error status): then the datacenter comes from the
// catalog entries, which the agent's servers fill with their own.
func (s *consulSource) agentDatacenter(ctx context.Context, client *api.Client) error {
	if s.selfAsked {
		return nil
	}
	var self struct{ Config struct{ Datacenter string } }
	_, err := client.Raw().Query("/v1/agent/self", &self, (&api.QueryOptions{Token: s.tok}).WithContext(ctx))
	var se api.StatusError
	switch {
	case errors.As(err, &se): // 403: no agent:read
		s.dc = ""
	case err != nil:
		return fmt.Errorf("agent self: %w", err)
	default:
		s.dc = strings.ToLower(self.Config.Datacenter)
		if s.dc != "" && !table.ValidIdentity(s.dc) {
			s.dc = ""
		}
	}
	s.selfAsked = true
	return nil
}
