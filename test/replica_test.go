package test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// The replication stream end to end: a real kube-apiserver, a meshdns
// leader (the shipped cluster Corefile with `replicate`) and meshdns
// followers (`source replica`, a node-local meshdns's Corefile) that
// watch nothing on the API server. The follower reaches the leader through
// a loopback proxy the test can cut.

// replicaFollowGoal is how soon a change must reach a follower (issue 23).
const replicaFollowGoal = time.Second

// TestReplicaStream: a change reaches the follower within 1 s; a stream
// cut (the follower restarted from its snapshot, or its connection
// dropped) and resumed replays only the names changed meanwhile; through
// an API-server outage and with the leader stopped the follower keeps its
// table, and restarted while the leader is down it answers at once from
// its snapshot; a new leader process (another epoch) of the same content
// resumes it; followers add no watch on the API server.
func TestReplicaStream(t *testing.T) {
	k := startKubeAPI(t)
	createNS(t, k, "shop")
	createNS(t, k, "dns")
	ips := replicaObjects(t, k, "shop", 20)
	leader := Start(t, replicaLeaderCorefile(t, k.Kubeconfig), Options{Env: []string{"POD_NAME=meshdns-e2e", "POD_NAMESPACE=dns"}, Files: replicaTokenFiles})
	proxy := startReplicaProxy(t, leader.Addr(9155))
	follower := startReplicaFollower(t, proxy.Addr())
	within(t, 5*time.Second, follower.DNS(), "svc19.shop.svc.cluster.local", dns.TypeA, ips["svc19"])
	names := []string{"db.shop.svc.cluster.local", "_http._tcp.svc3.shop.svc.cluster.local"}
	for i := range 20 {
		names = append(names, fmt.Sprintf("svc%d.shop.svc.cluster.local", i))
	}
	const recv, records = "coredns_endpointsvc_replica_received_bytes_total", "coredns_endpointsvc_replica_received_records_total"
	if n := follower.Metric(records, `kind="full"`); n != 22 {
		t.Errorf("the first state had %v name records, want 22 (svc0-19, db, default/kubernetes)", n)
	}

	t.Run("ChangeWithin1s", func(t *testing.T) {
		var b, r float64
		b = replicaDelta(follower, func() {
			r = replicaDelta(follower, func() {
				replicaSetPort(t, k, "shop", "svc3", 8080)
				within(t, replicaFollowGoal, follower.DNS(), "_http._tcp.svc3.shop.svc.cluster.local", dns.TypeSRV, "0 100 8080 svc3.shop.svc.cluster.local.")
			}, records, `kind="change"`)
		}, recv)
		t.Logf("one Service edit: %v record, %v bytes on the stream", r, b)
		b = replicaDelta(follower, func() {
			r = replicaDelta(follower, func() {
				updateSlice(t, k, "shop", "db-a", replicaDBEndpoints(false)...)
				within(t, replicaFollowGoal, follower.DNS(), "db.shop.svc.cluster.local", dns.TypeA, "10.244.200.2", "10.244.200.3")
			}, records, `kind="change"`)
		}, recv)
		t.Logf("one endpoint flip (a slice of 3): %v record, %v bytes on the stream", r, b)
		ip := createService(t, k, "shop", "late", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
		within(t, replicaFollowGoal, follower.DNS(), "late.shop.svc.cluster.local", dns.TypeA, ip)
	})

	t.Run("ResumeAfterFollowerRestart", func(t *testing.T) {
		follower.Stop()
		ip := createService(t, k, "shop", "r1", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
		updateSlice(t, k, "shop", "db-a", replicaDBEndpoints(true)...)
		resumed := replicaDelta(leader, func() {
			follower.start() // the same directory: its snapshot
			within(t, 2*time.Second, follower.DNS(), "r1.shop.svc.cluster.local", dns.TypeA, ip)
			within(t, time.Second, follower.DNS(), "db.shop.svc.cluster.local", dns.TypeA, "10.244.200.1", "10.244.200.2", "10.244.200.3")
		}, "coredns_endpointsvc_replicate_sent_total", `kind="resume"`)
		full, changes, bytes := follower.Metric(records, `kind="full"`), follower.Metric(records, `kind="change"`), follower.Metric(recv)
		t.Logf("restarted from its snapshot: %v whole-state records, %v change records, %v bytes", full, changes, bytes)
		if resumed != 1 || full != 0 || changes != 2 {
			t.Errorf("after two changes: %v streams resumed, %v whole-state records, %v change records; want 1, 0, 2", resumed, full, changes)
		}
	})

	t.Run("ResumeAfterConnectionDrop", func(t *testing.T) {
		full := follower.Metric(records, `kind="full"`)
		var ip string
		changes := replicaDelta(follower, func() {
			proxy.Cut()
			ip = createService(t, k, "shop", "r2", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
			replicaSetPort(t, k, "shop", "svc3", 9090)
			time.Sleep(1500 * time.Millisecond) // the follower tries at least once meanwhile
			proxy.Resume()
			within(t, 3*time.Second, follower.DNS(), "r2.shop.svc.cluster.local", dns.TypeA, ip)
			within(t, time.Second, follower.DNS(), "_http._tcp.svc3.shop.svc.cluster.local", dns.TypeSRV, "0 100 9090 svc3.shop.svc.cluster.local.")
		}, records, `kind="change"`)
		if d := follower.Metric(records, `kind="full"`) - full; d != 0 || changes != 2 {
			t.Errorf("after a dropped connection and two changes: %v whole-state records, %v change records; want 0, 2", d, changes)
		}
	})

	t.Run("NoWatchesFromFollowers", func(t *testing.T) {
		before := apiWatches(t, k)
		var more []*Server
		for range 3 {
			more = append(more, startReplicaFollower(t, leader.Addr(9155)))
		}
		for _, s := range more {
			within(t, 5*time.Second, s.DNS(), "svc19.shop.svc.cluster.local", dns.TypeA, ips["svc19"])
		}
		after := apiWatches(t, k)
		t.Logf("API server watches: %v with one leader and one follower, %v with three more followers", before, after)
		if after > before {
			t.Errorf("three more followers added %v watches on the API server", after-before)
		}
		for _, s := range more {
			s.Stop()
		}
	})

	t.Run("LeaderReload", func(t *testing.T) {
		full, resumed := follower.Metric(records, `kind="full"`), leader.Metric("coredns_endpointsvc_replicate_sent_total", `kind="resume"`)
		leader.Signal(syscall.SIGUSR1)
		Eventually(t, 10*time.Second, func() string {
			if !strings.Contains(leader.Log(), "Reloading complete") {
				return "the leader's reload is not complete"
			}
			return ""
		})
		ip := createService(t, k, "shop", "reloaded", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
		within(t, 3*time.Second, follower.DNS(), "reloaded.shop.svc.cluster.local", dns.TypeA, ip)
		// the new instance's stream: the follower resumed there, with the same epoch
		Eventually(t, 5*time.Second, func() string {
			if n := leader.Metric("coredns_endpointsvc_replicate_sent_total", `kind="resume"`) - resumed; n < 1 {
				return "the follower has not resumed on the reloaded leader"
			}
			return ""
		})
		if d := follower.Metric(records, `kind="full"`) - full; d != 0 {
			t.Errorf("the leader's reload cost the follower a whole state (%v records)", d)
		}
	})

	names = append(names, "reloaded.shop.svc.cluster.local")
	want := replicaAnswers(follower.DNS(), names)
	t.Run("APIOutage", func(t *testing.T) {
		const age = "coredns_endpointsvc_table_age_seconds"
		if a, b := leader.Metric(age), follower.Metric(age); a != 0 || b != 0 || replicaStaleEDE(t, follower.DNS()) {
			t.Errorf("before the outage: table age %v on the leader, %v on the follower, want 0 and no Stale Answer", a, b)
		}
		k.StopAPI()
		time.Sleep(3 * time.Second)
		replicaSame(t, follower.DNS(), names, want, "API server down, follower")
		replicaSame(t, leader.DNS(), names, want, "API server down, leader")
		// the leader notices within its probe interval (10 s while healthy),
		// and its followers hear it at once: their tables are as old
		Eventually(t, 15*time.Second, func() string {
			if a, b := leader.Metric(age), follower.Metric(age); a <= 0 || b < a-1 {
				return fmt.Sprintf("table age %v on the leader, %v on the follower: want both stale", a, b)
			}
			return ""
		})
		if !replicaStaleEDE(t, follower.DNS()) {
			t.Error("the follower of a stale leader answers without Stale Answer (stale_ede)")
		}
		k.StartAPI()
		ip := createService(t, k, "shop", "after", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
		within(t, 5*time.Second, follower.DNS(), "after.shop.svc.cluster.local", dns.TypeA, ip)
		Eventually(t, 15*time.Second, func() string {
			if a, b := leader.Metric(age), follower.Metric(age); a != 0 || b != 0 || replicaStaleEDE(t, follower.DNS()) {
				return fmt.Sprintf("after the API's return: table age %v on the leader, %v on the follower, want 0", a, b)
			}
			return ""
		})
	})

	names = append(names, "after.shop.svc.cluster.local")
	want = replicaAnswers(follower.DNS(), names)
	t.Run("LeaderStopped", func(t *testing.T) {
		leader.Stop()
		time.Sleep(2 * time.Second)
		replicaSame(t, follower.DNS(), names, want, "leader stopped")
		follower.Stop()
		start := time.Now()
		follower.opts.NoWait = true
		follower.start()
		follower.opts.NoWait = false
		Eventually(t, 5*time.Second, func() string {
			if r, err := TryQuery(follower.DNS(), "svc19.shop.svc.cluster.local", dns.TypeA, "udp"); err != nil || len(r.Answer) == 0 {
				return fmt.Sprintf("no answer yet: %v %v", r, err)
			}
			return ""
		})
		took := time.Since(start)
		t.Logf("restarted while the leader is down: answering %v after its start", took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("the follower answered %v after its start, want within 1 s", took)
		}
		replicaSame(t, follower.DNS(), names, want, "restarted while the leader is down")
		if !strings.Contains(follower.Log(), "Source replica failing, keeping the last good state") {
			t.Error("the follower did not log the leader's absence")
		}
	})

	t.Run("LeaderBack", func(t *testing.T) {
		full := follower.Metric(records, `kind="full"`)
		leader.start() // a new process: another epoch, but the same content, which it recognises by its digest
		ip := createService(t, k, "shop", "back", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
		within(t, 5*time.Second, follower.DNS(), "back.shop.svc.cluster.local", dns.TypeA, ip)
		if d := follower.Metric(records, `kind="full"`) - full; d != 0 {
			t.Errorf("%v whole-state records from a new leader of the same content, want none", d)
		}
		if n := leader.Metric("coredns_endpointsvc_replicate_sent_total", `kind="resume"`); n < 1 {
			t.Errorf("the new leader resumed %v streams, want the follower's", n)
		}
	})
}

// TestReplicaMovesToAnotherLeader (issue 31 item 2): two leaders on the
// same kube-apiserver, each with its own epoch; the follower's leader is
// killed and its URL now reaches the other, which recognises the
// follower's state by its digest (both built the same content from the
// same API state) and sends only what changed since - not the whole
// state - and the changes after that.
func TestReplicaMovesToAnotherLeader(t *testing.T) {
	k := startKubeAPI(t)
	createNS(t, k, "shop")
	createNS(t, k, "dns")
	ips := replicaObjects(t, k, "shop", 40)
	a := Start(t, replicaLeaderCorefile(t, k.Kubeconfig), Options{Env: []string{"POD_NAME=meshdns-a", "POD_NAMESPACE=dns"}, Files: replicaTokenFiles})
	b := Start(t, replicaLeaderCorefile(t, k.Kubeconfig), Options{Env: []string{"POD_NAME=meshdns-b", "POD_NAMESPACE=dns"}, Files: replicaTokenFiles})
	proxy := startReplicaProxy(t, a.Addr(9155))
	follower := startReplicaFollower(t, proxy.Addr())
	within(t, 5*time.Second, follower.DNS(), "svc39.shop.svc.cluster.local", dns.TypeA, ips["svc39"])
	const recv, records, sent = "coredns_endpointsvc_replica_received_bytes_total", "coredns_endpointsvc_replica_received_records_total", "coredns_endpointsvc_replicate_sent_total"
	whole := follower.Metric(recv)

	// a change both leaders see, then quiet: they hold the same content
	ip := createService(t, k, "shop", "before", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
	within(t, 3*time.Second, follower.DNS(), "before.shop.svc.cluster.local", dns.TypeA, ip)
	within(t, 3*time.Second, b.DNS(), "before.shop.svc.cluster.local", dns.TypeA, ip)
	time.Sleep(time.Second)

	bytesBefore, fullBefore := follower.Metric(recv), follower.Metric(records, `kind="full"`)
	a.Signal(syscall.SIGKILL)
	a.Stop()
	proxy.SwitchTo(b.Addr(9155))
	Eventually(t, 10*time.Second, func() string {
		if n := b.Metric(sent, `kind="resume"`); n < 1 {
			return "the follower has not resumed on the other leader"
		}
		return ""
	})
	moved := follower.Metric(recv) - bytesBefore
	t.Logf("the first (whole) state: %v bytes; moving to the other leader: %v bytes", whole, moved)
	if n := b.Metric(sent, `kind="full"`); n != 0 {
		t.Errorf("the other leader sent %v whole states", n)
	}
	if d := follower.Metric(records, `kind="full"`) - fullBefore; d != 0 {
		t.Errorf("the follower received %v whole-state records on moving", d)
	}
	if moved <= 0 || moved > whole/20 {
		t.Errorf("moving cost %v bytes, want some and at most 5 %% of a whole state (%v)", moved, whole)
	}
	ip = createService(t, k, "shop", "after", corev1.ServiceTypeClusterIP, nil).Spec.ClusterIP
	within(t, replicaFollowGoal+time.Second, follower.DNS(), "after.shop.svc.cluster.local", dns.TypeA, ip)
	within(t, time.Second, follower.DNS(), "svc39.shop.svc.cluster.local", dns.TypeA, ips["svc39"])
}
