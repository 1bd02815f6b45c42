package orch

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestIsEndpointEveryStatusPair(t *testing.T) {
	svc := &Service{Status: "active"}
	ready := &Node{Status: "ready"}
	for _, desired := range TaskStatuses {
		for _, actual := range TaskStatuses {
			for _, inc := range []bool{false, true} {
				want := desired == StatusRunning &&
					(actual == StatusRunning || actual == StatusHealthy || (inc && actual == StatusUnhealthy))
				got := IsEndpoint(svc, &Task{DesiredStatus: desired, ActualStatus: actual}, ready, inc)
				if got != want {
					t.Errorf("desired %s actual %s include_unhealthy %v: got %v, want %v", desired, actual, inc, got, want)
				}
			}
		}
	}
}

func TestIsEndpointCases(t *testing.T) {
	running := &Task{DesiredStatus: StatusRunning, ActualStatus: StatusRunning}
	for _, tc := range []struct {
		name string
		svc  *Service
		task *Task
		node *Node
		inc  bool
		want bool
	}{
		{"healthy", &Service{Status: "active"}, &Task{DesiredStatus: "running", ActualStatus: "healthy"}, &Node{Status: "ready"}, false, true},
		{"desired stopped, still running", &Service{Status: "active"}, &Task{DesiredStatus: "stopped", ActualStatus: "running"}, &Node{Status: "ready"}, true, false},
		{"unhealthy", &Service{Status: "active"}, &Task{DesiredStatus: "running", ActualStatus: "unhealthy"}, &Node{Status: "ready"}, false, false},
		{"unhealthy included", &Service{Status: "active"}, &Task{DesiredStatus: "running", ActualStatus: "unhealthy"}, &Node{Status: "ready"}, true, true},
		{"node down", &Service{Status: "active"}, running, &Node{Status: "down"}, false, false},
		{"node draining", &Service{Status: "active"}, running, &Node{Status: "draining"}, false, true},
		{"no node", &Service{Status: "active"}, running, nil, false, false},
		{"service inactive", &Service{Status: "inactive"}, running, &Node{Status: "ready"}, false, false},
		{"service deleting", &Service{Status: "deleting"}, running, &Node{Status: "ready"}, false, false},
		{"no service", nil, running, &Node{Status: "ready"}, false, false},
		{"no task", &Service{Status: "active"}, nil, &Node{Status: "ready"}, false, false},
	} {
		if got := IsEndpoint(tc.svc, tc.task, tc.node, tc.inc); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEndpointSet(t *testing.T) {
	st := loadState(t, "testdata/state.json")
	got := map[string][]string{}
	for _, se := range EndpointSet(st, false) {
		ids := []string{}
		for _, ep := range se.Endpoints {
			ids = append(ids, ep.Task.ID+"@"+ep.Node.Name)
		}
		got[se.Service.Name] = ids
	}
	want := map[string]string{"atlas": "t-a@node-1 t-b@node-1", "beacon": "t-e@node-2", "idle": "", "paused": "", "v6only": "t-h@node-3", "hosty": "t-i@node-4"}
	for svc, w := range want {
		if g := strings.Join(got[svc], " "); g != w {
			t.Errorf("%s: endpoints %q, want %q", svc, g, w)
		}
	}
}

// mutate returns the test state with one substitution applied.
func mutate(t *testing.T, old, new string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/state.json")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, old) {
		t.Fatalf("test state lacks %q", old)
	}
	return []byte(strings.Replace(s, old, new, 1))
}

func TestDecodeStateRejects(t *testing.T) {
	for _, tc := range []struct {
		old, new string
		err      string
	}{
		{`"actual_status": "healthy"`, `"actual_status": "sleepy"`, `tasks[0] (id "t-a"): unknown actual_status "sleepy"`},
		{`"desired_status": "running", "actual_status": "healthy"`, `"desired_status": "go", "actual_status": "healthy"`, `tasks[0] (id "t-a"): unknown desired_status "go"`},
		{`"status": "inactive"`, `"status": "asleep"`, `services[3] (id "svc-4"): unknown status "asleep"`},
		{`"status": "down"`, `"status": "gone"`, `nodes[4] (id "n-5"): unknown status "gone"`},
		{`"192.0.2.10:7946"`, `"192.0.2.300:7946"`, `nodes[0] (id "n-1"): bad address "192.0.2.300:7946"`},
		{`"192.0.2.10:7946"`, `"192.0.2.10:x"`, `nodes[0] (id "n-1"): bad address "192.0.2.10:x": bad port "x"`},
		{`"192.0.2.10:7946"`, `""`, `nodes[0] (id "n-1"): bad address "": empty`},
		{`"192.0.2.10:7946"`, `"fe80::1%eth0"`, `zoned IPv6 address`},
		{`"192.0.2.10:7946"`, `"bad_host:1"`, `neither an IP address nor a hostname`},
		{`"service_id": "svc-2"`, `"service_id": "svc-99"`, `tasks[4] (id "t-e"): unknown service_id "svc-99"`},
		{`"node_id": "n-3"`, `"node_id": "n-99"`, `tasks[7] (id "t-h"): unknown node_id "n-99"`},
		{`"id": "t-b"`, `"id": "t-a"`, `tasks[1] (id "t-a"): duplicate task id`},
		{`"id": "svc-2"`, `"id": "svc-1"`, `services[1] (id "svc-1"): duplicate service id`},
		{`"id": "n-2"`, `"id": "n-1"`, `nodes[1] (id "n-1"): duplicate node id`},
		{`"name": "node-2"`, `"name": "node-1"`, `nodes[1] (id "n-2"): duplicate node name "node-1"`},
		{`"name": "beacon", "namespace": "prod"`, `"name": "atlas", "namespace": "default"`, `duplicate service "atlas" in namespace "default"`},
		{`"name": "beacon"`, `"name": "bea con"`, `bad service name "bea con"`},
		{`"namespace": "prod"`, `"namespace": "node"`, `bad namespace "node"`},
		{`"name": "http", "protocol": "tcp", "target_port": 80`, `"name": "http", "protocol": "icmp", "target_port": 80`, `services[0] (id "svc-1"): ports[0]: unknown protocol "icmp"`},
		{`"target_port": 50051`, `"target_port": 70000`, `services[1] (id "svc-2"): ports[0]: bad port number`},
		{`"host_port": 32000`, `"host_port": -1`, `tasks[4] (id "t-e"): ports[0]: bad port number`},
		{`"id": "t-a"`, `"id": ""`, `tasks[0] (id ""): empty id`},
		{`"version": 7,`, `"version": 7, "colour": "red",`, `unknown field "colour"`},
		{`"tasks": [`, `"tasks": {`, `state: invalid character`},
	} {
		_, err := DecodeState(mutate(t, tc.old, tc.new))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s → %s: error %v, want it to contain %q", tc.old, tc.new, err, tc.err)
		}
	}
	if _, err := DecodeState([]byte(`{"services":[]} {}`)); err == nil || !strings.Contains(err.Error(), "trailing data") {
		t.Errorf("trailing document: %v", err)
	}
}

