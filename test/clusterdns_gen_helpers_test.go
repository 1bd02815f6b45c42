package test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// The differential test on generated clusters (clusterdns_gen_test.go)
// needs: the generated objects applied to a real API server, a way to know
// that both servers have seen every change, a stricter comparison than
// canonical (TTLs count), and a record of the differences by shape.

// genApply makes one generated change on the API server. An update sends
// the generated object whole over the server's current version; the API
// server keeps what it allocated itself (node ports) as for any PUT.
func genApply(t *testing.T, k *kubeAPI, ch clustergen.Change) error {
	t.Helper()
	ctx := ctxT(t)
	switch o := ch.Obj.(type) {
	case *corev1.Namespace:
		if ch.Op != clustergen.Add {
			return fmt.Errorf("namespace %s %s: not generated", ch.Op, o.Name)
		}
		_, err := k.Client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // default and kube-system come with the API server
			err = nil
		}
		return err
	case *corev1.Service:
		api := k.Client.CoreV1().Services(o.Namespace)
		switch ch.Op {
		case clustergen.Add:
			_, err := api.Create(ctx, o, metav1.CreateOptions{})
			return err
		case clustergen.Update:
			cur, err := api.Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, o, metav1.UpdateOptions{})
			return err
		}
		return api.Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *discoveryv1.EndpointSlice:
		api := k.Client.DiscoveryV1().EndpointSlices(o.Namespace)
		switch ch.Op {
		case clustergen.Add:
			_, err := api.Create(ctx, o, metav1.CreateOptions{})
			return err
		case clustergen.Update:
			cur, err := api.Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, o, metav1.UpdateOptions{})
			return err
		}
		return api.Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *corev1.Pod:
		return genApplyPod(ctx, k, ch.Op, o)
	case *mcsapi.ServiceImport:
		return genApplyImport(ctx, k, ch.Op, o)
	}
	return fmt.Errorf("change of a %T", ch.Obj)
}

// genApplyPod writes a Pod as its kubelet would have it: the object, then
// its status (which a create drops). The namespace's default
// ServiceAccount is made first (no controller manager runs: the admission
// plugin wants it). A deletion is immediate (no kubelet confirms a
// graceful one).
func genApplyPod(ctx context.Context, k *kubeAPI, op clustergen.Op, o *corev1.Pod) error {
	api := k.Client.CoreV1().Pods(o.Namespace)
	if op == clustergen.Delete {
		zero := int64(0)
		return api.Delete(ctx, o.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	cur, err := api.Get(ctx, o.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: "default"}}
		if _, err := k.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cur, err = api.Create(ctx, o, metav1.CreateOptions{})
	case err == nil && !maps.Equal(cur.Labels, o.Labels):
		cur.Labels = o.Labels
		cur, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	cur.Status = o.Status
	_, err = api.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}

// genCreate creates every object of c, namespaces first.
func genCreate(t *testing.T, k *kubeAPI, c *clustergen.Cluster) {
	t.Helper()
	for _, ns := range c.Namespaces {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: ns.DeepCopy()})
	}
	for _, s := range c.Services {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: s.DeepCopy()})
	}
	for _, sl := range c.Slices {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: sl.DeepCopy()})
	}
	for _, imp := range c.Imports {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: imp.DeepCopy()})
	}
	for _, sl := range c.ImportSlices {
		genMust(t, k, clustergen.Change{Op: clustergen.Add, Obj: sl.DeepCopy()})
	}
}

// genMust applies ch and fails the test when the API server refuses it:
// the generator promises valid objects.
func genMust(t *testing.T, k *kubeAPI, ch clustergen.Change) {
	t.Helper()
	if err := genApply(t, k, ch); err != nil {
		t.Fatalf("the API server refused a generated %s of %T: %v\n%s", ch.Op, ch.Obj, err, genDescribe(ch.Obj))
	}
}

// genDescribe is an object as YAML-ish text for a failure message.
func genDescribe(obj any) string {
	type stringer interface{ String() string }
	if s, ok := obj.(stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%+v", obj)
}

// genMark creates the sync marker of round n — a namespace, a headless
// Service in it and a slice with one endpoint named h — and waits until
// every server answers that endpoint's name. The watches of each kind
// deliver changes in order, so a server that has seen the marker's
// namespace, Service and slice has seen every change made before them.
// Each poll asks with a type no earlier poll used, so a negative answer
// cached in front of the plugin never hides the marker.
func genMark(t *testing.T, k *kubeAPI, n int, zone string, servers ...*Server) time.Duration {
	t.Helper()
	ns := fmt.Sprintf("mark-%d", n)
	ip := fmt.Sprintf("10.254.%d.%d", n/250, 1+n%250) // clustergen.CallerIPv4
	port, name, proto, host := int32(80), "http", corev1.ProtocolTCP, "h"
	start := time.Now()
	for _, ch := range []clustergen.Change{
		{Op: clustergen.Add, Obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}},
		{Op: clustergen.Add, Obj: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: name, Protocol: proto, Port: port}}}}},
		{Op: clustergen.Add, Obj: &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m-mark", Labels: map[string]string{
				discoveryv1.LabelServiceName: "m", discoveryv1.LabelManagedBy: clustergen.ManagedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Hostname: &host}}}},
	} {
		genMust(t, k, ch)
	}
	qname := "h.m." + ns + ".svc." + zone + "."
	for _, s := range servers {
		Eventually(t, 20*time.Second, func() string {
			genPoll++
			m := new(dns.Msg)
			m.SetQuestion(qname, 65280+uint16(genPoll%250)) // private-use types
			m.CheckingDisabled = genPoll/250%2 == 1
			r, err := dns.Exchange(m, s.DNS())
			if err != nil {
				return err.Error()
			}
			if r.Rcode != dns.RcodeSuccess {
				return fmt.Sprintf("marker %s: %s", qname, dns.RcodeToString[r.Rcode])
			}
			return ""
		})
	}
	return time.Since(start)
}

