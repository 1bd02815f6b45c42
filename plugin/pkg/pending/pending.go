// Package pending stops the plugin instances a failed reload started.
//
// Caddy runs a new instance's OnStartup before it binds the new servers.
// When binding then fails (a busy port), it discards the new instance
// without running its OnShutdown, and runs the old instance's
// OnRestartFailed instead: whatever the new instance's OnStartup started
// (sources, watches, sockets, goroutines) would run on, unseen, for the
// life of the process. So every plugin:
//
//   - calls Begin in its OnRestart (of the old instance): everything
//     running so far is live, and stays out of reach of Failed;
//   - calls Started in its OnStartup with the function that stops what it
//     started (idempotent: the instance's OnShutdown may call it again);
//   - calls Failed first thing in its OnRestartFailed (of the old
//     instance): it stops the instances started since Begin, before the
//     old instance takes back its sockets.
//
// Restarts are serialised by caddy, so one list serves every plugin and
// server block of the process. A reload that fails while the old
// configuration has none of meshdns's plugins runs none of these hooks: its
// new instances are not stopped.
package pending

import "sync"

var (
	mu      sync.Mutex
	started []func()
)

// Begin marks every instance started so far as live.
func Begin() {
	mu.Lock()
	started = nil
	mu.Unlock()
}

// Started records how to stop an instance that has just started.
func Started(stop func()) {
	mu.Lock()
	started = append(started, stop)
	mu.Unlock()
}

// Failed stops every instance started since Begin, newest first.
func Failed() {
	mu.Lock()
	s := started
	started = nil
	mu.Unlock()
	for i := len(s) - 1; i >= 0; i-- {
		s[i]()
	}
}
