package orch

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestCompactRoundTrip: the compact snapshot decodes to the same
// services, nodes and namespaces and, per service in order, the same tasks
// but for their ids and versions, for every schema's fields; and a state
// document (an older meshdns's snapshot) still loads.
func TestCompactRoundTrip(t *testing.T) {
	for _, path := range []string{"testdata/state.json", "../k8sdns/testdata/spec-state.json"} {
		st := loadState(t, path)
		var buf bytes.Buffer
		if err := st.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, buf.String())
		}
		if !reflect.DeepEqual(back.Services, st.Services) || !reflect.DeepEqual(back.Nodes, st.Nodes) || !reflect.DeepEqual(back.Namespaces, st.Namespaces) {
			t.Errorf("%s: services, nodes or namespaces differ:\n%s", path, buf.String())
		}
		if a, b := tasksByService(st), tasksByService(back); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: tasks differ:\n%v\n%v", path, a, b)
		}
		legacy, _ := json.Marshal(st)
		if old, err := DecodeSnapshot(legacy); err != nil || !reflect.DeepEqual(old, st) {
			t.Errorf("%s: a state document as snapshot: %v", path, err)
		}
		full, _ := json.Marshal(st)
		if buf.Len() >= len(full) {
			t.Errorf("%s: compact form %d bytes, the state document %d", path, buf.Len(), len(full))
		}
	}
	bad := []string{`{"format":"meshdns-state-compact/9","nodes":[],"services":[]}`,
		`{"format":"meshdns-state-compact/1","nodes":[],"services":[{"service":{"id":"s","name":"Bad_Name","status":"active"}}]}`,
		`{"format":"meshdns-state-compact/1","nodes":[],"services":[],"extra":1}`}
	for _, b := range bad {
		if _, err := DecodeSnapshot([]byte(b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
}

// TestCompactHandWrittenJSON: the hand-written encodings of services,
// task ports and nodes are json.Marshal's, byte for byte.
func TestCompactHandWrittenJSON(t *testing.T) {
	for _, path := range []string{"testdata/state.json", "../k8sdns/testdata/spec-state.json"} {
		st := loadState(t, path)
		for i := range st.Services {
			want, _ := json.Marshal(&st.Services[i])
			if got := appendService(nil, &st.Services[i]); string(got) != string(want) {
				t.Errorf("service %s:\n got %s\nwant %s", st.Services[i].ID, got, want)
			}
		}
		for _, task := range st.Tasks {
			for _, p := range task.Ports {
				want, _ := json.Marshal(p)
				if got := appendTaskPort(nil, p); string(got) != string(want) {
					t.Errorf("task port:\n got %s\nwant %s", got, want)
				}
			}
		}
	}
	for _, nodes := range [][]Node{nil, loadState(t, "testdata/state.json").Nodes, {{ID: "n\"1<&>", Name: "é\u2028", Address: "10.0.0.1", Status: "down"}}} {
		want, _ := json.Marshal(nodes)
		if nodes == nil {
			want = []byte("[]")
		}
		if got := appendNodes(nil, nodes); string(got) != string(want) {
			t.Errorf("nodes:\n got %s\nwant %s", got, want)
		}
	}
	odd := Service{ID: "a\"b<", Name: "x", Status: "active", Ports: []ServicePort{{TargetPort: 1}}, ClusterIPs: []string{"::1", "10.0.0.1"}, Headless: true, ExternalName: "é.example."}
	want, _ := json.Marshal(&odd)
	if got := appendService(nil, &odd); string(got) != string(want) {
		t.Errorf("odd service:\n got %s\nwant %s", got, want)
	}
}

// tasksByService lists each service's tasks in order, without id and
// version.
func tasksByService(st *State) map[string][]Task {
	out := map[string][]Task{}
	for _, task := range st.Tasks {
		task.ID, task.Version = "", 0
		if len(task.Ports) == 0 {
			task.Ports = nil
		}
		out[task.ServiceID] = append(out[task.ServiceID], task)
	}
	return out
}
