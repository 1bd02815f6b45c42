package kubesource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/pkg/pause"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// run is the state of the source's loop.
type run struct {
	k       *Source
	s       feed.Sink
	w       *watcher
	client  kubernetes.Interface
	gate    *gate // nil with a test's client
	synced  bool  // the first build was delivered
	failing bool  // a failure was reported and the probe has not succeeded since

	lastProbe, lastPatch time.Time
}

// loop builds once the informers synced, patches after that, and probes
// the API server, until ctx is done.
func (k *Source) loop(ctx context.Context, s feed.Sink, client kubernetes.Interface, g *gate, w *watcher) {
	r := &run{k: k, s: s, w: w, client: client, gate: g}
	waiter := &syncWaiter{pending: w.regs}
	syncWait := waiter.first()
	probe := time.NewTimer(firstProbe)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-w.errs:
			r.fail(err)
			probe.Reset(r.untilProbe()) // failing: the shorter interval
		case <-w.kick:
			if r.synced && !r.patch(ctx) {
				return
			}
		case <-syncWait:
			if syncWait = waiter.next(); syncWait == nil {
				r.build()
				probe.Reset(r.untilProbe()) // synced: the longer interval
			}
		case <-probe.C:
			r.probe(ctx)
			probe.Reset(r.untilProbe())
		}
	}
}

// firstProbe is when the first probe runs after the start.
const firstProbe = 100 * time.Millisecond

// probeEvery is the probe's interval now: short while failing or not
// synced, long while healthy.
func (r *run) probeEvery() time.Duration {
	if r.synced && !r.failing {
		return healthyProbeInterval
	}
	return probeInterval
}

// untilProbe is the time until the next probe is due. The loop's probe
// timer is always armed with it after anything that moves it (a probe, a
// failure, the first build), so that the loop wakes for probes only, not
// on a fixed tick: an idle source costs no wake-ups between them.
func (r *run) untilProbe() time.Duration {
	return max(r.probeEvery()-time.Since(r.lastProbe), time.Millisecond)
}

// fail reports err, once per failure.
func (r *run) fail(err error) {
	if !r.failing {
		r.failing = true
		r.s.Failed(err)
	}
}

// build delivers the whole state, once the informers synced.
func (r *run) build() {
	r.synced, r.failing = true, false
	select { // the initial adds are all in this build
	case <-r.w.kick:
	default:
	}
	r.w.changed.take()
	r.k.Stats.Builds.Add(1)
	r.s.Update(r.k.model.whole(r.w.stores))
}

// patch delivers what changed. A change after a quiet spell is patched at
// once; under churn at most one patch per debounce interval carries all
// the changes that came meanwhile. It reports false when ctx ended while
// waiting. A patch is no verdict on the API's health: the probe's success
// ends a failure, so that one object's events do not log a recovery that
// the next error takes back.
func (r *run) patch(ctx context.Context) bool {
	debounce := r.k.Debounce
	if debounce == 0 {
		debounce = defaultDebounce
	}
	if wait := debounce - time.Since(r.lastPatch); wait > 0 {
		if !pause.Sleep(ctx, wait) {
			return false
		}
	}
	select { // changes that came while waiting are in this patch
	case <-r.w.kick:
	default:
	}
	c := r.w.changed.take()
	if c.empty() {
		return true // what was marked went out with the last patch
	}
	p := r.k.model.patch(r.w.stores, c, func() feed.State { return r.k.model.whole(r.w.stores) })
	r.k.Stats.Patches.Add(1)
	r.k.Stats.Rebuilt.Add(int64(p.Len()))
	r.s.Patch(p)
	r.lastPatch = time.Now()
	return true
}

// probe asks the API server for one Service of the watched namespace -
// often while failing or not synced, rarely otherwise: the informers retry
// a failing list or watch on their own, mostly without telling (watch-list
// backs off silently), and the probe notices an unreachable API server and
// its recovery. It is the cheapest request the documented RBAC grants with
// either schema (Nodes are not granted with schema kubernetes): a list
// limited to one object, at the latest resourceVersion (with
// resourceVersion 0 the API server answers from its watch cache and
// ignores the limit: every probe decoded every Service, megabytes every
// 2 s while the API server was away).
func (r *run) probe(ctx context.Context) {
	if time.Since(r.lastProbe) < r.probeEvery() {
		return
	}
	r.lastProbe = time.Now()
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := r.client.CoreV1().Services(r.k.namespace()).List(c, metav1.ListOptions{Limit: 1})
	switch {
	case ctx.Err() != nil:
	case err != nil && apierrors.IsForbidden(err):
		r.w.denied.report("probe", err)
	case err != nil:
		var answer apierrors.APIStatus
		if r.gate != nil && !errors.As(err, &answer) {
			r.gate.suspect(err) // no answer in time: hold the informers' requests too
		}
		r.fail(fmt.Errorf("kubernetes API: %w", err))
	case r.failing:
		r.failing = false
		select {
		case <-r.w.errs:
		default:
		}
		if r.synced {
			r.s.Unchanged()
		}
	}
}

// syncWaiter waits for the handler registrations to sync without polling:
// it hands out the Done channel of the first one not synced yet, so the
// first build starts the moment the last initial add is delivered.
type syncWaiter struct {
	pending []cache.ResourceEventHandlerRegistration
}

// next drops the registrations that synced and returns the Done channel of
// the first one that has not, or nil once all have.
func (w *syncWaiter) next() <-chan struct{} {
	for len(w.pending) > 0 {
		done := w.pending[0].HasSyncedChecker().Done()
		select {
		case <-done:
			w.pending = w.pending[1:]
		default:
			return done
		}
	}
	return nil
}

// first is next, except that with every registration synced already it
// returns a closed channel (the first build is still due), and with none
// to wait for (nil pending from the start) nil.
func (w *syncWaiter) first() <-chan struct{} {
	if len(w.pending) == 0 {
		return nil
	}
	if ch := w.next(); ch != nil {
		return ch
	}
	now := make(chan struct{})
	close(now)
	return now
}
