package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"
	"github.com/hashicorp/consul/api"

	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// Timing of the consul source.
const (
	consulWait = 5 * time.Minute // blocking query wait
	// consulPendingWait bounds the wait while some proxy has no VIP yet:
	// Consul reads the VIP from its virtual-IP table, which it may fill after
	// the proxy registered (e.g. once a leader enabled virtual IPs), and
	// that change does not move the services index the query blocks on.
	// It doubles with every round that still finds one (up to
	// consulPendingMax), so a proxy that never gets a VIP (virtual IPs off
	// on the servers) costs a catalog read every half minute, not every
	// second.
	consulPendingWait = time.Second
	consulPendingMax  = 30 * time.Second
	consulMinGap      = 500 * time.Millisecond // at most two catalog rounds a second
	// While a blocking query waits, the agent is asked for its version every
	// consulProbeEvery; no answer within consulProbeTimeout means it hangs
	// (a stopped process, a wedged host): the query is abandoned and the
	// source reports failing, rather than waiting out the 5-minute query.
	consulProbeEvery   = 10 * time.Second
	consulProbeTimeout = 3 * time.Second
	// Retries back off from consulRetryMin to consulRetryMax, each wait
	// jittered (pause.Jitter: the first in [0.5 s, 2 s)), so the nodes of
	// a fleet that failed at once do not ask again at once.
	consulRetryMin = time.Second
	consulRetryMax = 10 * time.Second
	// consulWakeSpread spreads the requests that follow a blocking query
	// woken by a change (every node's query returns at the same instant).
	consulWakeSpread = 500 * time.Millisecond
)

// consulVirtualTag is the tagged address that holds a service's VIP.
const consulVirtualTag = "consul-virtual"

func init() { sourceTypes["consul"] = newConsulSource }

