package updater

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// checkLabel is the container label holding a health check: "tcp:<port>"
// or "http:<port><path>" (path optional, default "/").
const checkLabel = "meshdns.check"

// Results of a check, the label values of the checks metric.
const (
	checkPass = iota
	checkFail
	checkInvalid
	numCheckResults
)

var checkResultNames = [numCheckResults]string{"pass", "fail", "invalid"}

// checkSpec is a parsed meshdns.check label.
type checkSpec struct {
	kind string // tcp or http
	port int
	path string // http only; starts with "/"
}

func (s checkSpec) String() string { return s.kind + ":" + strconv.Itoa(s.port) + s.path }

// parseCheck parses a meshdns.check label value.
func parseCheck(v string) (checkSpec, error) {
	kind, rest, ok := strings.Cut(strings.TrimSpace(v), ":")
	if !ok || (kind != "tcp" && kind != "http") {
		return checkSpec{}, fmt.Errorf("%q: want tcp:<port> or http:<port><path>", v)
	}
	digits := rest
	path := ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		digits, path = rest[:i], rest[i:]
	}
	port, err := strconv.Atoi(digits)
	if err != nil || port < 1 || port > 65535 || digits[0] == '+' || digits[0] == '-' {
		return checkSpec{}, fmt.Errorf("%q: port %q is not in 1..65535", v, digits)
	}
	switch kind {
	case "tcp":
		if path != "" {
			return checkSpec{}, fmt.Errorf("%q: a tcp check takes no path", v)
		}
	case "http":
		if path == "" {
			path = "/"
		}
		if len(path) > 1024 || strings.IndexFunc(path, func(r rune) bool { return r <= ' ' || r == '#' || r == 0x7f }) >= 0 {
			return checkSpec{}, fmt.Errorf("%q: the path holds a space, control character or #, or is over 1024 bytes", v)
		}
	}
	return checkSpec{kind: kind, port: port, path: path}, nil
}

// probe runs one check against ip within ctx's deadline; nil means pass.
func probe(ctx context.Context, client *http.Client, spec checkSpec, ip netip.Addr) error {
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(spec.port))
	if spec.kind == "tcp" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+spec.path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "meshdns-check")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// checker runs the checks of the tracked containers until ctx ends: each
// container is checked every checkInterval (at once when it arrives, a
// first check going before the periodic ones), each check bounded by
// checkTimeout, the checks started at most CheckRate a second over all
// containers (so a thousand containers never make a connect storm), and
// each result applied as soon as its check ends — a slow or blackholed
// container holds up nobody else's. A container whose check passed is
// withheld only after CheckFailures failures in a row (Docker's
// HEALTHCHECK retries); one that never passed stays out until it does.
func (u *Updater) checker(ctx context.Context) {
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, MaxResponseHeaderBytes: 16 << 10},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	probeFn := u.probe
	if probeFn == nil {
		probeFn = func(ctx context.Context, spec checkSpec, ip netip.Addr) error { return probe(ctx, client, spec, ip) }
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	gap := time.Second / time.Duration(u.rate())
	next := time.Now() // the earliest start of the next check
	for {
		// A tenth of a second's worth at a time: a new container's first
		// check, due meanwhile, goes before the rest of a long backlog.
		jobs, wake := u.dueChecks(time.Now(), max(u.rate()/10, 1))
		for _, j := range jobs {
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					u.releaseChecks(jobs)
					return
				}
			}
			if now := time.Now(); now.After(next) {
				next = now
			}
			next = next.Add(gap)
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, u.cfg.CheckTimeout)
				err := probeFn(pctx, j.spec, j.ip)
				cancel()
				if ctx.Err() == nil {
					u.applyCheck(j, err)
				}
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wake):
		case <-u.kick:
		}
	}
}

// rate is the configured connect rate.
func (u *Updater) rate() int {
	if u.cfg.CheckRate > 0 {
		return u.cfg.CheckRate
	}
	return DefaultCheckRate
}

type checkJob struct {
	id   string
	spec checkSpec
	ip   netip.Addr
}

// dueChecks returns at most limit of the checks due at now (first checks
// first, then by due time), marking them running, and how long until the
// next one is due (at most a tenth of checkInterval; at once when more
// were due than it returned).
func (u *Updater) dueChecks(now time.Time, limit int) ([]checkJob, time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	wake := u.cfg.CheckInterval / 10
	type due struct {
		checkJob
		first bool
		at    time.Time
	}
	var ds []due
	for id, t := range u.tracked {
		if t.check == nil || len(t.recs) == 0 || t.checking {
			continue
		}
		if t.next.After(now) {
			wake = min(wake, t.next.Sub(now))
			continue
		}
		ds = append(ds, due{checkJob{id: id, spec: *t.check, ip: t.recs[0].IP}, !t.checked, t.next})
	}
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].first != ds[j].first {
			return ds[i].first
		}
		return ds[i].at.Before(ds[j].at)
	})
	if len(ds) > limit {
		ds, wake = ds[:limit], 0
	}
	for _, d := range ds {
		u.tracked[d.id].checking = true
	}
	jobs := make([]checkJob, len(ds))
	for i := range ds {
		jobs[i] = ds[i].checkJob
	}
	return jobs, max(wake, 10*time.Millisecond)
}

// releaseChecks marks jobs not running (the checker stops).
func (u *Updater) releaseChecks(jobs []checkJob) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, j := range jobs {
		if t := u.tracked[j.id]; t != nil {
			t.checking = false
		}
	}
}

// failures is the configured failure threshold.
func (u *Updater) failures() int {
	if u.cfg.CheckFailures > 0 {
		return u.cfg.CheckFailures
	}
	return DefaultCheckFailures
}

// applyCheck applies the result of one check (err nil: passed) at once.
func (u *Updater) applyCheck(j checkJob, err error) {
	res := checkPass
	if err != nil {
		res = checkFail
	}
	u.counts.checks[res].Add(1)
	updaterChecks.WithLabelValues(checkResultNames[res]).Inc()
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.tracked[j.id]
	if t == nil || t.check == nil || *t.check != j.spec {
		return // gone or changed meanwhile
	}
	t.checking, t.checked = false, true
	t.next = time.Now().Add(u.cfg.CheckInterval)
	healthy := t.healthy
	if err == nil {
		t.fails, healthy = 0, true
	} else if t.fails++; !t.healthy || t.fails >= u.failures() {
		healthy = false
	}
	if healthy == t.healthy {
		return
	}
	if healthy {
		log.Infof("Container %s (%s): check %s passes, %s added", shortID(j.id), t.c.Name, j.spec, t.c.fqdn())
	} else {
		log.Infof("Container %s (%s): check %s fails (%v, %d in a row), %s withheld", shortID(j.id), t.c.Name, j.spec, err, t.fails, t.c.fqdn())
	}
	t.healthy = healthy
	u.applyLocked(t)
}
