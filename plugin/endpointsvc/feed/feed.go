// Package feed is the contract between endpointsvc's sources and the
// plugin: a Source reads a control plane and hands a Sink whole states of
// its schema's model (orch.State, k8sdns.Cluster) and, once it knows what
// changed, patches of them (orch.Patch, k8sdns.Patch). It knows nothing of
// DNS.
package feed

import (
	"context"
	"io"
	"strings"
	"time"
)

// Source feeds states into the plugin.
type Source interface {
	// Name labels metrics and logs ("file", "orch", "kubernetes").
	Name() string
	// Key identifies what the source reads and how it filters it (its
	// path, URL or kubeconfig and every option that selects objects): a
	// table built from it is carried over a reload only to an instance
	// whose source has the same key.
	Key() string
	// Run syncs until ctx is done. It must deliver the first result
	// (update or failure) promptly and must not keep goroutines after it
	// returns.
	Run(ctx context.Context, s Sink)
}

// Sink receives a source's results. Its methods are safe to call from the
// source's goroutine.
type Sink interface {
	// Update offers a new, whole, valid state.
	Update(st State)
	// Patch offers a change to part of the last state; a source sends it
	// only after an Update.
	Patch(p Patch)
	// Unchanged records a successful check that found the same content.
	Unchanged()
	// Failed records a failed sync; the last good state keeps serving.
	Failed(err error)
}

// Served is implemented by the plugin's Sink: the schema's table it
// serves now (an immutable *k8sdns.Table with schema kubernetes), nil
// before the first. A source that resumes from where that table stands
// (the replica source: its origin) reads it.
type Served interface {
	Served() any
}

// Aged is implemented by the plugin's Sink: a source that knows how far
// behind its own source what it delivers is (the replica source: its
// leader's staleness) says so before each Update, Patch or Unchanged, and
// each such result is a verdict: the table is as far behind as that (0:
// current), a patch too. An Unchanged with an age keeps the table as
// stale as that, where a plain one would make it current.
type Aged interface {
	SetAge(age time.Duration)
}

// State is a whole state of a schema's model.
type State interface {
	// Len is its number of services (a state without is empty: the
	// empty-sync rule of the snapshot).
	Len() int
	// Snapshot writes it in its model's snapshot form.
	Snapshot(w io.Writer) error
}

// Patch is a change to part of the last state of a schema's model.
type Patch interface {
	// Len is the number of services it changes.
	Len() int
	// Snapshot writes the source's whole state after the change in its
	// model's snapshot form.
	Snapshot(w io.Writer) error
}

// Service kinds of a Trigger: the kubernetes plugin's service_kind label
// values of its DNS programming latency.
const (
	KindClusterIP               = "cluster_ip"                // a Service with cluster IPs
	KindHeadlessWithSelector    = "headless_with_selector"    // clusterIP None, with a selector
	KindHeadlessWithoutSelector = "headless_without_selector" // clusterIP None, no selector (slices written by someone else)
)

// Kinds are the Trigger kinds, in the order streams write them.
var Kinds = []string{KindClusterIP, KindHeadlessWithSelector, KindHeadlessWithoutSelector}

// Trigger is an API change a patch carries into the table: the time its
// EndpointSlice says the change was triggered (the
// endpoints.kubernetes.io/last-change-trigger-time annotation), and the
// kind of its Service. The plugin observes how long ago At was when the
// patch is in the served table: the DNS programming latency.
type Trigger struct {
	Kind string
	At   time.Time
}

// Triggered is implemented by patches that carry Triggers (those of the
// kubernetes source, and the replica source's when the leader sent them).
type Triggered interface {
	Triggers() []Trigger
}

// CompareNames orders (namespace, name) pairs by namespace, then name -
// the order of both models' keys and of the objects they are mapped from
// - with one string comparison when the namespaces differ (cmp.Or of two
// cmp.Compare made both, each as up to two: a third of a look-up's time).
func CompareNames(ns1, name1, ns2, name2 string) int {
	if c := strings.Compare(ns1, ns2); c != 0 {
		return c
	}
	return strings.Compare(name1, name2)
}
