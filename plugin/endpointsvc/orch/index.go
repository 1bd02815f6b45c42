package orch

// fewKeys is the size up to which an index looks through its keys
// instead of hashing them: a patch's state holds a Service or a few and
// the dozen nodes their endpoints run on, for which a map cost more to
// make than its lookups saved (BenchmarkPatchFlip).
const fewKeys = 16

// index finds values by string key (IDs, unique in a validated state):
// up to fewKeys by a look through, more by a map. The zero value holds
// nothing; make one with newIndex.
type index[V any] struct {
	keys []string
	vals []V
	m    map[string]V
}

// newIndex makes an index for n keys.
func newIndex[V any](n int) index[V] {
	if n > fewKeys {
		return index[V]{m: make(map[string]V, n)}
	}
	return index[V]{keys: make([]string, 0, n), vals: make([]V, 0, n)}
}

// add sets k's value to v (k is not in the index yet).
func (x *index[V]) add(k string, v V) {
	if x.m != nil {
		x.m[k] = v
		return
	}
	x.keys, x.vals = append(x.keys, k), append(x.vals, v)
}

// get is k's value, or the zero value and false.
func (x *index[V]) get(k string) (V, bool) {
	if x.m != nil {
		v, ok := x.m[k]
		return v, ok
	}
	for i, key := range x.keys {
		if key == k {
			return x.vals[i], true
		}
	}
	var zero V
	return zero, false
}
