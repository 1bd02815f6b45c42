package main

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// mdLinkRE matches an inline link or image, [text](target "title").
	mdLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefDefRE matches a reference definition, [label]: target.
	mdRefDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// mdHeadingRE matches an ATX heading.
	mdHeadingRE = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// mdHTMLAnchorRE matches an HTML anchor, <a name="x"> or id="x".
	mdHTMLAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdCodeSpanRE   = regexp.MustCompile("`+[^`]*`+")
	mdFenceRE      = regexp.MustCompile("^ {0,3}(```|~~~)")
	mdInlineLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// mdLink is one relative link found in a Markdown file.
type mdLink struct {
	line   int
	target string
}

// mdScan returns a Markdown file's relative links (outside fenced code
// blocks and code spans) and the anchors of its headings, by GitHub's
// rules.
func mdScan(text string) (links []mdLink, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := mdFenceRE.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case fence == m[1]:
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		if m := mdHeadingRE.FindStringSubmatch(line); m != nil {
			slug := githubSlug(m[1])
			if n, ok := seen[slug]; ok {
				seen[slug] = n + 1
				slug += "-" + strconv.Itoa(n+1)
			} else {
				seen[slug] = 0
			}
			anchors[slug] = true
		}
		for _, m := range mdHTMLAnchorRE.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		plain := mdCodeSpanRE.ReplaceAllString(line, "")
		var targets []string
		for _, m := range mdLinkRE.FindAllStringSubmatch(plain, -1) {
			targets = append(targets, m[1])
		}
		if m := mdRefDefRE.FindStringSubmatch(plain); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if u, err := url.Parse(t); err == nil && u.Scheme != "" {
				continue // http, https, mailto: not checked here
			}
			links = append(links, mdLink{line: i + 1, target: t})
		}
	}
	return links, anchors
}

// githubSlug is the anchor GitHub gives a heading: its text (code spans
// and links reduced to their text) lowercased, punctuation dropped, each
// space a hyphen.
func githubSlug(heading string) string {
	heading = mdInlineLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsNumber(r), unicode.IsMark(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestDocsLinks: every relative link of the repository's Markdown files
// points at a file or directory that exists, and a link's #anchor into a
// Markdown file at one of its headings.
func TestDocsLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "vendor", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files, want the repository's", len(files))
	}
	type doc struct {
		links   []mdLink
		anchors map[string]bool
	}
	docs := map[string]doc{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		links, anchors := mdScan(string(b))
		docs[filepath.Clean(f)] = doc{links, anchors}
	}
	checked := 0
	for _, f := range files {
		for _, l := range docs[filepath.Clean(f)].links {
			checked++
			pathPart, anchor, _ := strings.Cut(l.target, "#")
			pathPart, err := url.PathUnescape(pathPart)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", f, l.line, l.target, err)
				continue
			}
			target := filepath.Clean(f)
			if pathPart != "" {
				if strings.HasPrefix(pathPart, "/") {
					target = filepath.Clean(strings.TrimPrefix(pathPart, "/"))
				} else {
					target = filepath.Join(filepath.Dir(f), pathPart)
				}
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link %s: no such file %s", f, l.line, l.target, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			d, ok := docs[target]
			if !ok {
				continue // a Markdown file the walk skipped
			}
			if !d.anchors[strings.ToLower(anchor)] {
				t.Errorf("%s:%d: link %s: %s has no heading #%s", f, l.line, l.target, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found")
	}
}

// TestDocsGithubSlug pins the anchor rules the link check uses.
func TestDocsGithubSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Cluster DNS: endpointsvc `schema kubernetes` against the kubernetes plugin": "cluster-dns-endpointsvc-schema-kubernetes-against-the-kubernetes-plugin",
		"Migrating a Corefile, line by line":                                         "migrating-a-corefile-line-by-line",
		"Figures: listing 1,000,000 names":                                           "figures-listing-1000000-names",
		"Agentless (Consul Dataplane)":                                               "agentless-consul-dataplane",
		"mDNS packets on a LAN of three hosts × 500 local names":                     "mdns-packets-on-a-lan-of-three-hosts--500-local-names",
		"See [the README](README.md) — again":                                        "see-the-readme--again",
		"check_rate and *inspect*":                                                   "check_rate-and-inspect",
	} {
		if got := githubSlug(in); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", in, got, want)
		}
	}
}
