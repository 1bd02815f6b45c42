package updater

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
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

// checker runs the checks of the tracked containers every checkInterval (and
// at once when a container with a check arrives), at most checkConcurrency
// at a time, each bounded by checkTimeout.
func (u *Updater) checker(ctx context.Context) {
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, MaxResponseHeaderBytes: 16 << 10},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	t := time.NewTicker(u.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-u.kick:
		}
		u.checkRound(ctx, client)
	}
}

type checkJob struct {
	id   string
	spec checkSpec
	ip   netip.Addr
}

// checkRound probes every tracked container that has a check and applies
// the results.
func (u *Updater) checkRound(ctx context.Context, client *http.Client) {
	var jobs []checkJob
	u.mu.Lock()
	for id, t := range u.tracked {
		if t.check != nil && len(t.recs) > 0 {
			jobs = append(jobs, checkJob{id: id, spec: *t.check, ip: t.recs[0].IP})
		}
	}
	u.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	results := make([]error, len(jobs))
	sem := make(chan struct{}, checkConcurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			pctx, cancel := context.WithTimeout(ctx, u.cfg.CheckTimeout)
			results[i] = probe(pctx, client, j.spec, j.ip)
			cancel()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, j := range jobs {
		res := checkPass
		if results[i] != nil {
			res = checkFail
		}
		u.counts.checks[res].Add(1)
		updaterChecks.WithLabelValues(checkResultNames[res]).Inc()
		t := u.tracked[j.id]
		if t == nil || t.check == nil || *t.check != j.spec {
			continue // gone or changed meanwhile
		}
		healthy := res == checkPass
		if healthy != t.healthy {
			if healthy {
				log.Infof("Container %s (%s): check %s passes, %s added", shortID(j.id), t.c.Name, j.spec, t.c.fqdn())
			} else {
				log.Infof("Container %s (%s): check %s fails (%v), %s withheld", shortID(j.id), t.c.Name, j.spec, results[i], t.c.fqdn())
			}
			t.healthy = healthy
			u.applyLocked(t)
		}
	}
}
