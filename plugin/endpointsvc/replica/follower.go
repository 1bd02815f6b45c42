package replica

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// Source is the follower (`source replica URL`): a feed.Source of the
// Kubernetes DNS model read from a leader's stream. It resumes from the
// origin of the table the plugin serves (a snapshot, a carried table, its
// own last state), keeps that table through a broken stream, and connects
// again after Backoff.
type Source struct {
	url       *url.URL // the stream's URL (Path added), without a query
	tokenFile string
	token     *Token // nil: none sent
	zone      string
	tls       *TLSFiles // nil: the system roots (https://)

	clientMu  sync.Mutex
	client    *http.Client
	clientTLS *tls.Config // the configuration client was made with

	// Backoff and MaxBackoff bound the wait before connecting again
	// (Backoff, MaxBackoff); Healthy is how long a stream that applied a
	// state must have lasted to start the waits over (Healthy); Silence
	// how long a stream may send nothing (Silence). Tests shorten them.
	Backoff, MaxBackoff, Healthy, Silence time.Duration
	// Waits, when set, is told each wait (tests).
	Waits func(time.Duration)
	// Options, set before Run, names the follower's options that shape
	// its tables (noendpoints, pods verified): its tables' origins carry
	// it, and a table built with others is not resumed but replaced by a
	// whole state. No "/" in it.
	Options string

	// version is the version asked for (0: Version; tests ask older ones)
	version int
	// wholeNext: the next stream asks for the whole state (a bucket
	// resume's result was not the state its leader named)
	wholeNext atomic.Bool
	// last is the served table whose bucket digests were last computed
	// (only Run's goroutine uses it)
	last struct {
		table   weak.Pointer[k8sdns.Table] // weak: an old table is not kept alive
		digest  digest
		buckets *buckets
	}

	Stats FollowerStats
}

// FollowerStats count the follower's work (tests read them).
type FollowerStats struct {
	Connects      atomic.Int64 // streams opened (200)
	Full          atomic.Int64 // whole states applied
	Patches       atomic.Int64 // change batches applied
	FullRecords   atomic.Int64 // name records received in whole states
	ChangeRecords atomic.Int64 // name records received as changes
	Bytes         atomic.Int64 // bytes received
	Bucketed      atomic.Int64 // streams opened with the buckets that differed (version 4)
	Refused       atomic.Int64 // bucket resumes refused (a result not the state named, a bad line): the next asks for the whole state
}

// NewSource returns a follower of the leader at base (http:// or
// https://, e.g. http://10.96.0.10:9155), sending the token in tokenFile
// ("" none); zone labels its metrics.
func NewSource(base, tokenFile, zone string) (*Source, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bad replica URL %q: want http://HOST:PORT or https://HOST:PORT", base)
	}
	if u.Hostname() == "" {
		// http://:9155 is what http://{$VAR}:9155 reads when VAR is unset
		// (the Corefile's environment variables expand to nothing): it
		// would follow whatever listens on the follower's own port.
		return nil, fmt.Errorf("bad replica URL %q: no host (an environment variable of the Corefile, {$VAR}, that is not set expands to nothing)", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + Path
	s := &Source{url: u, tokenFile: tokenFile, zone: zone, client: newClient(nil),
		Backoff: Backoff, MaxBackoff: MaxBackoff, Healthy: Healthy, Silence: Silence}
	if tokenFile != "" {
		s.token = NewToken(tokenFile)
	}
	return s, nil
}

// UseTLS checks the leader's certificate (and presents a client
// certificate) with files, read again when they change; the URL must be
// https://.
func (f *Source) UseTLS(files *TLSFiles) error {
	if f.url.Scheme != "https" {
		return fmt.Errorf("tls needs an https:// replica URL, not %q", f.url.Scheme+"://")
	}
	if _, err := files.Client(); err != nil {
		return err
	}
	f.tls = files
	return nil
}

// newClient is the follower's HTTP client: no proxy from the environment,
// bounded dials and headers, no overall timeout (the stream is long; the
// silence timer ends a dead one); cfg is its TLS configuration (nil: the
// system roots).
//
// Invariant: every stream opens a connection of its own. A stream is one
// long request, so keep-alive saves nothing; a connection kept after a
// refusal (401, a busy 503, a replica not serving yet) would carry every
// retry to that same replica behind the Service, which balances
// connections, not requests: a follower refused by one replica must be
// able to reach another.
func newClient(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:       cfg,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		DisableKeepAlives:     true,
		DisableCompression:    true,
	}}
}

