package test

// Helpers of the chart tests (helm_test.go): the real helm (built from its
// Go module by build/peer-tools.sh), rendering charts/meshdns, reading the
// shipped manifests as objects, and comparing objects after YAML
// normalisation (comments, key order and flow style do not count).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
func chartDir() string { return filepath.Join(repoRoot, "charts", "meshdns") }

// runHelm runs helm with args and returns its stdout; the error carries
// stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helm := peerTool(t, "helm")
	cmd := exec.Command(helm, args...)
	// no repositories, registries or plugins of this machine's user
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, errb.String(), out.String())
	}
	return out.String(), nil
}

// renderChart renders the chart as release meshdns in kube-system (extra
// args after the defaults: --set, -f, -n) and returns its objects by key.
func renderChart(t *testing.T, args ...string) (map[string]map[string]any, error) {
	t.Helper()
	return renderRelease(t, "meshdns", args...)
}

// renderRelease renders the chart as release in kube-system (extra args
// after the defaults) and returns its objects by key.
func renderRelease(t *testing.T, release string, args ...string) (map[string]map[string]any, error) {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, chartDir(), "--namespace", "kube-system"}, args...)...)
	if err != nil {
		return nil, err
	}
	return parseObjects(out, "helm template")
}

// mustRender is renderChart that fails the test on error.
func mustRender(t *testing.T, args ...string) map[string]map[string]any {
	t.Helper()
	objs, err := renderChart(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderWith renders the chart with a values file holding values (YAML).
func renderWith(t *testing.T, values string, args ...string) map[string]map[string]any {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return mustRender(t, append([]string{"-f", f}, args...)...)
}

// parseObjects splits a multi-document YAML stream into objects keyed by
// objectKey, normalised through JSON (numbers are float64).
func parseObjects(stream, where string) (map[string]map[string]any, error) {
	objs := map[string]map[string]any{}
	for i, doc := range splitYAMLDocs(stream) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w\n%s", where, i+1, err, doc)
		}
		if obj == nil {
			continue
		}
		k := objectKey(obj)
		if _, dup := objs[k]; dup {
			return nil, fmt.Errorf("%s: %s twice", where, k)
		}
		objs[k] = obj
	}
	return objs, nil
}

// objectKey is "Kind namespace/name" ("Kind name" when cluster-scoped).
func objectKey(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	if ns, ok := md["namespace"].(string); ok && ns != "" {
		return fmt.Sprintf("%v %s/%v", obj["kind"], ns, md["name"])
	}
	return fmt.Sprintf("%v %v", obj["kind"], md["name"])
}

// manifestObjects reads deploy/<dir>/*.yaml, leaving out the files named in
// skip, as objects keyed by objectKey.
func manifestObjects(t *testing.T, dir string, skip ...string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/%s: %v", dir, err)
	}
	all := map[string]map[string]any{}
	for _, f := range files {
		if contains(skip, filepath.Base(f)) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := parseObjects(string(b), f)
		if err != nil {
			t.Fatal(err)
		}
		for k, o := range objs {
			if _, dup := all[k]; dup {
				t.Fatalf("deploy/%s: %s twice", dir, k)
			}
			all[k] = o
		}
	}
	return all
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// compareObjects reports every difference between want and got: objects
// missing on either side and, per object, the paths whose values differ.
func compareObjects(t *testing.T, what string, want, got map[string]map[string]any) {
	t.Helper()
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		w, inWant := want[k]
		g, inGot := got[k]
		switch {
		case !inGot:
			t.Errorf("%s: %s is not rendered", what, k)
		case !inWant:
			t.Errorf("%s: %s is rendered but not shipped", what, k)
		default:
			for _, d := range diffValues("", w, g) {
				t.Errorf("%s: %s: %s", what, k, d)
			}
		}
	}
	if len(want) == 0 {
		t.Errorf("%s: nothing to compare", what)
	}
}

// diffValues lists the paths where a and b differ ("path: want X, got Y").
func diffValues(path string, a, b any) []string {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		var out []string
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			out = append(out, diffValues(path+"."+k, am[k], bm[k])...)
		}
		return out
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, diffValues(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	if as, ok := a.(string); ok && strings.Contains(as, "\n") {
		if bs, ok := b.(string); ok {
			return []string{fmt.Sprintf("%s: lines differ:\n%s", strings.TrimPrefix(path, "."), lineDiff(as, bs))}
		}
	}
	return []string{fmt.Sprintf("%s: want %s, got %s", strings.TrimPrefix(path, "."), jsonOf(a), jsonOf(b))}
}

func jsonOf(v any) string {
	if v == nil {
		return "(absent)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// field walks obj along path ("spec.template.spec", list items by index
// "containers.0") and returns what it finds, nil when absent.
func field(obj any, path string) any {
	cur := obj
	for _, p := range strings.Split(path, ".") {
		switch x := cur.(type) {
		case map[string]any:
			cur = x[p]
		case []any:
			var i int
			if _, err := fmt.Sscanf(p, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil
			}
			cur = x[i]
		default:
			return nil
		}
	}
	return cur
}

// yamlValue parses a YAML literal into the same normalised form as the
// rendered objects, for comparing a field with what the values said.
func yamlValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// wantField fails unless obj's field at path equals the YAML literal want.
func wantField(t *testing.T, objs map[string]map[string]any, key, path, want string) {
	t.Helper()
	obj, ok := objs[key]
	if !ok {
		t.Errorf("%s is not rendered (rendered: %v)", key, sortedKeys(objs))
		return
	}
	got, w := field(obj, path), yamlValue(t, want)
	if !reflect.DeepEqual(got, w) {
		t.Errorf("%s %s = %s, want %s", key, path, jsonOf(got), jsonOf(w))
	}
}

func sortedKeys(objs map[string]map[string]any) []string {
	out := make([]string, 0, len(objs))
	for k := range objs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// mustRenderRelease is renderRelease that fails the test on error.
func mustRenderRelease(t *testing.T, release string, args ...string) map[string]map[string]any {
	t.Helper()
	objs, err := renderRelease(t, release, args...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// lineDiff shows the lines of want and got from the first that differs
// ("-" want, "+" got), a few of each.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(wl) && i < len(gl) && wl[i] == gl[i] {
		i++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  (from line %d)\n", i+1)
	for j := i; j < len(wl) && j < i+5; j++ {
		fmt.Fprintf(&b, "  - %s\n", wl[j])
	}
	for j := i; j < len(gl) && j < i+5; j++ {
		fmt.Fprintf(&b, "  + %s\n", gl[j])
	}
	return b.String()
}
