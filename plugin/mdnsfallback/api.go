package mdnsfallback

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/mdns"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
	"github.com/meshdns/meshdns/plugin/mdnsfallback/updater"
)

// maxBody bounds a request body.
const maxBody = 64 << 10

// apiServer is the record API's HTTP listener.
type apiServer struct {
	srv *http.Server
	ln  net.Listener
}

func (p *MDNSFallback) startAPI() error {
	ln, err := net.Listen("tcp", p.cfg.api)
	if err != nil {
		return fmt.Errorf("record API listen on %s: %w", p.cfg.api, err)
	}
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	p.api = &apiServer{srv: srv, ln: ln}
	go func() { _ = srv.Serve(ln) }()
	return nil
}

func (p *MDNSFallback) stopAPI() {
	if p.api == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.api.srv.Shutdown(ctx); err != nil {
		p.api.srv.Close()
	}
	// Shutdown closes only the listeners Serve has taken up: when Serve's
	// goroutine has not run yet (a reload that fails at once, on a busy
	// machine) the socket would stay bound until it does, and the old
	// instance's startAPI in OnRestartFailed would find its port in use.
	// The port is free when stopAPI returns.
	_ = p.api.ln.Close()
	p.api = nil
}

// apiError is the JSON body of every 4xx answer.
type apiError struct {
	Error string `json:"error"`
}

// statusWriter remembers the status code for the metric.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// ServeHTTP implements the record API:
//
//	PUT    /name/<id>/<ip>   domain (or fqdn), routing_prefix, ttl as form values or JSON
//	DELETE /name/<id>/<ip>
//	DELETE /name/<id>
//	GET    /name/            every record
//	GET    /name/<id>
//	GET    /status
func (p *MDNSFallback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	if p.hostAllowed(r.Host) {
		p.route(sw, r)
	} else {
		writeError(sw, http.StatusForbidden, fmt.Sprintf("Host %q refused: without token_file the API answers requests for localhost or a loopback address only", r.Host))
	}
	apiRequests.WithLabelValues(strconv.Itoa(sw.code)).Inc()
}

// hostAllowed is the guard against DNS rebinding: without token_file, a
// web page the user opens must not reach the API through a name of the
// attacker's that resolves to 127.0.0.1, so the Host header must be
// localhost (or a name under .localhost) or a loopback address; with
// `insecure` (an API beyond loopback without a token, by choice) any IP
// address too, never a name. With token_file every write needs the token,
// and any Host is taken.
func (p *MDNSFallback) hostAllowed(hostport string) bool {
	if p.cfg.token != "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return false
	}
	return a.Unmap().IsLoopback() || p.cfg.insecure
}

func (p *MDNSFallback) route(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if p.routeWeave(w, r, segs) {
		return
	}
	switch {
	case len(segs) == 1 && segs[0] == "status":
		if !allow(w, r, http.MethodGet) {
			return
		}
		writeJSON(w, http.StatusOK, p.status())
	case len(segs) >= 1 && segs[0] == "name" && len(segs) <= 3:
		p.routeName(w, r, segs[1:])
	default:
		writeError(w, http.StatusNotFound, "no such route: "+r.URL.Path)
	}
}

func (p *MDNSFallback) routeName(w http.ResponseWriter, r *http.Request, segs []string) {
	switch len(segs) {
	case 0:
		if allow(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, p.db.Records(""))
		}
		return
	case 1:
		if !allow(w, r, http.MethodGet, http.MethodDelete) || !p.authorized(w, r) {
			return
		}
		id := segs[0]
		if err := records.ValidID(id); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if r.Method == http.MethodGet {
			writeJSON(w, http.StatusOK, p.db.Records(id))
			return
		}
		dom, err := p.deleteDomain(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ans := p.deleteAPI(id, func(r records.Record) bool { return dom == "" || r.Domain == dom })
		p.writeDurable(w, ans)
		return
	}
	if !allow(w, r, http.MethodPut, http.MethodDelete) || !p.authorized(w, r) {
		return
	}
	p.routeRecord(w, r, segs[0], segs[1])
}

