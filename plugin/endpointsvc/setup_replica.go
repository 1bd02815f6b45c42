package endpointsvc

import (
	"fmt"
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
	addr, tokenFile string // replicate ADDR { token_file PATH tls CERT KEY [CA] }
	tls             *replica.TLSFiles
	seen            bool

	url, sourceToken string // source replica URL { token_file PATH tls [CERT KEY] [CA] tls_servername NAME }
	sourceTLS        *replica.TLSFiles
}

// replicateOption reads `replicate ADDR [{ token_file PATH; tls CERT KEY
// [CA] }]`. An address beyond loopback needs a credential: token_file,
// or a CA that client certificates must be signed by (inspect's rule).
func (o *options) replicateOption(c *caddy.Controller) error {
	if o.repl.seen {
		return c.Err("replicate can only be given once")
	}
	line := c.Line()
	a := c.RemainingArgs()
	if len(a) != 1 {
		return c.ArgErr()
	}
	if _, _, err := net.SplitHostPort(a[0]); err != nil {
		return c.Errf("bad replicate address %q: want [HOST]:PORT", a[0])
	}
	b, err := replicaBlock(c, true)
	if err != nil {
		return err
	}
	if b.token == "" && (b.tls == nil || b.tls.CA == "") && !conf.LoopbackOnly(a[0]) {
		return lineErr(c, line, fmt.Sprintf("replicate %s serves the cluster's table beyond loopback: set token_file (or tls with a CA for client certificates), or bind it to 127.0.0.1", a[0]))
	}
	o.repl.addr, o.repl.tokenFile, o.repl.tls, o.repl.seen = a[0], b.token, b.tls, true
	return nil
}

// replicaSourceOption reads the rest of `source replica URL [{ token_file
// PATH; tls [CERT KEY] [CA]; tls_servername NAME }]`.
func (o *options) replicaSourceOption(c *caddy.Controller, a []string) error {
	if len(a) != 2 {
		return c.ArgErr()
	}
	b, err := replicaBlock(c, false)
	if err != nil {
		return err
	}
	src, err := replica.NewSource(a[1], b.token, "")
	if err != nil {
		return c.Err(err.Error())
	}
	if b.tls != nil {
		if err := src.UseTLS(b.tls); err != nil {
			return lineErr(c, b.tlsLine, err.Error())
		}
	}
	o.repl.url, o.repl.sourceToken, o.repl.sourceTLS = a[1], b.token, b.tls
	return nil
}

// replicaBlockOptions are the options of a replicate or source replica
// block.
type replicaBlockOptions struct {
	token   string
	tls     *replica.TLSFiles
	tlsLine int
}

// replicaBlock reads an optional block that opens at the end of the
// current line: token_file and tls (a leader's: CERT KEY [CA]; a
// follower's: [CERT KEY] [CA], and tls_servername).
func replicaBlock(c *caddy.Controller, leader bool) (replicaBlockOptions, error) {
	var b replicaBlockOptions
	if !c.NextArg() {
		return b, nil
	}
	if c.Val() != "{" {
		return b, c.ArgErr()
	}
	serverName, snLine := "", 0
	for c.Next() {
		switch v := c.Val(); v {
		case "}":
			if serverName != "" {
				if b.tls == nil {
					return b, lineErr(c, snLine, "tls_servername needs tls")
				}
				b.tls.ServerName = serverName
			}
			if b.tls != nil {
				var err error
				if leader {
					_, err = b.tls.Server()
				} else {
					_, err = b.tls.Client()
				}
				if err != nil {
					return b, lineErr(c, b.tlsLine, err.Error())
				}
			}
			return b, nil
		case "token_file":
			a := c.RemainingArgs()
			if len(a) != 1 {
				return b, c.ArgErr()
			}
			b.token = conf.Path(c, a[0])
		case "tls":
			a := c.RemainingArgs()
			f := &replica.TLSFiles{}
			switch {
			case len(a) == 1 && !leader:
				f.CA = conf.Path(c, a[0])
			case len(a) == 2 || len(a) == 3:
				f.Cert, f.Key = conf.Path(c, a[0]), conf.Path(c, a[1])
				if len(a) == 3 {
					f.CA = conf.Path(c, a[2])
				}
			case len(a) == 0 && !leader:
			default:
				if leader {
					return b, c.Err("tls of replicate takes CERT KEY [CA]")
				}
				return b, c.Err("tls of source replica takes [CERT KEY] [CA]")
			}
			b.tls, b.tlsLine = f, c.Line()
		case "tls_servername":
			a := c.RemainingArgs()
			if leader || len(a) != 1 {
				if leader {
					return b, c.Errf("unknown property %q", v)
				}
				return b, c.ArgErr()
			}
			serverName, snLine = a[0], c.Line()
		default:
			return b, c.Errf("unknown property %q", v)
		}
	}
	return b, c.EOFErr()
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
		srv := replica.NewServer(o.repl.addr, l)
		srv.TLS = o.repl.tls
		e.replicating = &replicating{leader: l, server: srv}
	}
	if o.repl.url != "" {
		src, err := replica.NewSource(o.repl.url, o.repl.sourceToken, e.Zones[0])
		if err != nil {
			return c.Err(err.Error())
		}
		if o.repl.sourceTLS != nil {
			if err := src.UseTLS(o.repl.sourceTLS); err != nil {
				return c.Err(err.Error())
			}
		}
		// what shapes the follower's tables beside the stream: a table of
		// other options is not resumed (its origin names them)
		src.Options = fmt.Sprintf("pods=%v,noendpoints=%v", o.podsVerified, o.dnsOpts.noEndpoints)
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
		e.replicating.leader.PatchedProgrammed(t, keys, kp.SetNamespaces, kp.Programmed, pods...)
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

// replicaProvisional tells the leader, if any, that its table is about
// to be the snapshot's (start-up, before the source answered).
func (e *Endpointsvc) replicaProvisional() {
	if e.replicating != nil {
		e.replicating.leader.Provisional()
	}
}

// replicaSourced tells the leader, if any, that a result of the source
// was applied.
func (e *Endpointsvc) replicaSourced() {
	if e.replicating != nil {
		e.replicating.leader.Sourced()
	}
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