func TestDecodeStateNormalises(t *testing.T) {
	st, err := DecodeState([]byte(`{"services":[{"id":"s","name":"Web","status":"active","ports":[{"name":"HTTP","target_port":80}]}],
		"tasks":[{"id":"t","service_id":"s","node_id":"n","desired_status":"running","actual_status":"running"}],
		"nodes":[{"id":"n","name":"Host-1.Example","address":"[2001:DB8::1]:7946","status":"ready"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := st.Services[0]
	if s.Name != "web" || s.Namespace != "default" || s.Ports[0].Name != "http" || s.Ports[0].Protocol != "tcp" {
		t.Errorf("service not normalised: %+v", s)
	}
	if st.Nodes[0].Name != "host-1.example" {
		t.Errorf("node name %q", st.Nodes[0].Name)
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct{ in, ip, host, err string }{
		{"192.0.2.10:7946", "192.0.2.10", "", ""},
		{"192.0.2.10", "192.0.2.10", "", ""},
		{"[2001:db8::1]:7946", "2001:db8::1", "", ""},
		{"2001:db8::1", "2001:db8::1", "", ""},
		{"::ffff:192.0.2.1", "192.0.2.1", "", ""},
		{"Node.Example.com:7946", "", "node.example.com.", ""},
		{"node.example.com.", "", "node.example.com.", ""},
		{"localhost", "", "localhost.", ""},
		{"1.2.3", "", "", "neither"},
		{"host:0", "", "", "bad port"},
		{"host:", "", "", "bad port"},
		{"", "", "", "empty"},
	} {
		ip, host, err := ParseAddress(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		gotIP := ""
		if ip.IsValid() {
			gotIP = ip.String()
		}
		if gotIP != tc.ip || host != tc.host {
			t.Errorf("%q: got (%q, %q), want (%q, %q)", tc.in, gotIP, host, tc.ip, tc.host)
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadState(t testing.TB, path string) *State {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