// httpClient is the client for the next connection: made again when the
// TLS files changed.
func (f *Source) httpClient() (*http.Client, error) {
	f.clientMu.Lock()
	defer f.clientMu.Unlock()
	if f.tls == nil {
		return f.client, nil
	}
	cfg, err := f.tls.Client()
	if err != nil {
		return nil, err
	}
	if cfg != f.clientTLS {
		f.client.CloseIdleConnections()
		f.client, f.clientTLS = newClient(cfg), cfg
	}
	return f.client, nil
}

// Name implements feed.Source.
func (f *Source) Name() string { return "replica" }

// Key implements feed.Source.
func (f *Source) Key() string {
	k := fmt.Sprintf("replica %q token_file=%q", f.url.String(), f.tokenFile)
	if f.tls != nil {
		k += " " + f.tls.String()
	}
	return k
}

// Run implements feed.Source: it follows the stream until ctx is done,
// connecting again after every end: after a wait that doubles with each
// failure in a row from Backoff up to MaxBackoff, drawn between half of
// it and all of it (a thousand followers of a restarted leader come back
// spread, not at once), at least the leader's Retry-After. The end of a
// healthy stream (a replica stopped in a rollout, most often) is followed
// by a wait drawn in [0, Backoff/2): the same spread, without the fixed
// half a Backoff every change would otherwise wait on top of it; and the
// failures after it start again from Backoff. Never a busy loop: a healthy
// stream lasts Healthy at least.
func (f *Source) Run(ctx context.Context, s feed.Sink) {
	connectedGauge.WithLabelValues(f.zone).Set(0) // listed from the start: a follower that never connects shows
	b := backoff{base: f.Backoff, max: f.MaxBackoff}
	for {
		start := time.Now()
		applied, err := f.follow(ctx, s)
		if ctx.Err() != nil {
			return
		}
		s.Failed(err)
		var d time.Duration
		if applied && time.Since(start) >= f.Healthy {
			b.reset()
			d = b.soon()
		} else {
			d = b.next()
		}
		var busy *busyError
		if errors.As(err, &busy) && busy.retryAfter > d {
			d = busy.retryAfter
		}
		if f.Waits != nil {
			f.Waits(d)
		}
		if !pause.Sleep(ctx, d) {
			return
		}
	}
}

// backoff is a jittered exponential wait: the n-th in a row is drawn in
// [w/2, w) with w = min(base * 2^n, max).
type backoff struct {
	base, max time.Duration
	n         int
}

func (b *backoff) next() time.Duration {
	w := b.base
	for i := 0; i < b.n && w < b.max; i++ {
		w *= 2
	}
	w = min(w, max(b.max, b.base))
	b.n++
	half := w / 2
	if half <= 0 {
		return w
	}
	return half + mrand.N(w-half)
}

func (b *backoff) reset() { b.n = 0 }

// soon is the wait after a healthy stream: drawn in [0, base/2), and the
// count of failures in a row stays 0.
func (b *backoff) soon() time.Duration {
	if b.base/2 <= 0 {
		return 0
	}
	return mrand.N(b.base / 2)
}

// busyError is a leader's 503 with a Retry-After.
type busyError struct {
	msg        string
	retryAfter time.Duration
}

func (e *busyError) Error() string { return e.msg }

// servedTable returns how to read the table the plugin serves.
func servedTable(s feed.Sink) func() *k8sdns.Table {
	sv, ok := s.(feed.Served)
	if !ok {
		return func() *k8sdns.Table { return nil }
	}
	return func() *k8sdns.Table {
		t, _ := sv.Served().(*k8sdns.Table)
		return t
	}
}

