package updater

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/plugin/mdnsfallback/records"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
)

func TestProbeHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ip := netip.MustParseAddr("127.0.0.1")
	for path, pass := range map[string]bool{"/ok": true, "/bad": false, "/slow": false, "/missing": false} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		err := probe(ctx, http.DefaultClient, checkSpec{kind: "http", port: port, path: path}, ip)
		cancel()
		if (err == nil) != pass {
			t.Errorf("http %s: err %v, want pass %v", path, err, pass)
		}
		if time.Since(start) > 700*time.Millisecond {
			t.Errorf("http %s took %v: the timeout did not bound it", path, time.Since(start))
		}
	}
}

func TestParseCheck(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"tcp:8080", "tcp:8080", ""},
		{"http:80", "http:80/", ""},
		{"http:8080/healthz?x=1", "http:8080/healthz?x=1", ""},
		{"tcp:0", "", "not in 1..65535"},
		{"tcp:65536", "", "not in 1..65535"},
		{"tcp:+80", "", "not in 1..65535"},
		{"tcp:80/x", "", "takes no path"},
		{"udp:53", "", "want tcp:<port>"},
		{"http:80/a b", "", "holds a space"},
		{"8080", "", "want tcp:<port>"},
		{"http:", "", "not in 1..65535"},
	}
	for _, tc := range tests {
		got, err := parseCheck(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseCheck(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("parseCheck(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{"tcp:80", "http:8080/x", "http:1", "tcp:", "http:80/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := parseCheck(s)
		if err != nil {
			return
		}
		again, err := parseCheck(spec.String())
		if err != nil || again != spec {
			t.Fatalf("%q → %v does not round-trip: %v %v", s, spec, again, err)
		}
	})
}

func ctr(id, host, domain, ip string) Container {
	return Container{
		ID: id, Name: host, Hostname: host, Domainname: domain, NetworkMode: "wnet",
		Networks: map[string]Net{"wnet": {IPv4: netip.MustParseAddr(ip), Prefix4: 24}},
	}
}

func TestWantedRecords(t *testing.T) {
	zones := []string{"weave.local."}
	two := ctr("c", "web", "weave.local", "10.32.0.2")
	two.Running = true
	two.Networks["bridge"] = Net{IPv4: netip.MustParseAddr("172.17.0.2"), Prefix4: 16}
	two.Networks["wnet"] = Net{IPv4: netip.MustParseAddr("10.32.0.2"), Prefix4: 24, IPv6: netip.MustParseAddr("fd00::2"), Prefix6: 64}
	tests := []struct {
		name    string
		c       Container
		network string
		want    string
	}{
		{"own network", two, "", "10.32.0.2 fd00::2"},
		{"named network", two, "bridge", "172.17.0.2"},
		{"missing network", two, "nope", ""},
		{"not running", func() Container { c := two; c.Running = false; return c }(), "", ""},
		{"outside zone", func() Container { c := two; c.Domainname = "example.org"; return c }(), "", ""},
		{"no domain", func() Container { c := two; c.Domainname = ""; return c }(), "", ""},
		{"full hostname, mixed case", func() Container { c := two; c.Hostname, c.Domainname = "Web.Weave.Local", ""; return c }(), "", "10.32.0.2 fd00::2"},
		{"mode host, first by name", func() Container { c := two; c.NetworkMode = "host"; return c }(), "", "172.17.0.2"},
	}
	for _, tc := range tests {
		var got []string
		for _, r := range wantedRecords(tc.c, tc.network, zones) {
			if r.Domain != "web.weave.local." || r.Owner != Owner || r.ID != "c" {
				t.Errorf("%s: record %+v", tc.name, r)
			}
			got = append(got, r.IP.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: got %v, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSlimDocker(t *testing.T) {
	r := container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: "abc", Name: "/web",
			State:      &container.State{Running: true},
			HostConfig: &container.HostConfig{NetworkMode: "default"},
		},
		Config: &container.Config{Hostname: "web", Domainname: "weave.local", Labels: map[string]string{checkLabel: "tcp:80"}},
		NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{
			"bridge": {IPAddress: "172.17.0.2", IPPrefixLen: 16, GlobalIPv6Address: "fd00::2", GlobalIPv6PrefixLen: 64},
			"none":   nil,
		}},
	}
	c := slimContainer(r)
	if c.ID != "abc" || c.Name != "web" || !c.Running || c.NetworkMode != "bridge" || c.Check != "tcp:80" ||
		c.Networks["bridge"].IPv4.String() != "172.17.0.2" || c.Networks["bridge"].IPv6.String() != "fd00::2" {
		t.Errorf("slim = %+v", c)
	}
	if c := slimContainer(container.InspectResponse{}); c.Running || c.ID != "" {
		t.Errorf("empty inspect = %+v", c)
	}
	evs := []struct {
		m    events.Message
		want Event
		ok   bool
	}{
		{events.Message{Type: events.ContainerEventType, Action: "start", Actor: events.Actor{ID: "x"}}, Event{"start", "x"}, true},
		{events.Message{Type: events.ContainerEventType, Action: "exec_start: sh", Actor: events.Actor{ID: "x"}}, Event{}, false},
		{events.Message{Type: events.NetworkEventType, Action: "connect", Actor: events.Actor{ID: "n", Attributes: map[string]string{"container": "x"}}}, Event{"connect", "x"}, true},
		{events.Message{Type: events.NetworkEventType, Action: "create", Actor: events.Actor{ID: "n"}}, Event{}, false},
		{events.Message{Type: events.ImageEventType, Action: "pull"}, Event{}, false},
	}
	for _, e := range evs {
		got, ok := slimEvent(e.m)
		if ok != e.ok || got != e.want {
			t.Errorf("slimEvent(%+v) = %+v %v", e.m, got, ok)
		}
	}
}

// FuzzDockerPayloads feeds engine answers (an inspect body and an event)
// through the JSON decoding and the slim conversions.
func FuzzDockerPayloads(f *testing.F) {
	f.Add([]byte(`{"Id":"abc","Name":"/web","State":{"Running":true},"HostConfig":{"NetworkMode":"default"},`+
		`"Config":{"Hostname":"web","Domainname":"weave.local","Labels":{"meshdns.check":"tcp:80"}},`+
		`"NetworkSettings":{"Networks":{"bridge":{"IPAddress":"172.17.0.2","IPPrefixLen":16,"GlobalIPv6Address":"fd00::2"}}}}`),
		[]byte(`{"Type":"container","Action":"start","Actor":{"ID":"abc","Attributes":{"name":"web"}}}`))
	f.Add([]byte(`{"NetworkSettings":{"Networks":{"x":null}}}`), []byte(`{"Type":"network","Action":"connect","Actor":{"Attributes":{"container":"abc"}}}`))
	f.Add([]byte(`{"Config":{"Hostname":"a.weave.local."},"NetworkSettings":{"Networks":{"n":{"IPAddress":"::ffff:10.0.0.1"}}}}`), []byte(`{}`))
	db := records.NewDB([]string{"weave.local."}, 100, 30)
	f.Fuzz(func(t *testing.T, inspect, event []byte) {
		var r container.InspectResponse
		if json.Unmarshal(inspect, &r) == nil {
			c := slimContainer(r)
			c.Running = true
			for _, rec := range wantedRecords(c, "", []string{"weave.local."}) {
				if _, err := db.Normalize(rec); err != nil && !errors.Is(err, records.ErrBadID) && !errors.Is(err, records.ErrBadDomain) && !errors.Is(err, records.ErrBadPrefix) && !errors.Is(err, records.ErrBadIP) {
					t.Fatalf("record %+v: %v", rec, err)
				}
			}
			_, _ = parseCheck(c.Check)
		}
		var m events.Message
		if json.Unmarshal(event, &m) == nil {
			if ev, ok := slimEvent(m); ok && ev.ID == "" {
				t.Fatalf("event without an ID: %+v", m)
			}
		}
	})
}
