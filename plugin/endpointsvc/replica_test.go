package endpointsvc

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/test"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/internal/testpki"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"
	"github.com/meshdns/meshdns/plugin/endpointsvc/kubesource"
	"github.com/meshdns/meshdns/plugin/endpointsvc/replica"

	"github.com/miekg/dns"
	"k8s.io/client-go/kubernetes"
)

// The replication stream through the plugin: a leader instance (the
// shipped stanza with `replicate`, over a fake cluster) taps every table
// its syncer builds, and a follower instance (`source replica`) serves
// what the stream brings, through the real handler on loopback.

// parseTest parses a Corefile stanza into an instance with the fake
// upstream and a REFUSED next plugin.
func parseTest(t *testing.T, corefile string) *Endpointsvc {
	t.Helper()
	e, err := parse(caddy.NewTestController("dns", corefile))
	if err != nil {
		t.Fatal(err)
	}
	e.schema.(*dnsSchema).srv.Upstream = outside{}
	e.Next = test.NextHandler(dns.RcodeRefused, nil)
	return e
}

// startLeader runs the shipped stanza with `replicate` on a loopback port
// over client, as OnStartup does; it returns the stream's base URL.
func startLeader(t *testing.T, client kubernetes.Interface) (*Endpointsvc, string) {
	t.Helper()
	e := parseTest(t, strings.Replace(ourCorefile, " ttl 30\n", " ttl 30\n replicate 127.0.0.1:0\n", 1))
	src := e.source.(*kubesource.Source)
	src.NewClient = func() (kubernetes.Interface, error) { return client, nil }
	src.Debounce = 2 * time.Millisecond
	e.start(e.source)
	t.Cleanup(e.stop)
	if err := e.replicating.server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.replicating.server.Stop)
	return e, "http://" + e.replicating.server.Addr()
}

// followerCorefile is the shipped stanza's options with the stream of
// base as the source.
func followerCorefile(base string) string {
	return strings.Replace(ourCorefile, " source kubernetes\n", " source replica "+base+"\n", 1)
}

// startFollower runs a follower of base, with a snapshot at snap ("" none).
func startFollower(t *testing.T, base, snap string) *Endpointsvc {
	t.Helper()
	e := parseTest(t, followerCorefile(base))
	e.source.(*replica.Source).Backoff = 20 * time.Millisecond
	e.snapshotPath = snap
	e.start(e.source)
	t.Cleanup(e.stop)
	return e
}

func followerStats(e *Endpointsvc) *replica.FollowerStats { return &e.source.(*replica.Source).Stats }

// sameAnswers waits until e answers qs as want.
func sameAnswers(t *testing.T, e *Endpointsvc, qs []clustergen.Question, want []string, what string) {
	t.Helper()
	kubefix.Eventually(t, func() string {
		if d := firstDiff(qs, answers(e, qs), want); d != "" {
			return what + ": " + d
		}
		return ""
	})
}

// TestReplicatedAnswersAsLeader (property): on generated clusters changed
// step by step through the API (fake), the follower answers every
// generated question as the leader, which answers as a table built whole;
// the follower received one whole state, and every step as changes.
func TestReplicatedAnswersAsLeader(t *testing.T) {
	for _, seed := range genSeeds(t, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := clustergen.Small()
			c := clustergen.Generate(seed, cfg)
			f := newFakeCluster(t, c)
			leader, base := startLeader(t, f.client)
			follower := startFollower(t, base, "")
			r := rand.New(rand.NewSource(seed))
			for step := range 30 {
				ch := c.Step(r)
				f.apply(t, ch)
				qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(int64(step))))
				want := answers(ourPlugin(t, clusterModel(c)), qs)
				sameAnswers(t, leader, qs, want, fmt.Sprintf("step %d (%v %T), leader", step, ch.Op, ch.Obj))
				sameAnswers(t, follower, qs, want, fmt.Sprintf("step %d (%v %T), follower", step, ch.Op, ch.Obj))
			}
			st := followerStats(follower)
			if st.Full.Load() != 1 || st.Patches.Load() < 10 {
				t.Errorf("the follower applied %d whole states and %d patches; want 1 and one per step", st.Full.Load(), st.Patches.Load())
			}
			if n := leader.replicating.leader.Stats.Full.Load(); n != 1 {
				t.Errorf("the leader sent %d whole states, want 1", n)
			}
		})
	}
}

