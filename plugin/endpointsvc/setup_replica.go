package endpointsvc

import (
	"net"
	"net/netip"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/replica"
	"github.com/meshdns/meshdns/plugin/pkg/conf"
	"github.com/meshdns/meshdns/plugin/pkg/pending"
)

// The replication stream (package replica): `replicate ADDR` makes this
// instance a leader that offers its table's model to followers, and
// `source replica URL` a follower that keeps its table from a leader's
// stream (a node-local meshdns: docs/node-local.md). Both need schema
// kubernetes.

// replicating is the `replicate` option: the leader, told of every table
// the syncer builds (tap), and its listener, which runs from OnStartup to
// OnShutdown (a reload's new instance listens beside it: SO_REUSEPORT).
type replicating struct {
	leader *replica.Leader
	server *replica.Server
}

// replicaOptions are the replication options of a block.
type replicaOptions struct {
	addr, tokenFile string // replicate ADDR { token_file PATH }
	seen            bool

	url, sourceToken string // source replica URL { token_file PATH }
}

// replicateOption reads `replicate ADDR [{ token_file PATH }]`.
func (o *options) replicateOption(c *caddy.Controller) error {
	if o.repl.seen {
		return c.Err("replicate can only be given once")
	}
	a := c.RemainingArgs()
	if len(a) != 1 {
		return c.ArgErr()
	}
	if _, _, err := net.SplitHostPort(a[0]); err != nil {
		return c.Errf("bad replicate address %q: want [HOST]:PORT", a[0])
	}
	token, err := tokenBlock(c)
	if err != nil {
		return err
	}
	o.repl.addr, o.repl.tokenFile, o.repl.seen = a[0], token, true
	return nil
}

// replicaSourceOption reads the rest of `source replica URL [{ token_file
// PATH }]`.
func (o *options) replicaSourceOption(c *caddy.Controller, a []string) error {
	if len(a) != 2 {
		return c.ArgErr()
	}
	token, err := tokenBlock(c)
	if err != nil {
		return err
	}
	if _, err := replica.NewSource(a[1], token, ""); err != nil {
		return c.Err(err.Error())
	}
	o.repl.url, o.repl.sourceToken = a[1], token
	return nil
}

// tokenBlock reads an optional `{ token_file PATH }` that opens at the
// end of the current line, and returns PATH ("" none).
func tokenBlock(c *caddy.Controller) (string, error) {
	if !c.NextArg() {
		return "", nil
	}
	if c.Val() != "{" {
		return "", c.ArgErr()
	}
	token := ""
	for c.Next() {
		switch c.Val() {
		case "}":
			return token, nil
		case "token_file":
			a := c.RemainingArgs()
			if len(a) != 1 {
				return "", c.ArgErr()
			}
			token = conf.Path(c, a[0])
		default:
			return "", c.Errf("unknown property %q", c.Val())
		}
	}
	return "", c.EOFErr()
}

// replication makes the leader and the follower the options ask for,
// once the schema is known.
func (o *options) replication(c *caddy.Controller, e *Endpointsvc) error {
	if (o.repl.seen || o.repl.url != "") && !o.kubernetes {
		if o.repl.url != "" {
			return c.Err("source replica needs 'schema kubernetes'")
		}
		return c.Err("replicate needs 'schema kubernetes'")
	}
	if o.repl.seen {
		l := replica.NewLeader(e.Zones[0], o.repl.tokenFile)
		l.Age = e.tableAge
		e.replicating = &replicating{leader: l, server: replica.NewServer(o.repl.addr, l)}
	}
	if o.repl.url != "" {
		src, err := replica.NewSource(o.repl.url, o.repl.sourceToken, e.Zones[0])
		if err != nil {
			return c.Err(err.Error())
		}
		e.source = src
	}
	return nil
}

// replicaListen opens the stream's listener, if any (OnStartup).
func (e *Endpointsvc) replicaListen() error {
	r := e.replicating
	if r == nil {
		return nil
	}
	if err := r.server.Start(); err != nil {
		return err
	}
	pending.Started(r.server.Stop)
	return nil
}

// replicaClose closes the stream's listener, if any, and ends its streams
// (OnShutdown).
func (e *Endpointsvc) replicaClose() {
	if e.replicating != nil {
		e.replicating.server.Stop()
	}
}

// tap tells the leader, if any, of table m: made by patch p, or (p nil)
// built whole or carried over a reload. e.mu is held, so the leader sees
// the tables in the order they are served.
func (e *Endpointsvc) tap(m modelTable, p feed.Patch) {
	if e.replicating == nil {
		return
	}
	t, ok := m.(*k8sdns.Table)
	if !ok {
		return
	}
	if kp, ok := p.(*k8sdns.Patch); ok {
		keys := make([]k8sdns.Key, len(kp.Changes))
		for i, c := range kp.Changes {
			keys[i] = c.Key
		}
		pods := make([]netip.Addr, len(kp.Pods))
		for i, pa := range kp.Pods {
			pods[i] = pa.Addr
		}
		e.replicating.leader.Patched(t, keys, kp.SetNamespaces, pods...)
		return
	}
	e.replicating.leader.Rebuilt(t)
}

// replicaHandOver is what the leader hands to the instance a reload
// starts (nil without one); e.mu is held.
func (e *Endpointsvc) replicaHandOver() *replica.Carried {
	if e.replicating == nil {
		return nil
	}
	return e.replicating.leader.HandOver()
}

// replicaTakeOver continues from the leader state a reload handed over.
func (e *Endpointsvc) replicaTakeOver(c *replica.Carried) {
	if e.replicating != nil {
		e.replicating.leader.TakeOver(c)
	}
}

// replicaThaw resumes the leader after a failed reload.
func (e *Endpointsvc) replicaThaw() {
	if e.replicating == nil {
		return
	}
	e.mu.Lock() // no table is built in between: the leader catches up with the last
	defer e.mu.Unlock()
	var t *k8sdns.Table
	if cur := e.tbl.Load(); cur != nil {
		t, _ = cur.model.(*k8sdns.Table)
	}
	e.replicating.leader.Thaw(t)
}
