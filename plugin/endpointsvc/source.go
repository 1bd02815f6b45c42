package endpointsvc

import (
	"context"
	"crypto/sha256"
)

// Source feeds states into the plugin. Sources know nothing of DNS or of
// the predicate: they map whatever they read onto a State (the model) and
// hand it to a Sink. The file and orch sources decode JSON with DecodeState;
// a Kubernetes source would build a State from Services, EndpointSlices and
// Nodes the same way.
type Source interface {
	// Name labels metrics and logs ("file", "orch").
	Name() string
	// Key identifies what the source reads and how it filters it (its
	// path, URL or kubeconfig and every option that selects objects): a
	// table built from it is carried over a reload only to an instance
	// whose source has the same key.
	Key() string
	// Run syncs until ctx is done. It must deliver the first result (update
	// or failure) promptly and must not keep goroutines after it returns.
	Run(ctx context.Context, s Sink)
}

// Sink receives a source's results. Its methods are safe to call from the
// source's goroutine.
type Sink interface {
	// Update offers a new, validated state.
	Update(st *State)
	// Patch offers a change to part of the last state (see Patch); a
	// source sends it only after an Update.
	Patch(p *Patch)
	// Unchanged records a successful check that found the same content.
	Unchanged()
	// Failed records a failed sync; the last good state keeps serving.
	Failed(err error)
}

// contentHash identifies a document's content, so that sources can skip a
// rebuild when it did not change.
type contentHash [sha256.Size]byte

func hashOf(b []byte) contentHash { return sha256.Sum256(b) }
