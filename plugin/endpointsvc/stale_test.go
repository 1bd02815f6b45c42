package endpointsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// scripted is a source driven by the test: each function it receives is
// run with the sink, in order.
type scripted struct{ steps chan func(feed.Sink) }

func (s scripted) Name() string { return "scripted" }
func (s scripted) Key() string  { return "scripted" }
func (s scripted) Run(ctx context.Context, k feed.Sink) {
	for {
		select {
		case f := <-s.steps:
			f(k)
		case <-ctx.Done():
			return
		}
	}
}

// do runs f with the sink and waits until it returned.
func (s scripted) do(f func(feed.Sink)) {
	done := make(chan struct{})
	s.steps <- func(k feed.Sink) { f(k); close(done) }
	<-done
}

// staleEDEOf is the Stale Answer EDE of m's OPT record, or nil.
func staleEDEOf(m *dns.Msg) *dns.EDNS0_EDE {
	if o := m.IsEdns0(); o != nil {
		for _, x := range o.Option {
			if ede, ok := x.(*dns.EDNS0_EDE); ok && ede.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
				return ede
			}
		}
	}
	return nil
}

// askWeb queries e for web.shop, with EDNS or without.
func askWeb(t *testing.T, e *Endpointsvc, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion("web.shop.svc.cluster.local.", dns.TypeA)
	if edns {
		m.SetEdns0(1232, false)
	}
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := e.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatal(err)
	}
	if rec.Msg == nil || rec.Msg.Rcode != dns.RcodeSuccess || len(rec.Msg.Answer) != 1 {
		t.Fatalf("web.shop: %v", rec.Msg)
	}
	return rec.Msg
}

// ageMetric is e's table_age_seconds as a scrape reads it (-1: none).
func ageMetric(t *testing.T, e *Endpointsvc) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	ages.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.Label {
			if l.GetName() == "server" && l.GetValue() == e.servers[0] {
				return d.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// inspectAge is the table_age_seconds of e's inspect listing.
func inspectAge(t *testing.T, e *Endpointsvc) float64 {
	t.Helper()
	var b bytes.Buffer
	if err := e.List(&b, url.Values{}); err != nil {
		t.Fatal(err)
	}
	var head struct {
		Age *float64 `json:"table_age_seconds"`
	}
	if err := json.Unmarshal(b.Bytes(), &head); err != nil || head.Age == nil {
		t.Fatalf("listing %s: %v", b.String(), err)
	}
	return *head.Age
}

// TestStaleness: the table's age is 0 while the source is current, grows
// from a failure on (heartbeat-like Unchanged calls of a source whose own
// data is behind keep it so), and goes back to 0 with a success; the
// metric and inspect show it, and with stale_ede the answers given while
// it is stale beyond the option's age carry EDE 3 (Stale Answer) - to
// clients that speak EDNS only.
func TestStaleness(t *testing.T) {
	e, err := parse(caddy.NewTestController("dns", "endpointsvc cluster.local {\n source kubernetes\n schema kubernetes\n stale_ede 100ms\n}"))
	if err != nil {
		t.Fatal(err)
	}
	e.servers = []string{"dns://:5399"}
	src := scripted{steps: make(chan func(feed.Sink))}
	go func() { src.do(func(k feed.Sink) { k.Update(shopWeb("10.96.0.7")) }) }()
	e.start(src)
	t.Cleanup(e.stop)
	ages.list(e)
	t.Cleanup(func() { ages.drop(e) })

	if a := e.tableAge(); a != 0 || ageMetric(t, e) != 0 || inspectAge(t, e) != 0 || staleEDEOf(askWeb(t, e, true)) != nil {
		t.Fatalf("a current table: age %v, metric %v", a, ageMetric(t, e))
	}
	src.do(func(k feed.Sink) { k.Failed(errors.New("API gone")) })
	if staleEDEOf(askWeb(t, e, true)) != nil {
		t.Error("an EDE within stale_ede's 100 ms")
	}
	time.Sleep(150 * time.Millisecond)
	if a := e.tableAge(); a < 150*time.Millisecond || ageMetric(t, e) < 0.15 || inspectAge(t, e) < 0.15 {
		t.Errorf("150 ms after the failure: age %v, metric %v", a, ageMetric(t, e))
	}
	ede := staleEDEOf(askWeb(t, e, true))
	if ede == nil || !strings.Contains(ede.ExtraText, "source failing") {
		t.Errorf("no Stale Answer EDE on a stale table: %v", ede)
	}
	if m := askWeb(t, e, false); m.IsEdns0() != nil {
		t.Errorf("an OPT record in the reply to a query without: %v", m)
	}
	src.do(func(k feed.Sink) { k.Failed(errors.New("still gone")) }) // later failures keep the first one's time
	if a := e.tableAge(); a < 150*time.Millisecond {
		t.Errorf("a second failure reset the age to %v", a)
	}
	// a source whose data is 40 s behind: the success does not make it current
	src.do(func(k feed.Sink) { k.(feed.Aged).SetAge(40 * time.Second); k.Unchanged() })
	if a := e.tableAge(); a < 40*time.Second || a > 41*time.Second {
		t.Errorf("an Unchanged 40 s behind: age %v", a)
	}
	// a patch says nothing of the source's health, unless the source said its age
	src.do(func(k feed.Sink) { k.Patch(&k8sdns.Patch{}) })
	if a := e.tableAge(); a < 40*time.Second {
		t.Errorf("a plain patch made the table current: age %v", a)
	}
	src.do(func(k feed.Sink) { k.(feed.Aged).SetAge(0); k.Patch(&k8sdns.Patch{}) })
	if a := e.tableAge(); a != 0 {
		t.Errorf("a patch of a current source: age %v", a)
	}
	src.do(func(k feed.Sink) { k.Failed(errors.New("blip")) })
	src.do(func(k feed.Sink) { k.Unchanged() })
	if a := e.tableAge(); a != 0 || staleEDEOf(askWeb(t, e, true)) != nil {
		t.Errorf("current again: age %v", a)
	}
	// without the option, no EDE however stale
	src.do(func(k feed.Sink) { k.Failed(errors.New("gone again")) })
	time.Sleep(120 * time.Millisecond)
	e.stale.on = false
	if staleEDEOf(askWeb(t, e, true)) != nil {
		t.Error("an EDE without stale_ede")
	}
}

// shopWeb is a cluster of one ClusterIP Service, shop/web.
func shopWeb(ip string) *k8sdns.Cluster {
	d, err := k8sdns.DecodeSnapshot([]byte(`{"format":"meshdns-k8sdns/1","namespaces":["shop"],"services":[{"namespace":"shop","name":"web","kind":"ClusterIP","cluster_ips":["` + ip + `"]}]}`))
	if err != nil {
		panic(err)
	}
	return d
}
