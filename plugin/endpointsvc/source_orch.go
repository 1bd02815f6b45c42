package endpointsvc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/pkg/pause"
)

// orchSource polls an orchestrator's HTTP API for the state JSON. It sends
// If-None-Match with the last ETag (a 304 is "unchanged"), a bearer token
// read from token_file on every request, times out slow responses, refuses
// bodies over maxBody, and backs off on errors (doubling from the interval
// up to maxBackoff). Any failure keeps the last good state serving.
type orchSource struct {
	url        string
	interval   time.Duration
	timeout    time.Duration
	maxBackoff time.Duration
	maxBody    int64
	tokenFile  string
	tlsConfig  *tls.Config                      // nil: default TLS settings for https URLs
	decode     func([]byte) (feed.State, error) // the schema's state document

	client *http.Client
	etag   string
	hash   contentHash
	have   bool
}

// Default settings of the orch source.
const (
	defaultOrchInterval = 10 * time.Second
	defaultOrchTimeout  = 5 * time.Second
	defaultMaxBackoff   = time.Minute
	defaultMaxBody      = 64 << 20
)

func (o *orchSource) Name() string { return "orch" }

func (o *orchSource) Key() string { return fmt.Sprintf("orch %q", o.url) }

func (o *orchSource) Run(ctx context.Context, s feed.Sink) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if o.tlsConfig != nil {
		tr.TLSClientConfig = o.tlsConfig
	}
	o.client = &http.Client{Transport: tr, Timeout: o.timeout}
	defer tr.CloseIdleConnections()
	failures := 0
	for {
		if err := o.poll(ctx, s); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			s.Failed(err)
		} else {
			failures = 0
		}
		if !pause.Sleep(ctx, backoff(o.interval, o.maxBackoff, failures)) {
			return
		}
	}
}

// backoff is the wait before the next poll after failures consecutive
// failures: the interval, doubled per failure, capped at max (but never
// below the interval).
func backoff(interval, max time.Duration, failures int) time.Duration {
	d := interval
	for i := 0; i < failures && d < max; i++ {
		d *= 2
	}
	if d > max && max > interval {
		d = max
	}
	if d < interval {
		d = interval
	}
	return d
}

// poll makes one request. A nil error means the state was updated or was
// unchanged (and s was told so).
func (o *orchSource) poll(ctx context.Context, s feed.Sink) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if o.etag != "" && o.have {
		req.Header.Set("If-None-Match", o.etag)
	}
	if o.tokenFile != "" {
		tok, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("token_file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && o.have:
		s.Unchanged()
		return nil
	case resp.StatusCode != http.StatusOK:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s", o.url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, o.maxBody+1))
	if err != nil {
		return fmt.Errorf("GET %s: reading body: %w", o.url, err)
	}
	if int64(len(b)) > o.maxBody {
		return fmt.Errorf("GET %s: body larger than %d bytes", o.url, o.maxBody)
	}
	h := hashOf(b)
	if o.have && h == o.hash {
		o.etag = resp.Header.Get("ETag")
		s.Unchanged()
		return nil
	}
	st, err := o.decode(b)
	if err != nil {
		return fmt.Errorf("GET %s: %w", o.url, err)
	}
	o.etag, o.hash, o.have = resp.Header.Get("ETag"), h, true
	s.Update(st)
	return nil
}

var errNoSource = errors.New("no source: want 'source file PATH', 'source orch URL' or 'source kubernetes'")
