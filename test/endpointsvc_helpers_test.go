package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// esvcTask is one task of the test orchestrator: service, node, desired and
// actual status, host port of the "http" port (0: none).
type esvcTask struct {
	id, service, node, desired, actual string
	hostPort                           int
}

// esvcNode is a node: name (its id is "id-"+name), advertise address, status.
type esvcNode struct{ name, address, status string }

// esvcState renders a state document. Every service is active in namespace
// "default" unless written "name.namespace", with one port http/tcp → 80.
func esvcState(services []string, nodes []esvcNode, tasks []esvcTask) string {
	type m = map[string]any
	doc := m{"services": []m{}, "tasks": []m{}, "nodes": []m{}}
	for _, s := range services {
		name, ns, _ := strings.Cut(s, ".")
		if ns == "" {
			ns = "default"
		}
		doc["services"] = append(doc["services"].([]m), m{"id": "id-" + s, "name": name, "namespace": ns, "status": "active",
			"ports": []m{{"name": "http", "protocol": "tcp", "target_port": 80}}})
	}
	for _, n := range nodes {
		doc["nodes"] = append(doc["nodes"].([]m), m{"id": "id-" + n.name, "name": n.name, "address": n.address, "status": n.status})
	}
	for _, t := range tasks {
		task := m{"id": t.id, "service_id": "id-" + t.service, "node_id": "id-" + t.node, "version": 1,
			"desired_status": t.desired, "actual_status": t.actual}
		if t.hostPort != 0 {
			task["ports"] = []m{{"name": "http", "protocol": "tcp", "container_port": 80, "host_port": t.hostPort}}
		}
		doc["tasks"] = append(doc["tasks"].([]m), task)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// esvcCorefile is a svc.orch. block with a ready endpoint and metrics, and
// the given endpointsvc options.
func esvcCorefile(options string) string {
	return `svc.orch.:1053 {
    bind 127.0.0.1
    ready 127.0.0.1:8181
    prometheus 127.0.0.1:9153
    errors
    endpointsvc {
` + options + `
    }
}
`
}

// answers returns the sorted rdata of name/type over UDP, or the rcode
// name in brackets when there is no answer ("[NXDOMAIN]", "[NODATA]").
func answers(t *testing.T, addr, name string, qtype uint16) []string {
	t.Helper()
	r := Query(t, addr, name, qtype, "udp")
	return summary(r)
}

func summary(r *dns.Msg) []string {
	if r.Rcode != dns.RcodeSuccess {
		return []string{"[" + dns.RcodeToString[r.Rcode] + "]"}
	}
	if len(r.Answer) == 0 {
		return []string{"[NODATA]"}
	}
	return Rdata(r)
}

// expectAnswers waits until name/type answers want (see answers).
func expectAnswers(t *testing.T, addr, name string, qtype uint16, want ...string) {
	t.Helper()
	Eventually(t, 5*time.Second, func() string {
		r, err := TryQuery(addr, name, qtype, "udp")
		if err != nil {
			return err.Error()
		}
		if got := summary(r); strings.Join(got, " | ") != strings.Join(want, " | ") {
			return fmt.Sprintf("%s %s: got %q, want %q", name, dns.TypeToString[qtype], got, want)
		}
		return ""
	})
}

// fakeOrch is an orchestrator HTTP API in the test: it serves the current
// state with an ETag, or fails the way mode says.
type fakeOrch struct {
	mu       sync.Mutex
	state    string
	version  int
	mode     string // "", "500", "hang", "garbage"
	token    string
	hits     map[string]int // "200", "304", "500", "hang", "garbage", "401"
	hangTime time.Duration
}

func (f *fakeOrch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	state, etag, mode, token, hang := f.state, fmt.Sprintf(`"v%d"`, f.version), f.mode, f.token, f.hangTime
	f.mu.Unlock()
	count := func(k string) {
		f.mu.Lock()
		f.hits[k]++
		f.mu.Unlock()
	}
	if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
		count("401")
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	switch mode {
	case "500":
		count("500")
		http.Error(w, "orchestrator down", http.StatusInternalServerError)
		return
	case "hang":
		count("hang")
		select {
		case <-time.After(hang):
		case <-r.Context().Done():
		}
		return
	case "garbage":
		count("garbage")
		w.Header().Set("ETag", `"garbage"`)
		w.Write([]byte(`<html>502 Bad Gateway</html>`))
		return
	}
	if r.Header.Get("If-None-Match") == etag {
		count("304")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	count("200")
	w.Header().Set("ETag", etag)
	w.Write([]byte(state))
}

func (f *fakeOrch) set(mode, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = mode
	if state != "" && state != f.state {
		f.state = state
		f.version++
	}
}

func (f *fakeOrch) count(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[k]
}