// newConsulSource reads
//
//	source consul [ADDRESS] {
//	    token_file PATH
//	    tls CA [CERT KEY]
//	    tls_server_name NAME
//	    upstreams SERVICE...
//	}
//
// ADDRESS defaults to CONSUL_HTTP_ADDR, then 127.0.0.1:8500; the token to
// token_file, then CONSUL_HTTP_TOKEN(_FILE); what the Corefile does not
// say of TLS to the consul/api client's CONSUL_* variables (CONSUL_CACERT,
// CONSUL_CAPATH, CONSUL_CLIENT_CERT/_KEY, CONSUL_TLS_SERVER_NAME,
// CONSUL_HTTP_SSL_VERIFY, CONSUL_HTTP_SSL).
func newConsulSource(c *caddy.Controller, args []string) (Source, error) {
	if len(args) > 1 {
		return nil, errors.New("want [ADDRESS]")
	}
	s := &consulSource{}
	if len(args) == 1 {
		s.address = args[0]
	}
	seen := map[string]bool{}
	err := sourceBlock(c, func(opt string, args []string) error {
		if seen[opt] {
			return c.Errf("source consul: %s given twice", opt)
		}
		seen[opt] = true
		switch opt {
		case "token_file":
			if len(args) != 1 {
				return c.ArgErr()
			}
			s.tokenFile = conf.Path(c, args[0])
		case "tls":
			if len(args) != 1 && len(args) != 3 {
				return c.ArgErr()
			}
			for i, p := range args {
				args[i] = conf.Path(c, p)
				if _, err := os.Stat(args[i]); err != nil {
					return c.Errf("source consul: tls: %v", err)
				}
			}
			s.tls = &api.TLSConfig{CAFile: args[0]}
			if fi, _ := os.Stat(args[0]); fi.IsDir() {
				s.tls.CAFile, s.tls.CAPath = "", args[0]
			}
			if len(args) == 3 {
				s.tls.CertFile, s.tls.KeyFile = args[1], args[2]
			}
		case "tls_server_name":
			if len(args) != 1 {
				return c.ArgErr()
			}
			s.serverName = args[0]
		case "upstreams":
			if len(args) == 0 {
				return c.ArgErr()
			}
			s.upstreams = map[string]bool{}
			for _, u := range args {
				if !table.ValidIdentity(strings.ToLower(u)) {
					return c.Errf("source consul: upstreams: invalid service name %q", u)
				}
				s.upstreams[strings.ToLower(u)] = true
			}
		default:
			return c.Errf("source consul: unknown property %q", opt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// sourceBlock reads the optional { ... } block that follows a source's
// arguments on its line, calling opt for each line in it.
func sourceBlock(c *caddy.Controller, opt func(name string, args []string) error) error {
	if !c.NextArg() { // RemainingArgs stopped before a "{" or at the line's end
		return nil
	}
	if c.Val() != "{" {
		return c.SyntaxErr("{")
	}
	for c.Next() {
		if c.Val() == "}" {
			return nil
		}
		name := c.Val()
		if err := opt(name, c.RemainingArgs()); err != nil {
			return err
		}
	}
	return c.EOFErr()
}

// consulSource follows the Consul catalog through the local agent: one
// blocking query on the list of connect proxies, and a read of each proxy
// only when it is new to the list or still lacks its VIP, all stale (any
// server answers; never a leader's read). The agent's cache (?cached) is
// not used: Consul 1.16.3's agent kept serving a cached list that missed
// registrations and deregistrations, and answered a blocking query on it at
// once with the old index. A proxy's VIP is its destination's, which Consul keeps for
// as long as the service exists, so a list that changed in another way (an
// instance more or less, a service without a proxy) costs no read at all:
// the work per change does not grow with the mesh. After a failed round
// every proxy is read again. Rounds are at least consulMinGap apart and
// errors back off, so a flapping catalog or a dead agent is never polled
// busily.
type consulSource struct {
	address    string // "" for CONSUL_HTTP_ADDR or the default
	tokenFile  string
	tls        *api.TLSConfig  // the tls line: CA (file or path), optionally a client pair
	serverName string          // tls_server_name
	upstreams  map[string]bool // nil: every service

	// Run's goroutine only:
	known map[string]proxyEntries // the proxies of the last round, by service name
	last  [32]byte                // hash of the entries of the last table reported
	built bool
	// pending: the last round saw a proxy without its VIP, so the next
	// round waits at most pendingWait (consulPendingWait, doubling while
	// it stays pending) and reads those proxies again even when the list's
	// index did not move.
	pending     bool
	pendingWait time.Duration
	// noNS: the agent is Consul CE, which refuses ns=*: ask for the
	// default namespace only.
	noNS bool
	tok  string // this round's token (token_file, read every round); "" for the client's
	// dc is the agent's datacenter (/v1/agent/self), "" when it is not
	// known: then the catalog entries' is used. selfAsked: asked of this
	// client already.
	dc        string
	selfAsked bool
	// prev: the entries of the last round, by name, with those kept
	// although no catalog entry gives them (consul_retain.go).
	prev map[string]prevEntry
	// lastIndex is the list's index of the last round that completed: a
	// round that finds it unchanged (after a failure, an election) reads
	// nothing. A failed round keeps known and lastIndex.
	lastIndex uint64
	gw        gatewayWatch // the terminating gateways' config entries (consul_gateways.go)
	// roundIndex is the list's index in the round under way.
	roundIndex uint64
	// checked is the extinction index at which every entry of known was
	// last read (consul_validate.go): 0 to read them all again in the
	// next round that moves.
	checked uint64

	probeEvery, probeTimeout time.Duration // tests shorten them (0: the defaults)
}

// proxyEntries are the VIP entries read from one catalog service, and
// whether one of its instances had no VIP (yet) or the service had no
// instance (pending: read it again next round).
type proxyEntries struct {
	entries []table.Entry
	pending bool
	// gateway: a terminating gateway, whose linked services change with
	// its config entry: read again whenever the catalog moved.
	gateway bool
	// watch: the names of entries whose VIP may outlive their carrier
	// (consul_retain.go): carried by a gateway, a Connect-native instance,
	// or a proxy that fronts an instance of its destination.
	watch   []string
	dc      string // the datacenter of its entries
	skipped int    // entries with a name DNS cannot ask for, left out
}

func (s *consulSource) Name() string { return "consul" }

func (s *consulSource) Key() string {
	ups := make([]string, 0, len(s.upstreams))
	for u := range s.upstreams {
		ups = append(ups, u)
	}
	sort.Strings(ups)
	return "consul " + s.display() + " " + strings.Join(ups, ",")
}

func (s *consulSource) client() (*api.Client, error) {
	cfg := api.DefaultConfig() // honours CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, …
	if s.address != "" {
		cfg.Address = s.address
	}
	if s.tokenFile != "" {
		cfg.Token, cfg.TokenFile = "", s.tokenFile
	}
	if s.tls != nil {
		// The tls line replaces the environment's CA (and client pair when
		// it gives one); the rest of the environment's TLS stays.
		cfg.TLSConfig.CAFile, cfg.TLSConfig.CAPath = s.tls.CAFile, s.tls.CAPath
		if s.tls.CertFile != "" {
			cfg.TLSConfig.CertFile, cfg.TLSConfig.KeyFile = s.tls.CertFile, s.tls.KeyFile
		}
		if !strings.Contains(cfg.Address, "://") {
			cfg.Scheme = "https"
		}
	}
	if s.serverName != "" {
		cfg.TLSConfig.Address = s.serverName // the name the certificate must carry (SNI)
	}
	return api.NewClient(cfg)
}

func (s *consulSource) Run(ctx context.Context, report func(Sync)) {
	var (
		client *api.Client
		index  uint64
		retry  time.Duration
		round  time.Time
	)
	for ctx.Err() == nil {
		if gap := consulMinGap - time.Since(round); gap > 0 && !pause.Sleep(ctx, gap) {
			return
		}
		round = time.Now()
		var err error
		if client == nil {
			client, err = s.client()
		}
		var next uint64
		var sy Sync
		if err == nil {
			next, sy, err = s.sync(ctx, client, index)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			report(Sync{Result: SyncError, Reason: reasonOf(err), Err: fmt.Errorf("consul %s: %w", s.display(), err)})
			// The agent may come back as another one; and the first round
			// after a failure must not block (index 0), so that a recovery
			// is reported when the agent answers, not when the catalog
			// next changes. The cache stays: that round reads only what
			// changed meanwhile (nothing, after an election).
			client, index, s.selfAsked = nil, 0, false
			retry = pause.Double(retry, consulRetryMin, consulRetryMax)
			if !pause.Sleep(ctx, pause.Jitter(retry)) {
				return
			}
			continue
		}
		retry = 0
		index = max(next, 1) // an index of 0 would make every query return at once (Consul's blocking-query rules)
		report(sy)
	}
}

func (s *consulSource) display() string {
	if s.address != "" {
		return s.address
	}
	if a := os.Getenv(api.HTTPAddrEnvName); a != "" {
		return a
	}
	return "127.0.0.1:8500"
}

// query returns the options of every request: stale (any server answers,
// never a leader's consistent read) and across namespaces unless the agent
// is Consul CE.
func (s *consulSource) query(ctx context.Context) *api.QueryOptions {
	q := &api.QueryOptions{AllowStale: true, Token: s.tok}
	if !s.noNS {
		q.Namespace = "*"
	}
	return q.WithContext(ctx)
}

// sync runs one catalog round: it waits until the list of the services
// that carry VIPs passes index, then reads those it has not read and
// builds the table.
func (s *consulSource) sync(ctx context.Context, client *api.Client, index uint64) (uint64, Sync, error) {
	tok, err := s.token()
	if err != nil {
		return 0, Sync{}, err
	}
	if tok != s.tok {
		s.tok, s.known, s.checked = tok, nil, 0 // another token may see another catalog: read it all
	}
	qctx, cancel := context.WithTimeout(ctx, consulWait+consulWait/16+15*time.Second)
	defer cancel()
	hung := s.watchdog(qctx, cancel, client)
	listed, meta, err := s.wait(qctx, client.Catalog(), index)
	if err != nil {
		if why := hung(); why != nil {
			return 0, Sync{}, why
		}
		return 0, Sync{}, err
	}
	if err := trusted(meta); err != nil {
		return 0, Sync{}, err
	}
	if meta.LastIndex == s.lastIndex && s.built && !s.pending && !s.gw.anyStale(s.gateways()) {
		return meta.LastIndex, Sync{Result: SyncUnchanged}, nil // the wait ended with no change
	}
	if meta.LastIndex < s.lastIndex {
		// The index went backwards (a snapshot restored, another
		// cluster): nothing read before can be trusted.
		s.known, s.checked = nil, 0
	}
	moved := meta.LastIndex != s.lastIndex
	s.roundIndex = meta.LastIndex
	if index != 0 && moved && !pause.Sleep(qctx, pause.Spread(consulWakeSpread)) {
		return 0, Sync{}, qctx.Err()
	}
	stale, checked, err := s.recheck(qctx, client.Raw(), listed, moved)
	if err != nil {
		return 0, Sync{}, err
	}
	r, err := s.collect(qctx, client, listed, moved, stale)
	if err != nil {
		return 0, Sync{}, err
	}
	if r.entries, err = s.retain(qctx, client.Catalog(), r, moved); err != nil {
		return 0, Sync{}, err
	}
	s.lastIndex, s.checked = meta.LastIndex, checked
	if len(s.gateways()) > 0 {
		s.gw.start(ctx, s)
	}
	return meta.LastIndex, s.build(r), nil
}

// wait is list, woken early when a terminating gateway's config entry
// moved (consul_gateways.go): then the list is asked again at once.
func (s *consulSource) wait(ctx context.Context, cat *api.Catalog, index uint64) (map[string][]string, *api.QueryMeta, error) {
	lctx, lcancel := context.WithCancel(ctx)
	s.gw.arm(lcancel)
	listed, meta, err := s.list(lctx, cat, index)
	woken := s.gw.disarm()
	lcancel()
	if err != nil && woken && ctx.Err() == nil {
		return s.list(ctx, cat, 0)
	}
	return listed, meta, err
}

// gateways returns the terminating gateways the cache holds.
func (s *consulSource) gateways() []string {
	var out []string
	for n, p := range s.known {
		if p.gateway {
			out = append(out, n)
		}
	}
	return out
}

// list waits on the list of the services that carry VIPs until it passes
// index (at most the blocking wait; a short one while some VIP is
// pending). A Consul CE agent's refusal of ns=* is taken once.
func (s *consulSource) list(ctx context.Context, cat *api.Catalog, index uint64) (map[string][]string, *api.QueryMeta, error) {
	wait := consulWait
	if s.pending {
		wait = s.pendingWait
	}
	list := func() (map[string][]string, *api.QueryMeta, error) {
		q := s.query(ctx)
		q.Filter, q.WaitIndex, q.WaitTime = s.filter(), index, wait
		return cat.Services(q)
	}
	listed, meta, err := list()
	if err != nil && !s.noNS && enterpriseOnly(err) {
		s.noNS = true
		log.Infof("Source consul: %s is Consul CE (no namespaces): following namespace default, partition default", s.display())
		listed, meta, err = list()
	}
	return listed, meta, err
}

// enterpriseOnly reports whether err is a Consul CE agent refusing an
// Enterprise parameter (ns).
func enterpriseOnly(err error) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.Code == 400 && strings.Contains(se.Body, "Enterprise feature")
}

// watchdog asks the agent for its version every probe interval while ctx
// lives; when one probe gets no answer in time it calls cancel, which ends
// the round's blocking query. The returned function reports why, once the
// round is over (nil when the agent answered every probe). The probing
// goroutine ends with ctx.
func (s *consulSource) watchdog(ctx context.Context, cancel context.CancelFunc, client *api.Client) func() error {
	every, timeout := s.probeEvery, s.probeTimeout
	if every == 0 {
		every, timeout = consulProbeEvery, consulProbeTimeout
	}
	var why atomic.Pointer[error]
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// /v1/agent/version is answered by the agent itself (no RPC to
			// the servers, no ACL): cheap enough for every node's resolver.
			// Any HTTP status is an answer.
			pctx, pcancel := context.WithTimeout(ctx, timeout)
			var v map[string]any
			_, err := client.Raw().Query("/v1/agent/version", &v, (&api.QueryOptions{}).WithContext(pctx))
			pcancel()
			var status api.StatusError
			if err != nil && !errors.As(err, &status) && ctx.Err() == nil {
				e := fmt.Errorf("agent not answering (no reply to a probe in %v): %w", timeout, err)
				why.Store(&e)
				cancel()
				return
			}
		}
	}()
	return func() error {
		if e := why.Load(); e != nil {
			return *e
		}
		return nil
	}
}
