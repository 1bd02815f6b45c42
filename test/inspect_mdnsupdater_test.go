package test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// inspectUpdaterCorefile is updaterCorefile with the inspect listener.
var inspectUpdaterCorefile = strings.Replace(updaterCorefile, "    ready 127.0.0.1:8181\n", "    ready 127.0.0.1:8181\n    inspect 127.0.0.1:8182\n", 1)

// updaterListing is the part of GET /mdnsfallback this test reads.
type updaterListing struct {
	Instances []struct {
		Generation uint64
		Records    []struct {
			Domain, ID, IP, Owner, Check string
			CheckState                   string `json:"check_state"`
		}
		Withheld []struct {
			ID, Container, Domain, Check string
			CheckState                   string `json:"check_state"`
		}
	}
}

// TestMdnsfallbackInspectUpdater reads the listing of the real binary
// whose updater follows a real Docker engine: a container's record lists
// with owner docker, a container whose check fails is listed as withheld
// (and its name is NXDOMAIN), and once its check passes its record lists
// with check state pass and its name answers the listed address; an API
// record lists with no owner.
func TestMdnsfallbackInspectUpdater(t *testing.T) {
	d := newDockerNS(t)
	d.importBusybox(t)
	d.docker(t, "network", "create", "--subnet", fmt.Sprintf("10.77.%d.0/24", d.subnet), "wnet")
	runCtr(t, d, "web", "web", "weave.local")
	runCtr(t, d, "chk", "chk", "weave.local", "--label", "meshdns.check=tcp:8080")
	m := d.startMeshdns(t, fmt.Sprintf(inspectUpdaterCorefile, d.nsIP, d.veth()), []string{"DOCKER_HOST=unix://" + d.sock})
	addr := d.nsIP + ":1053"
	if code, body := m.api(t, "PUT", "/name/weave:extern/10.9.9.9", "-d", "domain=ext.weave.local"); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	webIP, chkIP := d.ipOn(t, "web", "wnet"), d.ipOn(t, "chk", "wnet")
	waitName(t, addr, "web.weave.local", webIP, 10*time.Second)

	var l updaterListing
	Eventually(t, 10*time.Second, func() string {
		l = getUpdaterListing(t, m)
		if w := l.Instances[0].Withheld; len(w) != 1 || w[0].Container != "chk" || w[0].CheckState != "fail" || w[0].Check != "tcp:8080" ||
			w[0].Domain != "chk.weave.local." {
			return fmt.Sprintf("withheld %+v", w)
		}
		return ""
	})
	if rc, ans, _ := rcode(addr, "chk.weave.local"); rc != "NXDOMAIN" {
		t.Fatalf("chk.weave.local is withheld but answers %s %v", rc, ans)
	}
	got := map[string]string{}
	for _, r := range l.Instances[0].Records {
		got[r.Domain] = r.IP + " " + r.Owner + " " + r.Check + " " + r.CheckState
	}
	if len(got) != 2 || got["web.weave.local."] != webIP+" docker  " || got["ext.weave.local."] != "10.9.9.9   " {
		t.Fatalf("records %q", got)
	}

	d.docker(t, "exec", "chk", "httpd", "-p", "8080", "-h", "/")
	waitName(t, addr, "chk.weave.local", chkIP, 10*time.Second)
	l2 := getUpdaterListing(t, m)
	found := false
	for _, r := range l2.Instances[0].Records {
		found = found || (r.Domain == "chk.weave.local." && r.IP == chkIP && r.Owner == "docker" && r.Check == "tcp:8080" && r.CheckState == "pass")
	}
	if !found || len(l2.Instances[0].Withheld) != 0 || l2.Instances[0].Generation <= l.Instances[0].Generation {
		t.Fatalf("after the check passed (generation %d, was %d): %+v", l2.Instances[0].Generation, l.Instances[0].Generation, l2.Instances[0])
	}
}

// getUpdaterListing reads GET /mdnsfallback inside meshdns's namespace.
func getUpdaterListing(t *testing.T, m *nsMeshdns) updaterListing {
	t.Helper()
	out, err := m.h.exec(t, nil, "curl", "-sf", "http://127.0.0.1:8182/mdnsfallback")
	var l updaterListing
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Instances) != 1 {
		t.Fatalf("GET /mdnsfallback: %v\n%s", err, out)
	}
	return l
}
