// Package inspect serves a read-only HTTP listing of what meshdns's
// plugins serve: GET /<plugin> (virtualconsul, endpointsvc, mdnsfallback)
// streams every registered instance's live table as JSON, each stating
// the table's generation. It is a listener of its own, in the style of
// CoreDNS's health and ready plugins, and answers no DNS query.
package inspect

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coredns/coredns/plugin/pkg/reuseport"
)

// Plugins are the paths inspect answers, one per plugin that lists.
var Plugins = []string{"virtualconsul", "endpointsvc", "mdnsfallback"}

// A listing streams for as long as its client reads, and holds its
// table's generation meanwhile: a client that stops reading must not hold
// it (nor a goroutine, nor the table's memory) for ever, and many clients
// must not make the process hold many tables. So every write of a listing
// must progress within writeDeadline (a slow client still gets a table of
// millions of names, 64 KiB at a time), and at most maxListings stream at
// once; one more is answered 503 with Retry-After.
const (
	writeDeadline = 10 * time.Second
	maxListings   = 4
)

// Inspect is the listener of one inspect directive.
type Inspect struct {
	addr      string
	tokenFile string
	// deadline and slots: writeDeadline and maxListings (tests shorten
	// and shrink them).
	deadline time.Duration
	slots    chan struct{}

	mu    sync.Mutex
	token string // read at start; "" without token_file
	srv   *http.Server
	ln    net.Listener // closed by stop itself: Shutdown misses one Serve has not taken up yet
}

// start reads the token and opens the listener.
func (in *Inspect) start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.srv != nil {
		return nil
	}
	in.token = ""
	if in.tokenFile != "" {
		b, err := os.ReadFile(in.tokenFile)
		if err != nil {
			return fmt.Errorf("inspect: token_file: %w", err)
		}
		if in.token = strings.TrimSpace(string(b)); in.token == "" || strings.ContainsAny(in.token, " \t\r\n") {
			return fmt.Errorf("inspect: token_file %s: want one token on one line", in.tokenFile)
		}
	}
	ln, err := reuseport.Listen("tcp", in.addr)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	// No write timeout: a listing of a million names streams for seconds;
	// each write of it has writeDeadline instead (progressWriter).
	in.srv = &http.Server{Handler: in, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
	srv := in.srv
	in.ln = ln
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// stop closes the listener (at a reload, the new instance opens its own).
func (in *Inspect) stop() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.srv.Shutdown(ctx); err != nil {
		_ = in.srv.Close() // a listing still streaming
	}
	_ = in.ln.Close()
	in.srv, in.ln = nil, nil
	return nil
}

// ServeHTTP answers GET /<plugin>.
func (in *Inspect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !in.allowed(w, r) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpError(w, http.StatusMethodNotAllowed, "inspect is read-only: GET only")
		return
	}
	name := strings.Trim(r.URL.Path, "/")
	slots := in.listingSlots()
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d listings streaming already: try again", cap(slots)))
		return
	}
	known := false
	for _, p := range Plugins {
		known = known || p == name
	}
	if !known {
		httpError(w, http.StatusNotFound, fmt.Sprintf("no listing %q: want one of /%s", r.URL.Path, strings.Join(Plugins, ", /")))
		return
	}
	in.list(w, r, name)
}

// list streams {"plugin": NAME, "instances": [...]} : each instance's
// object as its Lister writes it.
func (in *Inspect) list(w http.ResponseWriter, r *http.Request, name string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	d := in.deadline
	if d == 0 {
		d = writeDeadline
	}
	bw := bufio.NewWriterSize(progressWriter{w: w, rc: http.NewResponseController(w), d: d}, 64<<10)
	fmt.Fprintf(bw, "{\"plugin\":%q,\"instances\":[", name)
	for i, l := range listers(name) {
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n")
		if err := l.List(bw, r.URL.Query()); err != nil {
			var bad *BadRequest
			if errors.As(err, &bad) && i == 0 {
				bw.Reset(progressWriter{w: w, rc: http.NewResponseController(w), d: d})
				httpError(w, http.StatusBadRequest, bad.Msg)
				return
			}
			// Mid-stream: the status is sent; end the JSON with the error
			// so that a client sees the listing is not whole.
			e, _ := json.Marshal(err.Error())
			fmt.Fprintf(bw, "{\"error\":%s}", e)
		}
	}
	bw.WriteString("\n]}\n")
	_ = bw.Flush()
}

// allowed checks the token (with token_file) or, without one, that the
// request names localhost or a loopback address (against DNS rebinding: a
// web page must not read the listing through a name of its own that
// resolves to 127.0.0.1).
func (in *Inspect) allowed(w http.ResponseWriter, r *http.Request) bool {
	in.mu.Lock()
	token := in.token
	in.mu.Unlock()
	if token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="inspect"`)
			httpError(w, http.StatusUnauthorized, "inspect needs the bearer token of token_file")
			return false
		}
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && a.Unmap().IsLoopback() {
		return true
	}
	httpError(w, http.StatusForbidden, fmt.Sprintf("Host %q refused: without token_file inspect answers requests for localhost or a loopback address only", r.Host))
	return false
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	e, _ := json.Marshal(msg)
	fmt.Fprintf(w, "{\"error\":%s}\n", e)
}

// listingSlots returns the semaphore of concurrent listings.
func (in *Inspect) listingSlots() chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.slots == nil {
		in.slots = make(chan struct{}, maxListings)
	}
	return in.slots
}

// progressWriter gives every write to a listing's client d to complete: a
// client that stops reading fails the write, which ends the listing.
type progressWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

func (p progressWriter) Write(b []byte) (int, error) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(p.d)) // a writer without deadlines (a test recorder) just writes
	return p.w.Write(b)
}
