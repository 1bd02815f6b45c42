package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// exampleQuery is one "# query:" line documented in an example Corefile:
//
//	# query: [@PORT] NAME TYPE -> RDATA[; RDATA...] | NXDOMAIN | NODATA
//
// PORT (default: the first server block's) is the port as written in the
// Corefile; every listed RDATA must be among the answer's records.
type exampleQuery struct {
	port   int
	name   string
	qtype  uint16
	expect []string
	line   string
}

var queryLineRE = regexp.MustCompile(`(?m)^#\s*query:\s*(.+?)\s*$`)

func parseExampleQueries(t *testing.T, corefile string) []exampleQuery {
	t.Helper()
	var out []exampleQuery
	for _, m := range queryLineRE.FindAllStringSubmatch(corefile, -1) {
		q := exampleQuery{line: m[1]}
		lhs, rhs, ok := strings.Cut(m[1], "->")
		f := strings.Fields(lhs)
		if len(f) > 0 && strings.HasPrefix(f[0], "@") {
			q.port, _ = strconv.Atoi(f[0][1:])
			f = f[1:]
		}
		if !ok || len(f) != 2 {
			t.Fatalf("malformed query line %q", m[1])
		}
		q.name, q.qtype = dns.Fqdn(f[0]), dns.StringToType[strings.ToUpper(f[1])]
		if q.qtype == 0 {
			t.Fatalf("unknown type in query line %q", m[1])
		}
		for _, e := range strings.Split(rhs, ";") {
			if e = strings.TrimSpace(e); e != "" {
				q.expect = append(q.expect, e)
			}
		}
		out = append(out, q)
	}
	return out
}

// checkAnswer returns "" when r matches the expectation, else why not.
func checkAnswer(q exampleQuery, r *dns.Msg) string {
	switch {
	case len(q.expect) == 1 && q.expect[0] == "NXDOMAIN":
		if r.Rcode != dns.RcodeNameError {
			return "want NXDOMAIN, got " + r.String()
		}
		return ""
	case len(q.expect) == 1 && q.expect[0] == "NODATA":
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			return "want NODATA, got " + r.String()
		}
		return ""
	}
	if r.Rcode != dns.RcodeSuccess {
		return "want NOERROR, got " + r.String()
	}
	got := Rdata(r)
	for _, e := range q.expect {
		found := false
		for _, g := range got {
			if g == e {
				found = true
			}
		}
		if !found {
			return "answer lacks " + strconv.Quote(e) + ": " + r.String()
		}
	}
	return ""
}

// TestExampleCorefiles starts every Corefile under corefile/ on a private copy
// of its demo data and checks each example query documented in it, over UDP
// and TCP.
func TestExampleCorefiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "corefile", "*Corefile"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Corefiles under corefile/: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			queries := parseExampleQueries(t, string(b))
			if len(queries) == 0 {
				t.Fatalf("%s documents no '# query:' line", f)
			}
			dir := t.TempDir()
			CopyDir(t, filepath.Join(repoRoot, "corefile"), dir)
			s := Start(t, string(b), Options{Dir: dir})
			for _, q := range queries {
				addr := s.DNS()
				if q.port != 0 {
					addr = s.Addr(q.port)
				}
				for _, proto := range []string{"udp", "tcp"} {
					Eventually(t, 5*time.Second, func() string {
						r, err := TryQuery(addr, q.name, q.qtype, proto)
						if err != nil {
							return err.Error()
						}
						if why := checkAnswer(q, r); why != "" {
							return q.line + " over " + proto + ": " + why
						}
						return ""
					})
				}
			}
		})
	}
}
