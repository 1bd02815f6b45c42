// Command nodeclient runs inside the one-node cluster's client pods of the
// end-to-end tests (test/nodecluster_*_test.go). It resolves through the pod's
// own /etc/resolv.conf, the one the kubelet wrote, with three resolvers:
//
//	go      Go's resolver (the binary is static: the pure-Go resolver, with
//	        the search list and ndots)
//	search  a miekg/dns client that walks the search list as a stub resolver
//	        does (every candidate in turn, on NXDOMAIN or no data), so SRV and
//	        PTR answers are seen as records
//	glibc   the image's glibc getent (getent ahosts NAME, getent hosts IP)
//
// Usage:
//
//	nodeclient resolve RESOLVER:TYPE:NAME...   one JSON line per question
//	nodeclient load -rate 20 -duration 10m -out FILE TYPE:NAME...
//
// TYPE is A (addresses of any family), SRV, PTR (NAME is an address) or CNAME.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// result is one question's outcome.
type result struct {
	Resolver string   `json:"resolver"`
	Type     string   `json:"type"`
	Name     string   `json:"name"`
	Answers  []string `json:"answers"`
	FQDN     string   `json:"fqdn,omitempty"` // search: the candidate that answered
	Error    string   `json:"error,omitempty"`
	Millis   float64  `json:"ms"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nodeclient resolve|load ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "resolve":
		enc := json.NewEncoder(os.Stdout)
		for _, q := range os.Args[2:] {
			parts := strings.SplitN(q, ":", 3)
			if len(parts) != 3 {
				fmt.Fprintf(os.Stderr, "bad question %q: want RESOLVER:TYPE:NAME\n", q)
				os.Exit(2)
			}
			_ = enc.Encode(resolve(parts[0], parts[1], parts[2]))
		}
	case "load":
		if err := load(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// resolve answers one question with one resolver, within 10 s.
func resolve(resolver, qtype, name string) result {
	r := result{Resolver: resolver, Type: qtype, Name: name}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	var err error
	switch resolver {
	case "go":
		r.Answers, err = goLookup(ctx, qtype, name)
	case "search":
		r.Answers, r.FQDN, err = searchLookup(qtype, name)
	case "glibc":
		r.Answers, err = glibcLookup(ctx, qtype, name)
	default:
		err = fmt.Errorf("unknown resolver %q", resolver)
	}
	r.Millis = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		r.Error = err.Error()
	}
	sort.Strings(r.Answers)
	return r
}

// goResolver is Go's own resolver (the binary has no cgo anyway).
var goResolver = &net.Resolver{PreferGo: true}

func goLookup(ctx context.Context, qtype, name string) ([]string, error) {
	switch qtype {
	case "A":
		return goResolver.LookupHost(ctx, name)
	case "SRV":
		_, srvs, err := goResolver.LookupSRV(ctx, "", "", name)
		var out []string
		for _, s := range srvs {
			out = append(out, fmt.Sprintf("%d %d %d %s", s.Priority, s.Weight, s.Port, s.Target))
		}
		return out, err
	case "PTR":
		return goResolver.LookupAddr(ctx, name)
	case "CNAME":
		c, err := goResolver.LookupCNAME(ctx, name)
		return []string{c}, err
	}
	return nil, fmt.Errorf("type %q", qtype)
}

// glibcLookup runs the image's getent: "ahosts NAME" for A, "hosts IP" for
// PTR.
func glibcLookup(ctx context.Context, qtype, name string) ([]string, error) {
	args := map[string][]string{"A": {"ahosts", name}, "PTR": {"hosts", name}}[qtype]
	if args == nil {
		return nil, fmt.Errorf("getent cannot ask %s", qtype)
	}
	out, err := exec.CommandContext(ctx, "/usr/bin/getent", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("getent %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	seen := map[string]bool{}
	var res []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		vals := f[:1] // ahosts: "ADDRESS STREAM name"
		if qtype == "PTR" {
			vals = f[1:] // hosts: "ADDRESS name aliases…"
		}
		for _, v := range vals {
			if !seen[v] {
				seen[v] = true
				res = append(res, v)
			}
		}
	}
	return res, nil
}

// searchLookup asks every candidate of the search list in turn, as a stub
// resolver does, and returns the first with an answer of the type.
func searchLookup(qtype, name string) ([]string, string, error) {
	cfg, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil {
		return nil, "", err
	}
	t := map[string]uint16{"A": dns.TypeA, "SRV": dns.TypeSRV, "PTR": dns.TypePTR, "CNAME": dns.TypeCNAME}[qtype]
	if t == 0 {
		return nil, "", fmt.Errorf("type %q", qtype)
	}
	if qtype == "PTR" {
		if rev, err := dns.ReverseAddr(name); err == nil {
			name = rev
		}
	}
	c := &dns.Client{Timeout: 2 * time.Second}
	var last error = fmt.Errorf("no candidate answered")
	for _, cand := range cfg.NameList(name) {
		m := new(dns.Msg)
		m.SetQuestion(cand, t)
		var r *dns.Msg
		for _, s := range cfg.Servers {
			r, _, err = c.Exchange(m, net.JoinHostPort(s, cfg.Port))
			if err == nil {
				break
			}
		}
		if err != nil {
			return nil, cand, err
		}
		if r.Rcode != dns.RcodeSuccess {
			last = fmt.Errorf("%s: %s", cand, dns.RcodeToString[r.Rcode])
			continue
		}
		var out []string
		for _, rr := range r.Answer {
			if rr.Header().Rrtype == t {
				out = append(out, strings.TrimSpace(strings.TrimPrefix(rr.String(), rr.Header().String())))
			}
		}
		if len(out) > 0 {
			return out, cand, nil
		}
		last = fmt.Errorf("%s: no %s", cand, qtype)
	}
	return nil, "", last
}
