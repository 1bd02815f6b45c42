// Package carry hands a plugin's last good state from the server instance a
// reload (SIGUSR1) replaces to the instance that replaces it, so a reload
// during a control-plane outage keeps answering even without a snapshot.
//
// Protocol, per plugin instance with a stable key (plugin name + zones):
//   - the old instance Puts its state in OnRestart (before the new one sets up);
//   - the new instance Takes it in OnStartup, before its sources run;
//   - the old instance Drops its key in OnRestartFailed (it keeps serving
//     its own state, and nothing stale is left for a later reload);
//   - the old instance Drops its key in OnShutdown, which caddy runs once
//     the new instance has started: when the reload changed the key (other
//     zones or options), nothing took the value, and it must not wait for a
//     later reload back to this key (which would prefer a stale table to a
//     newer snapshot) nor stay in memory for the life of the process.
//
// Values must be immutable (the plugins' tables are): old and new instances
// may read the same value at once.
package carry

import "sync"

// Store holds carried values by key. The zero value is ready to use.
type Store[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

// Put records v under key, replacing what was there.
func (s *Store[T]) Put(key string, v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]T)
	}
	s.m[key] = v
}

// Take returns and removes the value under key.
func (s *Store[T]) Take(key string) (v T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok = s.m[key]
	delete(s.m, key)
	return v, ok
}

// Drop removes key, if present.
func (s *Store[T]) Drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
