package dashboard

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
)

// File is where the dashboard lives, from the repository's root.
const File = "charts/meshdns/files/meshdns-dashboard.json"

// JSON is the dashboard as written to File: indented, ending in a newline,
// without HTML escaping (PromQL's < and > stay readable).
func JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(Build()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Names is every metric name the dashboard's queries use, sorted.
func Names() []string {
	seen := map[string]bool{}
	for _, p := range Build().Panels {
		for _, q := range p.Targets {
			for _, m := range metricName.FindAllStringSubmatch(q.Expr, -1) {
				seen[m[1]] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// metricName is a metric name followed by its selector's brace.
var metricName = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)
