package dashboard

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDashboardFileCurrent: the committed dashboard is what the code
// builds (run `go run ./build/dashboard` after changing it).
func TestDashboardFileCurrent(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", File))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what internal/dashboard builds: run `go run ./build/dashboard`", File)
	}
}

// metricRef is a metric name inside a query, followed by its selector.
var metricRef = regexp.MustCompile(`\b([a-z_]+)\{([^}]*)\}`)

// TestDashboardShape: ids are unique, panels stay on the 24-column grid
// without overlapping, every panel has queries, and every metric a query
// names carries the instance selector.
func TestDashboardShape(t *testing.T) {
	d := Build()
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.X < 0 || g.W <= 0 || g.X+g.W > 24 || g.H <= 0 {
			t.Errorf("%q: gridPos %+v off the grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if o, ok := taken[cell{x, y}]; ok {
					t.Fatalf("%q overlaps %q at %d,%d", p.Title, o, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("%q has no query", p.Title)
		}
		for _, q := range p.Targets {
			refs := metricRef.FindAllStringSubmatch(q.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("%q: no metric in %s", p.Title, q.Expr)
			}
			for _, r := range refs {
				if !regexp.MustCompile(`(^|,)` + regexp.QuoteMeta(inst) + `(,|$)`).MatchString(r[2]) {
					t.Errorf("%q: %s{%s} has no instance selector", p.Title, r[1], r[2])
				}
			}
		}
	}
}

// Names lists every metric a query of the dashboard names, for the test
// that checks them against a real scrape.
func TestNames(t *testing.T) {
	names := Names()
	if len(names) < 30 {
		t.Fatalf("the dashboard names %d metrics: %v", len(names), names)
	}
}
