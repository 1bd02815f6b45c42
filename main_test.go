package main

import (
	"reflect"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func index(list []string, d string) int {
	for i, x := range list {
		if x == d {
			return i
		}
	}
	return -1
}

// TestDirectiveOrder asserts that our plugins sit right after hosts, so that
// cache, rewrite, acl and friends run before them and kubernetes, file and
// forward after them.
func TestDirectiveOrder(t *testing.T) {
	d := dnsserver.Directives
	anchor := index(d, anchorDirective)
	if anchor < 0 {
		t.Fatalf("%s not in the directive list", anchorDirective)
	}
	for i, ours := range ourDirectives {
		if got := index(d, ours); got != anchor+1+i {
			t.Errorf("directive %s at %d, want %d (right after %s)", ours, got, anchor+1+i, anchorDirective)
		}
		if _, err := caddy.DirectiveAction("dns", ours); err != nil {
			t.Errorf("directive %s has no registered plugin: %v", ours, err)
		}
	}
	first, last := anchor+1, anchor+len(ourDirectives)
	for _, before := range []string{"cache", "rewrite", "acl", "errors", "log", "prometheus", "hosts"} {
		if i := index(d, before); i < 0 || i >= first {
			t.Errorf("%s at %d must run before our plugins (from %d)", before, i, first)
		}
	}
	for _, after := range []string{"kubernetes", "file", "forward", "k8s_external"} {
		if i := index(d, after); i <= last {
			t.Errorf("%s at %d must run after our plugins (to %d)", after, i, last)
		}
	}
}

func TestInsertAfter(t *testing.T) {
	got := insertAfter([]string{"a", "hosts", "b"}, "hosts", "x", "y")
	if want := []string{"a", "hosts", "x", "y", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("insertAfter = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		list   []string
		anchor string
		extra  []string
	}{
		{[]string{"a"}, "hosts", []string{"x"}},          // missing anchor
		{[]string{"hosts", "x"}, "hosts", []string{"x"}}, // already present
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("insertAfter(%v, %q, %v) did not panic", tc.list, tc.anchor, tc.extra)
				}
			}()
			insertAfter(tc.list, tc.anchor, tc.extra...)
		}()
	}
}

func TestVersionLine(t *testing.T) {
	if got := versionLine(); got != "dev (CoreDNS-1.15.0)" {
		t.Fatalf("versionLine() = %q", got)
	}
}
