package conf

import (
	"path/filepath"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func TestParseTTL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"30", 30, true}, {"30s", 30, true}, {"2m", 120, true}, {"0", 0, true}, {"0s", 0, true},
		{"1.5s", 0, false}, {"-1", 0, false}, {"-5s", 0, false}, {"abc", 0, false},
		{"2147483647", MaxTTL, true}, {"2147483648", 0, false}, {"1000000h", 0, false},
	} {
		got, err := ParseTTL(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseTTL(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestPath(t *testing.T) {
	c := caddy.NewTestController("dns", "x")
	dnsserver.GetConfig(c).Root = "/srv/dns"
	if got := Path(c, "data/t.json"); got != "/srv/dns/data/t.json" {
		t.Errorf("relative to root: %q", got)
	}
	if got := Path(c, "/etc/t.json"); got != "/etc/t.json" {
		t.Errorf("absolute: %q", got)
	}
	c2 := caddy.NewTestController("dns", "x")
	if got := Path(c2, "t.json"); !filepath.IsAbs(got) || filepath.Base(got) != "t.json" {
		t.Errorf("no root: %q", got)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for in, want := range map[string]bool{
		"127.0.0.1:8182": true, "127.9.9.9:1": true, "[::1]:80": true, "localhost:1": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:1": true, ":8182": false, "0.0.0.0:1": false, "[::]:1": false,
		"10.0.0.1:1": false, "example.test:1": false, "127.0.0.1": false,
	} {
		if got := LoopbackOnly(in); got != want {
			t.Errorf("LoopbackOnly(%q) = %v, want %v", in, got, want)
		}
	}
}
