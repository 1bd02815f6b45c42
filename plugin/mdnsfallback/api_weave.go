package mdnsfallback

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"
)

// Weave's own CLI. The `weave` script (github.com/weaveworks/weave) calls
// Weave's nameserver API; these are its calls and how meshdns answers
// them, as Weave did (2xx for success, which is all the script checks):
//
//	GET    /domain                        dns_args: the domain, plain text
//	GET    /dns-address                   dns_args: the DNS server's address, plain text
//	GET    /dns-address-port              dns-lookup: ADDRESS:PORT, plain text
//	GET    /status/dns                    weave status dns: one line a record
//	PUT    /name/<id>/<ip>  fqdn=…  check-alive=true   put_dns_fqdn (attach, dns-add)
//	DELETE /name/<id>/<ip>                delete_dns (dns-remove without -h)
//	DELETE /name/<id>/<ip>?fqdn=<name>    delete_dns_fqdn (detach, dns-remove -h): that name only
//
// The PUT and DELETE routes are the record API's (api.go), which takes
// check-alive and a DELETE's fqdn; the GET routes are here.

// checkAliveTimeout bounds the engine lookup of a PUT with check-alive.
const checkAliveTimeout = 2 * time.Second

// routeWeave answers the Weave CLI's plain-text GET routes; it reports
// whether the path was one of them.
func (p *MDNSFallback) routeWeave(w http.ResponseWriter, r *http.Request, segs []string) bool {
	var body string
	switch strings.Join(segs, "/") {
	case "domain":
		body = p.cfg.zones[0]
	case "dns-address":
		body = p.dnsHost()
	case "dns-address-port":
		body = net.JoinHostPort(p.dnsHost(), p.cfg.dnsPort)
	case "status/dns":
		body = p.weaveStatusDNS()
	default:
		return false
	}
	if !allow(w, r, http.MethodGet) {
		return true
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, body)
	return true
}

// dnsHost is the address the server block listens on (bind's first), or
// 127.0.0.1 when it listens on every address.
func (p *MDNSFallback) dnsHost() string {
	if h := p.cfg.dnsHost; h != "" && h != "0.0.0.0" && h != "::" {
		return h
	}
	return "127.0.0.1"
}

// weaveStatusDNS prints the records as `weave status dns` did: hostname
// (without the domain), address, the identifier's first 12 characters,
// and the origin (the owner: "api" or the updater's name).
func (p *MDNSFallback) weaveStatusDNS() string {
	var sb strings.Builder
	for _, rec := range p.db.Records("") {
		host := strings.TrimSuffix(rec.Domain, "."+p.cfg.zones[0])
		origin := rec.Owner
		if origin == "" {
			origin = "api"
		}
		fmt.Fprintf(&sb, "%-12v %-15v %12.12v %v\n", host, rec.IP, rec.ID, origin)
	}
	return sb.String()
}

// checkAlive is Weave's check-alive=true: a record put for a container
// that is not running is removed again at once (the container died while
// `weave attach` ran). Without an updater there is no engine to ask, and
// the record stays, as Weave's nameserver without a Docker client did. It
// reports whether the record went.
func (p *MDNSFallback) checkAlive(rec records.Record) bool {
	u := p.upd.Load()
	if u == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkAliveTimeout)
	defer cancel()
	running, err := u.Running(ctx, rec.ID)
	if err != nil || running {
		return false
	}
	log.Infof("Container %q is not running: its record %s %s is removed (check-alive)", rec.ID, rec.Domain, rec.IP)
	gone := p.db.DeleteOwned(rec.ID, "", func(r records.Record) bool { return r.IP != rec.IP || r.Domain != rec.Domain })
	return len(gone) > 0
}

// deleteDomain returns the name a DELETE is restricted to (its fqdn, or
// domain, URL value), "" for every name.
func (p *MDNSFallback) deleteDomain(q url.Values) (string, error) {
	if q.Get("domain") == "" && q.Get("fqdn") == "" {
		return "", nil
	}
	d, err := pickDomain(q.Get("domain"), q.Get("fqdn"))
	if err != nil {
		return "", err
	}
	return p.db.NormalizeDomain(d)
}
