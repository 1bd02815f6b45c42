package table

import (
	"strings"
	"testing"
)

func TestParseVirtual(t *testing.T) {
	tests := []struct {
		rel string
		key string // "" when the name is not ours
	}{
		// accepted: every combination of the optional qualifiers, in order
		{"web.virtual", "web.virtual.default.ns.default.ap.dc1.dc.consul"},
		{"web.virtual.team.ns", "web.virtual.team.ns.default.ap.dc1.dc.consul"},
		{"web.virtual.part.ap", "web.virtual.default.ns.part.ap.dc1.dc.consul"},
		{"web.virtual.dc2.dc", "web.virtual.default.ns.default.ap.dc2.dc.consul"},
		{"web.virtual.team.ns.part.ap", "web.virtual.team.ns.part.ap.dc1.dc.consul"},
		{"web.virtual.team.ns.dc2.dc", "web.virtual.team.ns.default.ap.dc2.dc.consul"},
		{"web.virtual.part.ap.dc2.dc", "web.virtual.default.ns.part.ap.dc2.dc.consul"},
		{"web.virtual.team.ns.part.ap.dc2.dc", "web.virtual.team.ns.part.ap.dc2.dc.consul"},
		{"http.web.virtual", "http.web.virtual.default.ns.default.ap.dc1.dc.consul"},
		{"http.web.virtual.team.ns.part.ap.dc2.dc", "http.web.virtual.team.ns.part.ap.dc2.dc.consul"},
		// qualifier values that look like qualifiers are values
		{"web.virtual.ns.ns", "web.virtual.ns.ns.default.ap.dc1.dc.consul"},
		{"web.virtual.dc.dc", "web.virtual.default.ns.default.ap.dc.dc.consul"},
		{"web.virtual.ap.ap.ns.dc", "web.virtual.default.ns.ap.ap.ns.dc.consul"},
		{"virtual.virtual", "virtual.virtual.default.ns.default.ap.dc1.dc.consul"},
		{"service.virtual", "service.virtual.default.ns.default.ap.dc1.dc.consul"},
		// passed on: not the grammar
		{"", ""},
		{"virtual", ""},
		{"web", ""},
		{"web.service", ""},
		{"web.service.virtual", ""},
		{"web.virtual.p1.peer", ""},
		{"web.virtual.g1.sg", ""},
		{"web.virtual.c1.cluster", ""},
		{"web.virtual.dc2.dc.team.ns", ""},   // dc before ns
		{"web.virtual.part.ap.team.ns", ""},  // ap before ns
		{"web.virtual.dc2.dc.part.ap", ""},   // dc before ap
		{"web.virtual.team.ns.team2.ns", ""}, // repeated
		{"web.virtual.dc2.dc.dc3.dc", ""},    // repeated
		{"a.b.web.virtual", ""},              // two labels before the service
		{".web.virtual", ""},                 // empty port label
		{"web..virtual", ""},                 // empty label
		{"web.virtual.ns", ""},               // qualifier without a value
		{".virtual", ""},                     // empty service
		{"web.virtual.team.ns.", ""},         // trailing empty label
		{"web.virtual.extra", ""},            // unknown trailing label
		{"web.virtual.team.ns.part.ap.x.dc.y", ""},
	}
	for _, tc := range tests {
		p, ok := ParseVirtual([]byte(tc.rel))
		got := ""
		if ok {
			got = string(AppendKey(nil, p, "default", "default", "dc1"))
		}
		if got != tc.key {
			t.Errorf("ParseVirtual(%q) key = %q, want %q", tc.rel, got, tc.key)
		}
	}
}

func TestCanonicalName(t *testing.T) {
	tests := []struct {
		name, key, err string
	}{
		{"web.virtual.default.ns.default.ap.dc1.dc.consul", "web.virtual.default.ns.default.ap.dc1.dc.consul", ""},
		{"Web.Virtual.Default.NS.default.ap.DC1.dc.consul.", "web.virtual.default.ns.default.ap.dc1.dc.consul", ""},
		{"http.web.virtual.team.ns.p.ap.dc2.dc.consul", "http.web.virtual.team.ns.p.ap.dc2.dc.consul", ""},
		{"web_2.virtual.default.ns.default.ap.dc1.dc.consul", "web_2.virtual.default.ns.default.ap.dc1.dc.consul", ""},
		{"web.virtual.consul", "", "not a full-form"},
		{"web.virtual.default.ns.dc1.dc.consul", "", "not a full-form"},
		{"web.virtual.default.ns.default.ap.dc1.dc.example", "", "not under consul."},
		{"", "", "not under consul."},
		{"w b.virtual.default.ns.default.ap.dc1.dc.consul", "", "bad label"},
		{"web.service.virtual.default.ns.default.ap.dc1.dc.consul", "", "not a full-form"},
		{strings.Repeat("a", 64) + ".virtual.default.ns.default.ap.dc1.dc.consul", "", "bad label"},
		{strings.Repeat("a.", 130) + "virtual.default.ns.default.ap.dc1.dc.consul", "", "too long"},
	}
	for _, tc := range tests {
		key, err := CanonicalName(tc.name)
		if tc.err == "" {
			if err != nil || key != tc.key {
				t.Errorf("CanonicalName(%q) = %q, %v; want %q", tc.name, key, err, tc.key)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("CanonicalName(%q) error = %v, want one containing %q", tc.name, err, tc.err)
		}
	}
}

func TestLowerName(t *testing.T) {
	for in, want := range map[string]string{
		"WeB.Virtual.CONSUL.": "web.virtual.consul.",
		"web.virtual.consul.": "web.virtual.consul.",
		`we\.b.virtual.`:      "",
		`w\065b.virtual.`:     "",
	} {
		got, ok := LowerName(nil, in)
		if !ok {
			got = nil
		}
		if string(got) != want {
			t.Errorf("LowerName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseVirtual checks the name parser never panics, that an accepted
// name's key parses again as a full-form name, and that the parts are
// labels of the input.
func FuzzParseVirtual(f *testing.F) {
	for _, s := range []string{"web.virtual", "http.web.virtual.team.ns.part.ap.dc2.dc", "a..b", ".virtual", "web.virtual.ns", "x.service.virtual", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		var buf [256]byte
		lname, ok := LowerName(buf[:0], rel)
		if !ok {
			return
		}
		p, ok := ParseVirtual(lname)
		if !ok {
			return
		}
		for _, l := range [][]byte{p.Port, p.Service, p.NS, p.AP, p.DC} {
			if l != nil && (len(l) == 0 || strings.Contains(string(l), ".")) {
				t.Fatalf("ParseVirtual(%q) gave a bad label %q", rel, l)
			}
		}
		key := AppendKey(nil, p, "default", "default", "dc1")
		q, ok := ParseVirtual(key[:len(key)-len(".consul")])
		if !ok || q.NS == nil || q.AP == nil || q.DC == nil {
			t.Fatalf("key %q of %q does not parse as a full-form name", key, rel)
		}
		if string(AppendKey(nil, q, "x", "y", "z")) != string(key) {
			t.Fatalf("key %q of %q is not stable", key, rel)
		}
	})
}
