package virtualconsul

import (
	"sort"
	"sync"

	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
)

// The serving tables handed across a reload (SIGUSR1). CoreDNS sets up
// every block of the new Corefile before it starts any, and stops the old
// instances only after the new ones started: the old instance hands its
// table over (OnRestart), the new one takes it (OnStartup), the old one
// drops what no one took (OnShutdown). Tables are immutable, so both
// instances may share one.
//
// A table is handed over under the block's key (its server block keys and
// zones) and the identity of its source. A new instance takes the table of
// its own block key; failing that, a table of the same source whose block
// no instance of the new Corefile has: a reload that changed the port or
// the zone list keeps its table, while two blocks that share a source each
// keep their own.
var carried = &carryStore{tables: map[string]handed{}, wanted: map[string]int{}}

type handed struct {
	table  *table.Table
	source string // the source's identity, "" for none
}

type carryStore struct {
	mu     sync.Mutex
	tables map[string]handed // by block key
	wanted map[string]int    // block keys of instances set up and not started yet
}

// Put hands t over under key, from a block whose source is source.
func (s *carryStore) Put(key, source string, t *table.Table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables[key] = handed{t, source}
}

// Want records that an instance of block key is set up and will start.
func (s *carryStore) Want(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted[key]++
}

// Take returns the table of block key, else one of source whose block is
// wanted by no new instance.
func (s *carryStore) Take(key, source string) (*table.Table, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wanted[key] > 0 {
		if s.wanted[key]--; s.wanted[key] == 0 {
			delete(s.wanted, key)
		}
	}
	if h, ok := s.tables[key]; ok {
		delete(s.tables, key)
		return h.table, true
	}
	if source == "" {
		return nil, false
	}
	keys := make([]string, 0, len(s.tables))
	for k := range s.tables {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same choice every time
	for _, k := range keys {
		if h := s.tables[k]; h.source == source && s.wanted[k] == 0 {
			delete(s.tables, k)
			return h.table, true
		}
	}
	return nil, false
}

// Failed forgets the instances set up for a reload that failed: none of
// them will start.
func (s *carryStore) Failed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.wanted)
}

// Drop removes what block key handed over, if no one took it.
func (s *carryStore) Drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tables, key)
}

// sourceKey is the identity of v's table source: the same source gives the
// same table, whatever the port and zones of its block.
func (v *VirtualConsul) sourceKey() string {
	if v.src != nil {
		return v.src.Key()
	}
	if v.snapshot != "" {
		return "snapshot " + v.snapshot
	}
	return ""
}