// genPoll counts marker polls over the run (each uses a new cache key).
var genPoll int

// genAnswer writes a reply so that two servers' replies compare equal
// only when they answer the same: rcode, the AA and TC flags, then the
// answer, authority and additional sections, each sorted (order is not
// part of an RRset and loadbalance shuffles it) and with their TTLs. Left
// out: the OPT record, the SOA serial (each server notes the time of its
// last change on its own), and the TTLs of a reply that carries a record
// from outside the cluster zones (an ExternalName's target, resolved
// through the server's own chain): the cache in front of that lookup
// counts its TTL down from whenever this server last asked it, and the
// cache sets every TTL of the reply to the smallest.
func genAnswer(m *dns.Msg) string {
	if m == nil {
		return "no reply"
	}
	outside := false
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			outside = outside || (rr.Header().Rrtype != dns.TypeOPT && !genInZones(rr.Header().Name))
		}
	}
	rrs := func(sec []dns.RR) string {
		var out []string
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			c := dns.Copy(rr)
			if soa, ok := c.(*dns.SOA); ok {
				soa.Serial = 0
			}
			s := strings.ReplaceAll(c.String(), "\t", " ")
			if outside {
				h := c.Header()
				s = strings.Replace(s, fmt.Sprintf("%s %d ", h.Name, h.Ttl), h.Name+" ~ ", 1)
			}
			out = append(out, s)
		}
		sort.Strings(out)
		return strings.Join(out, "; ")
	}
	return fmt.Sprintf("%s aa=%v tc=%v | answer: %s | authority: %s | additional: %s",
		dns.RcodeToString[m.Rcode], m.Authoritative, m.Truncated, rrs(m.Answer), rrs(m.Ns), rrs(m.Extra))
}

// genZones are the zones of the shipped cluster-DNS Corefile's block.
var genZones = []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa.", "clusterset.local."} // the last with multicluster

// genInZones reports whether name lies in one of genZones.
func genInZones(name string) bool {
	for _, z := range genZones {
		if dns.IsSubDomain(z, strings.ToLower(name)) {
			return true
		}
	}
	return false
}

// genReply is one server's reply to a question: as genAnswer writes it
// (what the comparison compares), and the message (nil when none came).
type genReply struct {
	text string
	msg  *dns.Msg
}

// genAsk asks addr one question over UDP (again over TCP when truncated)
// with the CD bit as given — the cache in front of the plugin keys on it,
// so a phase that sets it is answered by the plugin, not by the cache of
// an earlier phase.
func genAsk(addr string, q clustergen.Question, cd bool) genReply {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	m.SetEdns0(4096, false)
	m.CheckingDisabled = cd
	c := dns.Client{Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.Exchange(m, addr)
	}
	if err != nil {
		return genReply{text: "error: " + err.Error()}
	}
	return genReply{genAnswer(r), r}
}

// genMismatch is one question two servers answered differently.
type genMismatch struct {
	Seed   int64
	Phase  string // live, patched, whole, restart
	Q      clustergen.Question
	Ours   string
	Stock  string
	Reason string // an allowed difference: why; "" for a failure
}

// genDiff is one difference to judge: the question, both replies, and the
// cluster as both servers had it.
type genDiff struct {
	c       *clustergen.Cluster
	cnames  clustergen.CNAMEConflicts // of c
	control bool                      // ours is the stock plugin too
	q       clustergen.Question
	ours    genReply
	stock   genReply
}

// genAllowed are the differences the test accepts, each by its exact shape
// and with its reason - only where the stock plugin itself is wrong or the
// difference cannot be matched, never a bug of ours; each is listed in
// docs/cluster-dns.md. Everything else fails the test.
var genAllowed = []struct {
	match  func(d genDiff) bool
	reason string
}{
	{genOneCNAME, "a name with more than one CNAME candidate (several FQDN endpoints, an FQDN slice with " +
		"several ports, FQDNs beside IPs), or an answer chained through one: the stock plugin answers several " +
		"CNAMEs or CNAMEs beside addresses (invalid DNS, RFC 1034 §3.6.2), meshdns one CNAME"},
	{genControlCNAME, "control run: a CNAME question of the same shape; the stock plugin picks its one CNAME " +
		"from a map, so two processes answer different ones"},
	{genOwnAddresses, "the name server's own addresses: each process answers with the addresses of its " +
		"interfaces at its start, and other tests on this machine add and remove veths between two starts"},
}