// TestReplicaSnapshotRestart: a follower restarted from its snapshot
// answers at once (the leader down, or before the stream), and resumes
// with the names changed meanwhile only; with the leader stopped it keeps
// answering.
func TestReplicaSnapshotRestart(t *testing.T) {
	cfg := clustergen.Small()
	c := clustergen.Generate(11, cfg)
	f := newFakeCluster(t, c)
	_, base := startLeader(t, f.client)
	snap := filepath.Join(t.TempDir(), "snap.json")
	first := startFollower(t, base, snap)
	qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(1)))
	want := answers(ourPlugin(t, clusterModel(c)), qs)
	sameAnswers(t, first, qs, want, "first follower")
	first.stop() // writes its snapshot, with the stream's origin

	r := rand.New(rand.NewSource(11))
	changed := map[string]bool{}
	for range 3 {
		ch := c.Step(r)
		f.apply(t, ch)
		changed[fmt.Sprintf("%T", ch.Obj)] = true
	}
	want = answers(ourPlugin(t, clusterModel(c)), qs)
	again := startFollower(t, base, snap)
	if !again.Ready() {
		t.Fatal("not ready from the snapshot")
	}
	sameAnswers(t, again, qs, want, "restarted follower")
	st := followerStats(again)
	if st.Full.Load() != 0 || st.FullRecords.Load() != 0 || st.ChangeRecords.Load() == 0 || st.ChangeRecords.Load() > 6 {
		t.Errorf("resumed from the snapshot: %d whole states (%d records), %d change records for 3 steps",
			st.Full.Load(), st.FullRecords.Load(), st.ChangeRecords.Load())
	}

	// the leader gone: the follower keeps its table, and so does one
	// restarted meanwhile from the snapshot
	down := startFollower(t, "http://127.0.0.1:1", snap)
	again.stop()
	late := startFollower(t, "http://127.0.0.1:1", snap)
	for _, e := range []*Endpointsvc{down, late} {
		if !e.Ready() {
			t.Fatal("a follower of a leader that is down is not ready from its snapshot")
		}
		if d := firstDiff(qs, answers(e, qs), want); d != "" {
			t.Fatalf("with the leader down: %s", d)
		}
	}
}

// TestReplicaOptionsChanged: a follower restarted from its snapshot with
// other options than its table was built with (noendpoints dropped: the
// snapshot of its last patch has no slices) receives the whole state,
// not the changes since, and answers as the leader; restarted with the
// same options it resumes.
func TestReplicaOptionsChanged(t *testing.T) {
	cfg := clustergen.Small()
	c := clustergen.Generate(13, cfg)
	f := newFakeCluster(t, c)
	leader, base := startLeader(t, f.client)
	snap := filepath.Join(t.TempDir(), "snap.json")
	start := func(corefile string) *Endpointsvc {
		e := parseTest(t, corefile)
		e.source.(*replica.Source).Backoff = 20 * time.Millisecond
		e.snapshotPath = snap
		e.start(e.source)
		t.Cleanup(e.stop)
		return e
	}
	noEndpoints := strings.Replace(followerCorefile(base), " ttl 30\n", " ttl 30\n noendpoints\n", 1)
	first := start(noEndpoints)
	kubefix.Eventually(t, func() string {
		if followerStats(first).Full.Load() != 1 {
			return "no whole state yet"
		}
		return ""
	})
	f.apply(t, c.Step(rand.New(rand.NewSource(13)))) // a patch: the snapshot is then the served table's, without slices
	kubefix.Eventually(t, func() string {
		if followerStats(first).Patches.Load() == 0 {
			return "no patch yet"
		}
		return ""
	})
	first.stop()

	again := start(noEndpoints)
	kubefix.Eventually(t, func() string {
		if leader.replicating.leader.Stats.Resumed.Load() == 0 {
			return "not resumed yet"
		}
		return ""
	})
	if n := followerStats(again).Full.Load(); n != 0 {
		t.Errorf("restarted with the same options: %d whole states, want 0", n)
	}
	again.stop()

	qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(2)))
	want := answers(ourPlugin(t, clusterModel(c)), qs)
	full := start(followerCorefile(base))
	sameAnswers(t, full, qs, want, "restarted without noendpoints")
	if n := followerStats(full).Full.Load(); n != 1 {
		t.Errorf("restarted with other options: %d whole states, want 1", n)
	}
}

