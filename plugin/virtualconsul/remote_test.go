package virtualconsul

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// TestServeRemote drives the remote-listener mode against a listener on
// loopback: a hit is rewritten to the asked name, anything else passes on,
// and a dead listener opens the backoff window.
func TestServeRemote(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if strings.EqualFold(r.Question[0].Name, webKey+".") && r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{test.A(webKey + ". 30 IN A 240.0.0.1")}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	defer srv.Shutdown()
	v := handler(t, false)
	v.table.Store(nil)
	pv, err := parse(caddy.NewTestController("dns", "virtualconsul {\n source envoy "+pc.LocalAddr().String()+" {\n timeout 300ms\n backoff 1s\n }\n}"))
	if err != nil {
		t.Fatal(err)
	}
	v.remote = pv.remote
	ask := func(name string, qtype uint16) *dns.Msg {
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		rc, err := v.ServeDNS(context.Background(), rec, m)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Msg == nil { // the next plugin answered (with its rcode only)
			return &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: rc}}
		}
		return rec.Msg
	}
	r := ask("Web.Virtual.consul.", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].Header().Name != "Web.Virtual.consul." || r.Answer[0].(*dns.A).A.String() != "240.0.0.1" {
		t.Fatalf("hit: %v", r)
	}
	if r := ask("web.virtual.consul.", dns.TypeAAAA); r.Rcode != passed {
		t.Fatalf("NXDOMAIN at the listener: %v, want passed on", r)
	}
	if r := ask("web.service.consul.", dns.TypeA); r.Rcode != passed {
		t.Fatalf("not a virtual name: %v", r)
	}
	srv.Shutdown()
	if r := ask("web.virtual.consul.", dns.TypeA); r.Rcode != passed {
		t.Fatalf("dead listener: %v", r)
	}
	if !v.remote.InBackoff(time.Now()) {
		t.Fatal("no backoff window after a failure")
	}
}

// TestSourcesStop: the consul and xds sources, failing against dead
// addresses, stop promptly at OnShutdown (no goroutine survives a reload).
func TestSourcesStop(t *testing.T) {
	for _, src := range []string{"consul 127.0.0.1:1", "xds 127.0.0.1:1"} {
		c := caddy.NewTestController("dns", "virtualconsul {\n source "+src+"\n}")
		v, err := parse(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond) // a failure or two, then a backoff sleep
		done := make(chan struct{})
		go func() { v.stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("source %s did not stop", src)
		}
		if v.Ready() {
			t.Fatalf("source %s: ready without a table", src)
		}
	}
}

// TestEnvoyGaugeResetAtStart: an instance that failed leaves the gauge at 1;
// the instance a reload starts has not failed, so its start clears it.
func TestEnvoyGaugeResetAtStart(t *testing.T) {
	const zone = "envoyreset."
	failing := map[string]string{"zone": zone, "source": "envoy"}
	parseEnvoy := func() *VirtualConsul {
		t.Helper()
		v, err := parse(caddy.NewTestController("dns", `virtualconsul `+zone+` {
			source envoy 127.0.0.1:1
		}`))
		if err != nil {
			t.Fatal(err)
		}
		if v.remote == nil || v.src != nil {
			t.Fatalf("source envoy: remote %v, src %v", v.remote, v.src)
		}
		return v
	}
	old := parseEnvoy()
	if err := old.start(); err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetQuestion(webKey+".", dns.TypeA)
	if _, err := old.remote.Exchange(context.Background(), m); err == nil { // nothing listens on port 1
		t.Fatal("an answer from 127.0.0.1:1")
	}
	if got := metricValue(t, "coredns_virtualconsul_source_failing", failing); got != 1 {
		t.Fatalf("failing gauge after a failure = %v, want 1", got)
	}
	_ = old.stop()
	if err := parseEnvoy().start(); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, "coredns_virtualconsul_source_failing", failing); got != 0 {
		t.Errorf("failing gauge after the new instance started = %v, want 0", got)
	}
}