// routeRecord is PUT and DELETE /name/<id>/<ip>.
func (p *MDNSFallback) routeRecord(w http.ResponseWriter, r *http.Request, id, ipText string) {
	if err := records.ValidID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%v: %q", records.ErrBadIP, ipText))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", maxBody))
		} else {
			writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
		}
		return
	}
	if r.Method == http.MethodDelete {
		ip = ip.Unmap()
		dom, err := p.deleteDomain(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		p.writeDurable(w, p.deleteAPI(id, func(r records.Record) bool { return r.IP == ip && (dom == "" || r.Domain == dom) }))
		return
	}
	f, err := parseFields(r, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rec, created, err := p.db.Put(records.Record{ID: id, IP: ip, Domain: f.domain, RoutingPrefix: f.prefix, TTL: f.ttl})
	switch {
	case errors.Is(err, records.ErrOwned): // acknowledged, not taken over: the answer shows whose it is
		p.writeDurable(w, putAnswer{Record: rec})
		return
	case errors.Is(err, records.ErrFull):
		writeError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if f.checkAlive && p.checkAlive(rec) {
		p.writeDurable(w, putAnswer{Record: rec, NotRunning: true})
		return
	}
	p.writeDurable(w, putAnswer{Record: rec, Created: created})
}

// durableWait bounds how long a write waits for the snapshot.
const durableWait = 10 * time.Second

// writeDurable answers a PUT or DELETE: 200 with v once the database as
// it is now is on disk (with snapshot; at once without), so a 200 means
// the change survives a crash. A snapshot write that fails (the writer
// retries it) or takes over durableWait answers 503: the change is made
// and serves, but is not on disk yet.
//
// The wait does not follow the request's context: a client that half-closes
// its side after the request (nc, HTTP/1.0) is still answered.
func (p *MDNSFallback) writeDurable(w http.ResponseWriter, v any) {
	if s := p.snap.Load(); s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), durableWait)
		defer cancel()
		if err := s.Sync(ctx, p.db.Generation()); err != nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "the change is made but not on disk yet (the snapshot write is retried): "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, v)
}

type deleted struct {
	Deleted []records.Record `json:"deleted"`
	Kept    []records.Record `json:"kept,omitempty"` // matching records of an updater, which the API does not release
}

// deleteAPI deletes the API's records of id that match, and lists the
// updaters' records that match and stay.
func (p *MDNSFallback) deleteAPI(id string, match func(records.Record) bool) deleted {
	gone := p.db.DeleteOwned(id, "", func(r records.Record) bool { return !match(r) })
	var kept []records.Record
	for _, r := range p.db.Records(id) {
		if match(r) {
			kept = append(kept, r)
		}
	}
	return deleted{Deleted: nonNil(gone), Kept: kept}
}

type putAnswer struct {
	Record  records.Record `json:"record"`
	Created bool           `json:"created"`
	// NotRunning: check-alive found the container not running, and the
	// record was removed again.
	NotRunning bool `json:"not_running,omitempty"`
}

func nonNil(r []records.Record) []records.Record {
	if r == nil {
		return []records.Record{}
	}
	return r
}

// splitPath returns the unescaped segments of u's path, without the
// leading slash and one trailing slash; empty segments in between stay, so
// "/name//1.2.3.4" names an empty identifier.
func splitPath(u *url.URL) ([]string, error) {
	p := strings.TrimPrefix(u.EscapedPath(), "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return nil, nil
	}
	var out []string
	for _, s := range strings.Split(p, "/") {
		v, err := url.PathUnescape(s)
		if err != nil {
			return nil, fmt.Errorf("bad path segment %q", s)
		}
		out = append(out, v)
	}
	return out, nil
}

func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed here; allowed: %s", r.Method, strings.Join(methods, ", ")))
	return false
}

