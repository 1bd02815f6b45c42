package replica

import (
	"fmt"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

func keys(names ...string) []k8sdns.Key {
	out := make([]k8sdns.Key, len(names))
	for i, n := range names {
		out[i] = k8sdns.Key{Namespace: "shop", Name: n}
	}
	return out
}

// TestChangeLog: the names changed after a generation, each once and
// sorted, with the namespaces' flag; a generation before the log's floor
// or after the latest is outside it; the bounds drop the oldest entries.
func TestChangeLog(t *testing.T) {
	l := changeLog{floor: 1}
	l.add(logEntry{gen: 2, keys: keys("web", "api")})
	l.add(logEntry{gen: 3, keys: keys("db"), namespaces: true})
	l.add(logEntry{gen: 4, keys: append(keys("web"), k8sdns.Key{Namespace: "shop", Name: "web", Import: true})}) // a ServiceImport of that name too
	for _, tc := range []struct {
		gen  uint64
		want string
		ns   bool
		ok   bool
	}{
		{1, "[{shop api false} {shop db false} {shop web false} {shop web true}]", true, true},
		{2, "[{shop db false} {shop web false} {shop web true}]", true, true},
		{3, "[{shop web false} {shop web true}]", false, true},
		{4, "[]", false, true},
		{0, "[]", false, false},
		{5, "[]", false, false},
	} {
		ks, ns, ok := l.since(tc.gen, 4)
		if got := fmt.Sprint(ks); ok != tc.ok || ns != tc.ns || (ok && got != tc.want && !(len(ks) == 0 && tc.want == "[]")) {
			t.Errorf("since(%d) = %s, %v, %v; want %s, %v, %v", tc.gen, got, ns, ok, tc.want, tc.ns, tc.ok)
		}
	}

	// more generations than the log keeps: the oldest go, the floor moves
	for g := uint64(5); g < 5+maxLogEntries; g++ {
		l.add(logEntry{gen: g, keys: keys("churn")})
	}
	if _, _, ok := l.since(3, 4+maxLogEntries); ok || len(l.entries) != maxLogEntries || l.floor != 4 {
		t.Errorf("after %d more: floor %d, %d entries, generation 3 still resumable: %v", maxLogEntries, l.floor, len(l.entries), ok)
	}
	if ks, _, ok := l.since(l.floor, 4+maxLogEntries); !ok || len(ks) != 1 {
		t.Errorf("from the floor: %v, %v", ks, ok)
	}
	// one change of more names than the log keeps: nothing before it resumes
	big := make([]string, maxLogKeys+1)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	l.add(logEntry{gen: 5 + maxLogEntries, keys: keys(big...)})
	if _, _, ok := l.since(4+maxLogEntries, 5+maxLogEntries); ok || len(l.entries) != 0 || l.keys != 0 {
		t.Errorf("a change over the bound: %d entries, %d names, resumable %v", len(l.entries), l.keys, ok)
	}
	if _, _, ok := l.since(5+maxLogEntries, 5+maxLogEntries); !ok {
		t.Error("the latest generation is not resumable")
	}
}