// TestReplicaLeaderReload: a reload of the leader hands its stream's
// state to the new instance, whose followers resume with the changes only.
func TestReplicaLeaderReload(t *testing.T) {
	cfg := clustergen.Small()
	c := clustergen.Generate(12, cfg)
	f := newFakeCluster(t, c)
	old, base := startLeader(t, f.client)
	follower := startFollower(t, base, "")
	qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(1)))
	sameAnswers(t, follower, qs, answers(ourPlugin(t, clusterModel(c)), qs), "before the reload")

	old.handOver() // OnRestart
	next := parseTest(t, strings.Replace(ourCorefile, " ttl 30\n", " ttl 30\n replicate "+strings.TrimPrefix(base, "http://")+"\n", 1))
	next.carryKey = old.carryKey
	src := next.source.(*kubesource.Source)
	src.NewClient = func() (kubernetes.Interface, error) { return f.client, nil }
	next.start(next.source) // OnStartup: takes the table and the stream's state over
	t.Cleanup(next.stop)
	if err := next.replicating.server.Start(); err != nil { // beside the old listener
		t.Fatal(err)
	}
	t.Cleanup(next.replicating.server.Stop)
	old.replicating.server.Stop() // OnShutdown
	old.stop()
	if next.replicating.leader.Epoch() != old.replicating.leader.Epoch() {
		t.Fatal("the new instance's leader has another epoch")
	}
	ch := c.Step(rand.New(rand.NewSource(12)))
	f.apply(t, ch)
	sameAnswers(t, follower, qs, answers(ourPlugin(t, clusterModel(c)), qs), "after the reload")
	if st := followerStats(follower); st.Full.Load() != 1 {
		t.Errorf("%d whole states: the reload cost another", st.Full.Load())
	}
}