// allowed is the reason the difference is accepted, or "".
func (d genDiff) allowed() string {
	for _, a := range genAllowed {
		if a.match(d) {
			return a.reason
		}
	}
	return ""
}

// genOneCNAME: the shared rule of the kept difference
// (clustergen.CNAMEConflicts.Deliberate): the question is of the
// conflict's shape and meshdns answered one CNAME per name, none beside
// other data.
func genOneCNAME(d genDiff) bool {
	return !d.control && d.cnames.Deliberate(d.q, d.stock.msg, d.ours.msg)
}

// genControlCNAME: in the control run only, a CNAME question of the
// conflict's shape, where the stock plugin's pick is not stable.
func genControlCNAME(d genDiff) bool {
	return d.control && d.q.Type == dns.TypeCNAME && d.cnames.Covers(d.q, d.stock.msg)
}

// genOwnAddresses: the question is the NS of the zone apex or an A/AAAA of
// ns.dns.<zone>, and the two replies are the same once the A and AAAA
// records of ns.dns.<zone> are left out of every section - they differ in
// the set of addresses only, not in rcode, flags or shape.
func genOwnAddresses(d genDiff) bool {
	zone := strings.ToLower(dns.Fqdn(d.c.Config().Zone))
	nsName, name := "ns.dns."+zone, strings.ToLower(d.q.Name)
	switch {
	case name == zone && d.q.Type == dns.TypeNS:
	case name == nsName && (d.q.Type == dns.TypeA || d.q.Type == dns.TypeAAAA):
	default:
		return false
	}
	if d.ours.msg == nil || d.stock.msg == nil {
		return false
	}
	strip := func(m *dns.Msg) string {
		c := m.Copy()
		keep := func(rrs []dns.RR) []dns.RR {
			var out []dns.RR
			for _, rr := range rrs {
				t := rr.Header().Rrtype
				if (t == dns.TypeA || t == dns.TypeAAAA) && strings.EqualFold(rr.Header().Name, nsName) {
					continue
				}
				out = append(out, rr)
			}
			return out
		}
		c.Answer, c.Ns, c.Extra = keep(c.Answer), keep(c.Ns), keep(c.Extra)
		return genAnswer(c)
	}
	return strip(d.ours.msg) == strip(d.stock.msg)
}

// genReport writes every mismatch of a run to $MESHDNS_GEN_OUT/<name>.txt
// (when set), for the analysis of a long run.
func genReport(t *testing.T, name string, ms []genMismatch) {
	dir := os.Getenv("MESHDNS_GEN_OUT")
	if dir == "" || len(ms) == 0 {
		return
	}
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "seed=%d phase=%s q=%s\n  meshdns: %s\n  stock:   %s\n", m.Seed, m.Phase, m.Q, m.Ours, m.Stock)
		if m.Reason != "" {
			fmt.Fprintf(&b, "  allowed: %s\n", m.Reason)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".txt"), []byte(b.String()), 0o644)
		if err != nil {
			t.Logf("writing the mismatches: %v", err)
		}
	}
}

// genMergeQuestions is a followed by the questions of b not in a (by
// lowercased name and type): the names of deleted objects stay asked.
func genMergeQuestions(a, b []clustergen.Question) []clustergen.Question {
	seen := map[clustergen.Question]bool{}
	out := make([]clustergen.Question, 0, len(a)+len(b))
	for _, l := range [][]clustergen.Question{a, b} {
		for _, q := range l {
			k := clustergen.Question{Name: strings.ToLower(q.Name), Type: q.Type}
			if !seen[k] {
				seen[k] = true
				out = append(out, q)
			}
		}
	}
	return out
}

// genEnvInt is an integer from the environment, or def.
func genEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// genUpstream is the outside world's resolver for the servers under test:
// a DNS server on a loopback port this test holds, answering SERVFAIL to
// everything (the shipped Corefile's forward target; hosts answers the one
// outside name that resolves). Holding the port keeps another process on
// the machine from answering in its place. It returns the port.
func genUpstream(t *testing.T) int {
	t.Helper()
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	})
	for _, network := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: addr, Net: network, Handler: h}
		started := make(chan error, 1)
		srv.NotifyStartedFunc = func() { started <- nil }
		go func() { started <- srv.ListenAndServe() }()
		if err := <-started; err != nil {
			t.Fatalf("upstream stand-in on %s/%s: %v", addr, network, err)
		}
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return port
}

// genWaitDNS waits until s answers on its DNS port: its ready endpoint may
// answer before the DNS listener is bound.
func genWaitDNS(t *testing.T, s *Server) {
	t.Helper()
	Eventually(t, 5*time.Second, func() string {
		m := new(dns.Msg)
		m.SetQuestion("meshdns-gen-probe.invalid.", dns.TypeA)
		c := dns.Client{Timeout: 200 * time.Millisecond}
		if _, _, err := c.Exchange(m, s.DNS()); err != nil {
			return "no DNS answer: " + err.Error()
		}
		return ""
	})
}