// authorized checks the bearer token on writes when a token is configured.
func (p *MDNSFallback) authorized(w http.ResponseWriter, r *http.Request) bool {
	if p.cfg.token == "" || r.Method == http.MethodGet {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(p.cfg.token)) == 1 {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="mdnsfallback"`)
	writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
	return false
}

// fields are the PUT body's values.
type fields struct {
	domain     string
	prefix     int
	ttl        uint32
	checkAlive bool // Weave's check-alive=true (api_weave.go)
}

// jsonFields is the JSON body of a PUT; fqdn is an alias of domain.
type jsonFields struct {
	Domain        *string `json:"domain"`
	FQDN          *string `json:"fqdn"`
	RoutingPrefix *int    `json:"routing_prefix"`
	TTL           *int64  `json:"ttl"`
}

// parseFields reads the record fields from a JSON body, or else from form
// values (URL query and url-encoded body).
func parseFields(r *http.Request, body []byte) (fields, error) {
	trimmed := bytes.TrimSpace(body)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || bytes.HasPrefix(trimmed, []byte("{")) {
		if len(r.URL.RawQuery) > 0 {
			return fields{}, errors.New("give the fields either as JSON or as form values, not both")
		}
		return parseJSONFields(trimmed)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return fields{}, fmt.Errorf("malformed form body: %v", err)
	}
	for k, v := range r.URL.Query() {
		form[k] = append(form[k], v...)
	}
	return parseFormFields(form)
}

func parseJSONFields(body []byte) (fields, error) {
	var j jsonFields
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fields{}, fmt.Errorf("malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fields{}, errors.New("malformed JSON body: data after the object")
	}
	var f fields
	var err error
	if f.domain, err = pickDomain(deref(j.Domain), deref(j.FQDN)); err != nil {
		return f, err
	}
	if j.RoutingPrefix != nil {
		f.prefix = *j.RoutingPrefix
		if f.prefix < 1 {
			return f, fmt.Errorf("%w: %d", records.ErrBadPrefix, f.prefix)
		}
	}
	if j.TTL != nil {
		if f.ttl, err = checkTTL(*j.TTL); err != nil {
			return f, err
		}
	}
	return f, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func parseFormFields(form url.Values) (fields, error) {
	var f fields
	for k, v := range form {
		switch k {
		case "domain", "fqdn", "routing_prefix", "ttl", "check-alive":
			if len(v) > 1 {
				return f, fmt.Errorf("form field %q given %d times", k, len(v))
			}
		default:
			return f, fmt.Errorf("unknown form field %q", k)
		}
	}
	var err error
	if f.domain, err = pickDomain(form.Get("domain"), form.Get("fqdn")); err != nil {
		return f, err
	}
	f.checkAlive = form.Get("check-alive") == "true" // as Weave read it: anything else is false
	if s := form.Get("routing_prefix"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return f, fmt.Errorf("%w: %q", records.ErrBadPrefix, s)
		}
		f.prefix = n
	}
	if s := form.Get("ttl"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return f, fmt.Errorf("%w: %q is not a number of seconds", records.ErrBadTTL, s)
		}
		if f.ttl, err = checkTTL(n); err != nil {
			return f, err
		}
	}
	return f, nil
}

func pickDomain(domain, fqdn string) (string, error) {
	switch {
	case domain == "" && fqdn == "":
		return "", fmt.Errorf("%w: missing domain (or fqdn)", records.ErrBadDomain)
	case domain != "" && fqdn != "" && !strings.EqualFold(strings.TrimSuffix(domain, "."), strings.TrimSuffix(fqdn, ".")):
		return "", fmt.Errorf("%w: domain %q and fqdn %q disagree", records.ErrBadDomain, domain, fqdn)
	case domain != "":
		return domain, nil
	}
	return fqdn, nil
}

func checkTTL(n int64) (uint32, error) {
	if n < 0 || n > records.MaxTTL {
		return 0, fmt.Errorf("%w: %d is outside 0..%d seconds", records.ErrBadTTL, n, records.MaxTTL)
	}
	return uint32(n), nil
}

// statusBody is GET /status.
type statusBody struct {
	Version      string   `json:"version"`
	Zones        []string `json:"zones"`
	Records      int      `json:"records"`
	MaxRecords   int      `json:"max_records"`
	Aside        int      `json:"aside,omitempty"` // records kept aside: outside the zones, or past max_records
	CacheEntries int      `json:"cache_entries"`
	CacheSize    int      `json:"cache_size"`
	Interfaces   []string `json:"interfaces"`
	// MDNSInterfaces says which of the interfaces are joined (and over
	// which families) and which are missing (waited for).
	MDNSInterfaces []mdns.InterfaceState `json:"mdns_interfaces,omitempty"`
	Counters       map[string]int64      `json:"counters"`
	Updater        *updater.Status       `json:"updater,omitempty"`
}

func (p *MDNSFallback) status() statusBody {
	ifaces := p.cfg.interfaces
	if ifaces == nil {
		ifaces = []string{}
	}
	queries, answers := p.lan.Stats()
	st := statusBody{
		Version:        caddy.AppName + " " + caddy.AppVersion,
		Zones:          p.cfg.zones,
		Records:        p.db.Len(),
		Aside:          len(p.db.Aside()),
		MaxRecords:     p.cfg.maxRecords,
		CacheEntries:   p.lan.Len(),
		CacheSize:      p.cfg.cacheSize,
		Interfaces:     ifaces,
		MDNSInterfaces: p.lan.Interfaces(),
		Counters: map[string]int64{
			"requests_local":      p.stats.results[resLocal].Load(),
			"requests_cache":      p.stats.results[resCache].Load(),
			"requests_mdns":       p.stats.results[resMDNS].Load(),
			"requests_negative":   p.stats.results[resNegative].Load(),
			"requests_miss":       p.stats.results[resMiss].Load(),
			"mdns_queries_sent":   queries,
			"mdns_answers_cached": answers,
		},
	}
	if u := p.upd.Load(); u != nil {
		st.Updater = u.Status()
	}
	return st
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
