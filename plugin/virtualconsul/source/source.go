// Package source is virtualconsul's sources: the table file (file.go), the
// Consul catalog (consul*.go), an ADS stream (xds*.go) and the
// remote-listener mode (envoy.go), each read from its Corefile line. A
// source builds every table with the model's Builder (package table) and
// reports each attempt as a Sync; the plugin swaps tables in, counts, logs
// and writes the snapshot. It knows nothing of DNS serving.
package source

import (
	"context"

	"github.com/coredns/caddy"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

var log = clog.NewWithPlugin("virtualconsul")

// New makes the source of type typ (the first argument of the source
// option) from the rest of its Corefile line (args); c is positioned on
// that line. known is false when there is no such type (source envoy is
// not one: NewEnvoy).
func New(c *caddy.Controller, typ string, args []string) (s Source, known bool, err error) {
	newSource, ok := sourceTypes[typ]
	if !ok {
		return nil, false, nil
	}
	s, err = newSource(c, args)
	return s, true, err
}

// sourceTypes maps the first argument of the source option to the
// constructor of that source; each source's file adds itself here.
var sourceTypes = map[string]newSourceFunc{}

// newSourceFunc makes a source from the rest of its Corefile line (args);
// c is positioned on that line, for a source that wants more (c.Errf for
// its own errors; conf.Path for its paths). A plain error is reported with the Corefile's file and line.
type newSourceFunc func(c *caddy.Controller, args []string) (Source, error)

// A Source keeps one plugin's table in step with one control plane, one file
// each: a table file (file.go), the Consul catalog (consul.go), an ADS
// stream (xds.go). The remote-listener mode (source envoy, envoy.go) is not
// a source: it syncs no table, the handler asks the listener per query, and
// the plugin makes it with NewEnvoy. A source builds every table with a Builder (so
// every table passes the same checks) and reports each attempt; the plugin
// swaps tables in, counts, logs and writes the snapshot.
type Source interface {
	// Name labels the source in metrics and logs ("file", "consul", "xds").
	Name() string
	// Key identifies what the source reads (its path or address and what
	// selects entries): a table is carried across a reload to an instance
	// whose source has the same key.
	Key() string
	// Run syncs until ctx is done, calling report after every attempt, from
	// Run's goroutine only. It returns promptly once ctx is done.
	Run(ctx context.Context, report func(Sync))
}

// Sync is the outcome of one sync attempt of a source.
type Sync struct {
	// Result is one of the Sync… constants.
	Result string
	// Table is the new table when Result is SyncOK, else nil.
	Table *table.Table
	// Err says why, for SyncRejected, SyncNoTable and SyncError.
	Err error
	// Reason labels a SyncError in source_failing_reason: "" for
	// SyncError itself, or the source's own (acl_filtered, no_leader).
	Reason string
	// Skipped counts, for SyncOK, the entries left out of Table by reason
	// (entries_skipped); nil when none.
	Skipped map[string]int
}

// Results of a sync attempt (the result label of the syncs metric).
const (
	SyncOK        = "ok"        // a new table was built
	SyncUnchanged = "unchanged" // same content as the last table: nothing rebuilt
	SyncRejected  = "rejected"  // the payload was invalid: the old table keeps serving
	SyncNoTable   = "no_table"  // the payload was valid but carried no table (xds: no virtual_dns listener): the old table keeps serving
	SyncError     = "error"     // the source could not be read
)

// A Seeded source is told, before Run, the table already serving (the
// snapshot, or the table carried across a reload): what it knew before a
// restart that its control plane may not show again.
type Seeded interface {
	Seed(t *table.Table)
}
