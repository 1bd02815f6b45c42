// Package intern keeps the canonical copies of the few names that
// thousands of objects repeat (node names, namespaces) in front of
// package unique: a plain map read under a lock, where unique.Make walks
// a concurrent hash trie and turns a weak pointer strong, each a few
// cache misses on an event's path.
package intern

import (
	"sync"
	"unique"
)

// Table caches unique.Make's handles by name. Its handles are the ones
// unique.Make returns, so handles compare as unique's do whether or not
// they came through a Table. It holds at most Max names (0: DefaultMax):
// past that it starts empty again, so a stream of one-off names cannot
// grow it without bound. The zero Table is ready; it is safe for
// concurrent use.
type Table struct {
	Max int

	mu sync.Mutex
	m  map[string]unique.Handle[string]
}

// DefaultMax is a Table's bound when Max is 0: more names than the
// largest clusters have nodes or namespaces.
const DefaultMax = 1 << 15

// Handle is unique.Make(s). s may be a view of bytes that change later:
// a name the table keeps is the handle's own copy.
func (t *Table) Handle(s string) unique.Handle[string] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.m[s]; ok {
		return h
	}
	limit := t.Max
	if limit <= 0 {
		limit = DefaultMax
	}
	if t.m == nil || len(t.m) >= limit {
		t.m = make(map[string]unique.Handle[string])
	}
	h := unique.Make(s)
	t.m[h.Value()] = h
	return h
}

// String is the canonical copy of s (unique.Make(s).Value()).
func (t *Table) String(s string) string { return t.Handle(s).Value() }
