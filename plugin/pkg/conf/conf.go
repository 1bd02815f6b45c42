// Package conf holds the Corefile argument parsers that meshdns's plugins
// share, so one spelling means the same thing in every plugin.
package conf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

// MaxTTL is the largest TTL a record may carry (RFC 2181 §8).
const MaxTTL = 1<<31 - 1

// ParseTTL reads a TTL written as a Go duration in whole seconds ("30s",
// "2m") or as plain seconds ("30"), from 0 to MaxTTL.
func ParseTTL(s string) (uint32, error) {
	var secs int64
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		secs = n
	} else {
		d, err := time.ParseDuration(s)
		if err != nil || d%time.Second != 0 {
			return 0, fmt.Errorf("invalid TTL %q (want whole seconds, e.g. 30s)", s)
		}
		secs = int64(d / time.Second)
	}
	if secs < 0 || secs > MaxTTL {
		return 0, fmt.Errorf("invalid TTL %q (want 0s to %ds)", s, MaxTTL)
	}
	return uint32(secs), nil
}

// Path resolves a path argument: relative paths are taken from the server
// block's `root` (as the stock file and hosts plugins do) and made absolute,
// so logs and errors name the file unambiguously.
func Path(c *caddy.Controller, p string) string {
	if !filepath.IsAbs(p) {
		if cfg := dnsserver.GetConfig(c); cfg != nil && cfg.Root != "" {
			p = filepath.Join(cfg.Root, p)
		}
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// Servers are the values of the `server` label that CoreDNS's metrics give
// the servers the block of c listens on (metrics.WithServer):
// transport://address, one per listen address (bind), as CoreDNS groups
// its servers. Gauges set outside a query carry them, so that two blocks
// serving the same zone on other ports do not overwrite each other.
func Servers(c *caddy.Controller) []string {
	cfg := dnsserver.GetConfig(c)
	var out []string
	for _, h := range cfg.ListenHosts {
		addr := net.JoinHostPort(h, cfg.Port)
		if a, err := net.ResolveTCPAddr("tcp", addr); err == nil {
			addr = a.String()
		}
		out = append(out, cfg.Transport+"://"+addr)
	}
	return out
}

// ParseSize accepts bytes with an optional k, m or g suffix (powers of 1024).
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.ToLower(s)
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, errors.New("want a positive size such as 65536, 512k or 64m")
	}
	return n * mult, nil
}

// LoopbackOnly reports whether a listener on HOST:PORT is reachable from
// this host only: its host is a loopback address or localhost; an empty
// host (every address) or any other name is not.
func LoopbackOnly(hostport string) bool {
	host, _, _ := net.SplitHostPort(hostport)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