// TestParseReplication: the options of the stream, and their errors.
func TestParseReplication(t *testing.T) {
	const spec = "endpointsvc cluster.local {\n"
	pki := testpki.Write(t, t.TempDir())
	for _, tc := range []struct {
		in  string
		err string
		chk func(t *testing.T, e *Endpointsvc)
	}{
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155 {\ntoken_file /run/t\n}\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if e.replicating == nil || e.replicating.server == nil {
				t.Error("no leader")
			}
		}},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate 127.0.0.1:9155\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if e.replicating == nil {
				t.Error("no leader on loopback without a token")
			}
		}},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate [::1]:9155\n}"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate localhost:9155\n}"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155\n}", err: "Testfile:4 - Error during parsing: replicate :9155 serves the cluster's table beyond loopback: set token_file"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate 10.0.0.1:9155 {\n}\n}", err: "Testfile:4 - Error during parsing: replicate 10.0.0.1:9155 serves the cluster's table beyond loopback"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155 {\ntls " + pki.Cert + " " + pki.Key + "\n}\n}", err: "replicate :9155 serves the cluster's table beyond loopback"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155 {\ntls " + pki.Cert + " " + pki.Key + " " + pki.CA + "\n}\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if f := e.replicating.server.TLS; f == nil || f.CA != pki.CA {
				t.Errorf("tls: %+v", f)
			}
		}},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155 {\ntoken_file t\ntls " + pki.Cert + "\n}\n}", err: "tls of replicate takes CERT KEY [CA]"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155 {\ntoken_file t\ntls /none.pem " + pki.Key + "\n}\n}", err: "Testfile:6 - Error during parsing: tls: certificate /none.pem"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate :9155 {\ntoken_file t\ntls_servername x\n}\n}", err: `unknown property "tls_servername"`},
		{in: spec + "source replica https://10.96.0.10:9155 {\ntoken_file t\ntls " + pki.CA + "\ntls_servername meshdns.kube-system.svc\n}\nschema kubernetes\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if k := e.source.(*replica.Source).Key(); !strings.Contains(k, "meshdns.kube-system.svc") || !strings.Contains(k, pki.CA) {
				t.Errorf("key %s", k)
			}
		}},
		{in: spec + "source replica https://10.96.0.10:9155 {\ntls " + pki.ClientCert + " " + pki.ClientKey + " " + pki.CA + "\n}\nschema kubernetes\n}"},
		{in: spec + "source replica https://10.96.0.10:9155 {\ntls\n}\nschema kubernetes\n}"},
		{in: spec + "source replica http://10.96.0.10:9155 {\ntls " + pki.CA + "\n}\nschema kubernetes\n}", err: "Testfile:3 - Error during parsing: tls needs an https:// replica URL"},
		{in: spec + "source replica https://10.96.0.10:9155 {\ntls /none.pem\n}\nschema kubernetes\n}", err: "tls: CA: open /none.pem"},
		{in: spec + "source replica https://10.96.0.10:9155 {\ntls_servername x\n}\nschema kubernetes\n}", err: "tls_servername needs tls"},
		{in: spec + "source replica https://10.96.0.10:9155 {\ntls a b c d\n}\nschema kubernetes\n}", err: "tls of source replica takes [CERT KEY] [CA]"},
		{in: spec + "source kubernetes\nreplicate 127.0.0.1:9155 {\ntoken_file /run/t\n}\nschema kubernetes\nttl 7\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if e.replicating == nil || e.schema.(*dnsSchema).srv.TTL != 7 {
				t.Error("the options after the token block were not read")
			}
		}},
		{in: spec + "source replica http://10.96.0.10:9155 {\n token_file secret\n}\nschema kubernetes\nsnapshot /var/lib/x.json\n}", chk: func(t *testing.T, e *Endpointsvc) {
			s, ok := e.source.(*replica.Source)
			if !ok || e.snapshotPath != "/var/lib/x.json" {
				t.Fatalf("source %T, snapshot %q", e.source, e.snapshotPath)
			}
			if k := s.Key(); k != `replica "http://10.96.0.10:9155/v1/replicate" token_file="`+abs(t, "secret")+`"` {
				t.Errorf("key %s", k)
			}
		}},
		{in: spec + "schema kubernetes\nsource replica https://dns.example:9155\nreplicate :9156 {\ntoken_file t\n}\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if _, ok := e.source.(*replica.Source); !ok || e.replicating == nil {
				t.Error("a follower that replicates too")
			}
		}},
		{in: spec + "source kubernetes\nreplicate 127.0.0.1:9155\n}", err: "replicate needs 'schema kubernetes'"},
		{in: spec + "source replica http://a:1\n}", err: "source replica needs 'schema kubernetes'"},
		{in: spec + "source replica ftp://a:1\nschema kubernetes\n}", err: `bad replica URL "ftp://a:1"`},
		{in: spec + "source replica http://a:1?x=1\nschema kubernetes\n}", err: "bad replica URL"},
		{in: spec + "source replica http://:9155\nschema kubernetes\n}", err: `bad replica URL "http://:9155": no host`},
		{in: spec + "source replica\nschema kubernetes\n}", err: "Wrong argument count"},
		{in: spec + "source replica http://a:1\nschema kubernetes\nlabels a=b\n}", err: "labels needs 'source kubernetes'"},
		{in: spec + "source replica http://a:1\nschema kubernetes\ntoken_file t\n}", err: "token_file needs 'source orch URL'"},
		{in: spec + "source replica http://a:1 {\ncolour red\n}\nschema kubernetes\n}", err: `unknown property "colour"`},
		{in: spec + "source replica http://a:1 {\ntoken_file\n}\nschema kubernetes\n}", err: "Wrong argument count"},
		{in: spec + "source replica http://a:1 x\nschema kubernetes\n}", err: "Wrong argument count"},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate 9155\n}", err: `bad replicate address "9155"`},
		{in: spec + "source kubernetes\nschema kubernetes\nreplicate 127.0.0.1:1\nreplicate :2\n}", err: "replicate can only be given once"},
		{in: spec + "source kubernetes\nsource replica http://a:1\nschema kubernetes\n}", err: "only one source"},
		{in: spec + "source kubernetes\nschema kubernetes\nstale_ede\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if !e.stale.on || e.stale.after != 0 {
				t.Errorf("stale_ede: %+v", e.stale)
			}
		}},
		{in: spec + "source replica http://a:1\nschema kubernetes\nstale_ede 30s\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if !e.stale.on || e.stale.after != 30*time.Second {
				t.Errorf("stale_ede 30s: %+v", e.stale)
			}
		}},
		{in: spec + "source kubernetes\nschema kubernetes\n}", chk: func(t *testing.T, e *Endpointsvc) {
			if e.stale.on {
				t.Error("stale_ede on by default")
			}
		}},
		{in: spec + "source kubernetes\nschema kubernetes\nstale_ede soon\n}", err: `bad stale_ede age "soon"`},
		{in: spec + "source kubernetes\nschema kubernetes\nstale_ede 1s 2s\n}", err: "Wrong argument count"},
		{in: spec + "source kubernetes\nschema kubernetes\nstale_ede\nstale_ede\n}", err: "stale_ede can only be given once"},
	} {
		e, err := parse(caddy.NewTestController("dns", tc.in))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.chk != nil:
			tc.chk(t, e)
		}
	}
}