// follow reads one stream until it ends; the error says why, applied
// whether a state of it was applied.
func (f *Source) follow(ctx context.Context, s feed.Sink) (applied bool, _ error) {
	a := &applier{sink: s, served: servedTable(s), stats: &f.Stats, zone: f.zone, options: f.Options}
	if t := a.served(); t != nil {
		// a table of other options (a snapshot of before a restart, say)
		// is replaced whole; one of an origin without options is taken
		// for this follower's (an older version's snapshot)
		if p, ok := parsePosition(t.Origin()); ok && (p.options == "" || p.options == f.Options) && !f.wholeNext.Swap(false) {
			a.askEpoch, a.askGen, a.askDigest = p.epoch, p.gen, p.digest
			if f.askVersion() >= 4 && p.digest != zeroDigest {
				a.askBuckets = f.bucketsOf(t, p.digest)
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool
	timer := time.AfterFunc(f.Silence, func() { silent.Store(true); cancel() })
	defer timer.Stop()
	resp, err := f.open(ctx, a.askEpoch, a.askGen, a.askDigest, a.askBuckets)
	if err != nil {
		return false, f.ended(&silent, err)
	}
	defer resp.Body.Close()
	f.Stats.Connects.Add(1)
	connectedGauge.WithLabelValues(f.zone).Set(1)
	defer connectedGauge.WithLabelValues(f.zone).Set(0)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if err != nil {
			return a.applied, f.ended(&silent, err)
		}
		timer.Reset(f.Silence)
		f.Stats.Bytes.Add(int64(len(line) + 1))
		receivedBytes.WithLabelValues(f.zone).Add(float64(len(line) + 1))
		if err := a.line(line); err != nil {
			if a.bucketed || errors.Is(err, errDigest) {
				// a bucket resume that fails in any way - its digest, a
				// record outside its buckets - is not tried again: the
				// next stream asks for the whole state
				f.wholeNext.Store(true)
				f.Stats.Refused.Add(1)
			}
			return a.applied, fmt.Errorf("replica %s: line %d: %w", f.url.Host, n, err)
		}
		if n == 1 && a.bucketed {
			f.Stats.Bucketed.Add(1)
		}
	}
}

// askVersion is the version the follower asks for.
func (f *Source) askVersion() int {
	if f.version > 0 {
		return f.version
	}
	return Version
}

// bucketsOf returns t's bucket digests when t's content is the state of
// digest d (its origin's), else nil: a table its options changed
// (noendpoints, pods) holds other content than its leader's, and its
// buckets would not match any leader's. The last table's are kept.
func (f *Source) bucketsOf(t *k8sdns.Table, d digest) *buckets {
	if f.last.table.Value() != t {
		f.last.digest, f.last.buckets = wholeBuckets(t)
		f.last.table = weak.Make(t)
	}
	if f.last.digest != d {
		return nil
	}
	return f.last.buckets
}

// open asks for the stream from (epoch, gen), or from the state of
// digest d, or (bs not nil) the buckets that differ from bs ("" : the
// whole state).
func (f *Source) open(ctx context.Context, epoch string, gen uint64, d digest, bs *buckets) (*http.Response, error) {
	u := *f.url
	q := url.Values{"v": {strconv.Itoa(f.askVersion())}}
	if epoch != "" {
		q.Set("epoch", epoch)
		q.Set("gen", strconv.FormatUint(gen, 10))
		if d != zeroDigest {
			q.Set("digest", d.String())
		}
		if bs != nil {
			q.Set("buckets", bs.lanes())
		}
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if f.token != nil {
		h, err := f.token.Header() // per connection: a rotated token is picked up
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", h)
	}
	client, err := f.httpClient()
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, f.tlsError(err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		err := fmt.Errorf("%s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(msg)))
		if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && n > 0 && resp.StatusCode == http.StatusServiceUnavailable {
			return nil, &busyError{msg: err.Error(), retryAfter: time.Duration(min(n, 300)) * time.Second}
		}
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != ContentType {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: content type %q, want %s", u.Redacted(), mt, ContentType)
	}
	return resp, nil
}

// tlsError says, of a certificate the follower refused, which CA it was
// checked against.
func (f *Source) tlsError(err error) error {
	var unknown x509.UnknownAuthorityError
	var invalid x509.HostnameError
	ca := "the system roots"
	if f.tls != nil && f.tls.CA != "" {
		ca = "the CA in " + f.tls.CA
	}
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("the leader's certificate is not signed by %s: %w", ca, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("the leader's certificate is not for the name checked (tls_servername, or the URL's host): %w", err)
	}
	return err
}

// ended names why a stream ended.
func (f *Source) ended(silent *atomic.Bool, err error) error {
	switch {
	case silent.Load():
		return fmt.Errorf("replica %s: nothing received for %v", f.url.Host, f.Silence)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("replica %s: the stream ended", f.url.Host)
	}
	return fmt.Errorf("replica %s: %w", f.url.Host, err)
}

// readLine reads one line without its newline, of at most maxLine bytes.
// The line is valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	b, err := br.ReadSlice('\n')
	if err == nil {
		return b[:len(b)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF // a cut line
		}
		return nil, err
	}
	long := append([]byte(nil), b...)
	for {
		b, err = br.ReadSlice('\n')
		long = append(long, b...)
		if len(long) > maxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		switch {
		case err == nil:
			return long[:len(long)-1], nil
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}
