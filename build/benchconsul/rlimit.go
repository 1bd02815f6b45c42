package main

import (
	"log"
	"syscall"
)

// raiseFileLimit lifts this process's open-file limit, which meshdns and the
// Consul server it starts inherit, to what a fleet of n sources needs: an
// extinction makes every source re-read its cached services at once, and
// each read holds a descriptor in meshdns and two in the counting proxy
// (client side and upstream side). At 1,000 sources the default 20,000 ran
// out in the proxy ("accept4: too many open files"), so the requests it
// dropped were counted as retries. Only raised, never lowered; when the
// hard limit cannot be raised (no CAP_SYS_RESOURCE) the soft one goes to
// the hard one and the run says so.
func raiseFileLimit(n int) {
	want := uint64(100*n + 20000)
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		log.Printf("open-file limit: %v", err)
		return
	}
	if l.Cur >= want {
		return
	}
	next := syscall.Rlimit{Cur: want, Max: max(l.Max, want)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		next = syscall.Rlimit{Cur: l.Max, Max: l.Max}
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next)
		log.Printf("open-file limit: %d wanted for %d sources, kept at %d (%v); the counting proxy is split over child processes to fit it", want, n, l.Max, err)
		return
	}
	log.Printf("open-file limit: %d (was %d/%d) for %d sources", want, l.Cur, l.Max, n)
}
