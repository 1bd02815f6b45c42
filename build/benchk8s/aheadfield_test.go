package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestAheadReader: the header passes unchanged, every JSON line gets the
// field once and stays valid JSON, other lines pass unchanged, whatever
// the reads' sizes.
func TestAheadReader(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" +
		`{"epoch":"e","gen":3}` + "\n{}\n" + "not json\n" + `{"name":"a","x":[1,2]}` + "\n" + strings.Repeat("x", 300<<10) + "\n" + `{"synced":true}`
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in)), iotest.HalfReader(strings.NewReader(in))} {
		b, err := io.ReadAll(newAheadReader(r))
		if err != nil {
			t.Fatal(err)
		}
		head, body, _ := strings.Cut(string(b), "\r\n\r\n")
		if head != "HTTP/1.1 200 OK\r\nConnection: close" {
			t.Fatalf("header changed: %q", head)
		}
		lines := strings.Split(body, "\n")
		if len(lines) != 6 {
			t.Fatalf("%d lines, want 6", len(lines))
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, "{") {
				if l != "not json" && l != strings.Repeat("x", 300<<10) {
					t.Fatalf("line %d changed: %.40q", i, l)
				}
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %d: %v: %q", i, err, l)
			}
			if _, ok := m["next_version"]; !ok || strings.Count(l, "next_version") != 1 {
				t.Fatalf("line %d has not the field once: %q", i, l)
			}
		}
	}
	if !speaksV2("GET /v1/replicate?v=4&epoch=x HTTP/1.1\r\n") || speaksV2("GET /v1/replicate?epoch=x HTTP/1.1\r\n") || speaksV2("GET /v1/replicate?v=1 HTTP/1.1\r\n") {
		t.Fatal("speaksV2")
	}
}
