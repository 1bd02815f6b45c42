package endpointsvc

import (
	"context"
	"fmt"

	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"

	"github.com/miekg/dns"
)

// schema is one model with its table: the orchestrator's (schema_orch.go)
// or the Kubernetes DNS specification's (schema_dns.go). The plugin reaches
// its model only through it. build and patch run with the syncer's lock
// held; serve and soa on the hot path, reading only their table.
type schema interface {
	// name is the schema's Corefile word.
	name() string
	// decode reads a state document of the file and orch sources, and
	// decodeSnapshot the snapshot file.
	decode(b []byte) (feed.State, error)
	decodeSnapshot(b []byte) (feed.State, error)
	// logRecord appends p's record in the snapshot's change log (the
	// source's patch as sent, whatever the table keeps of it) to its
	// argument, run later by the snapshot writer (a patch never changes
	// once sent); nil when the schema has none for p. replay applies
	// such records in order to a state of the snapshot: it returns the
	// state and how many it applied (all, or those before the first bad
	// one, which err names).
	logRecord(p feed.Patch) func([]byte) []byte
	replay(st feed.State, recs [][]byte) (feed.State, int, error)
	// build makes the table of a whole state.
	build(st feed.State) modelTable
	// patch makes the table of cur with p applied; when cur cannot be
	// patched it returns nil and the source's whole state to build.
	patch(cur modelTable, p feed.Patch) (modelTable, feed.State)
	// serve answers a question in zone number zi from table t.
	serve(ctx context.Context, state request.Request, zi int, t *table) reply
	// soa is zone number zi's SOA for the authority section of the answer
	// to a question of qname.
	soa(zi int, qname string, serial uint32) dns.RR
	// background runs what the schema does besides building (the orch
	// schema re-resolves hostname advertise addresses) until ctx is done;
	// rebuild swaps in a table it makes with the syncer's lock held.
	background(ctx context.Context, rebuild func(func() modelTable))
	// carry returns what the table depends on besides itself, for the
	// instance a reload starts, and restore takes it back.
	carry() any
	restore(c any)
}

// modelTable is a schema's immutable table.
type modelTable interface {
	Services() int  // services in the table
	Endpoints() int // endpoints that count
	Conflicts() int // services with more than one CNAME candidate
}

// table is what ServeDNS reads: a schema's table and its SOA serial.
type table struct {
	model  modelTable
	serial uint32
}

// errSchemaState is a state or patch of another schema's model (a bug in
// the source's set-up).
func errSchemaState(s schema, v any) error {
	return fmt.Errorf("schema %s given a %T", s.name(), v)
}
