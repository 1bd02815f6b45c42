package test

import (
	"fmt"
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
	}
	return fmt.Errorf("change of a %T", ch.Obj)
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
var genZones = []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}

// genInZones reports whether name lies in one of genZones.
func genInZones(name string) bool {
	for _, z := range genZones {
		if dns.IsSubDomain(z, strings.ToLower(name)) {
			return true
		}
	}
	return false
}

// genAsk asks addr one question over UDP (again over TCP when truncated)
// with the CD bit as given — the cache in front of the plugin keys on it,
// so a phase that sets it is answered by the plugin, not by the cache of
// an earlier phase.
func genAsk(addr string, q clustergen.Question, cd bool) string {
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
		return "error: " + err.Error()
	}
	return genAnswer(r)
}

// genMismatch is one question two servers answered differently.
type genMismatch struct {
	Seed   int64
	Phase  string // live, patched, restart
	Q      clustergen.Question
	Ours   string
	Stock  string
	Reason string // an allowed difference: why; "" for a failure
}

// genAllowed are differences the test accepts, keyed by the exact shape,
// each with its reason — only where the stock plugin itself is wrong or
// the difference cannot be matched, never a bug of ours; each is listed
// in docs/cluster-dns.md. Everything else fails the test.
var genAllowed = []struct {
	match  func(c *clustergen.Cluster, q clustergen.Question, ours, stock string) bool
	reason string
}{
	{genSeveralCNAMESlices, "CNAME asked of a name with FQDN endpoint records from several EndpointSlices: " +
		"the stock plugin answers the first record of an unordered index (a map), so its answer changes from run to run"},
}

// genAllow is the reason a difference is accepted, or "".
func genAllow(c *clustergen.Cluster, q clustergen.Question, ours, stock string) string {
	for _, a := range genAllowed {
		if a.match(c, q, ours, stock) {
			return a.reason
		}
	}
	return ""
}

// genSeveralCNAMESlices: the question is a CNAME of a headless Service or
// of an endpoint name whose records (ready addresses × ports, as the stock
// plugin lists them) come from two or more slices, one of them an FQDN
// address; and each server answered either NODATA or a CNAME to one of
// those FQDN addresses.
func genSeveralCNAMESlices(c *clustergen.Cluster, q clustergen.Question, ours, stock string) bool {
	if q.Type != dns.TypeCNAME {
		return false
	}
	labels := dns.SplitDomainName(strings.ToLower(q.Name))
	zone := dns.SplitDomainName(c.Config().Zone)
	n := len(labels) - len(zone)
	if n < 3 || n > 4 || labels[n-1] != "svc" {
		return false
	}
	endpoint, svcName, ns := "", labels[n-3], labels[n-2]
	if n == 4 {
		endpoint = labels[0]
	}
	if s := c.Service(ns, svcName); s == nil || s.Spec.Type == corev1.ServiceTypeExternalName ||
		(endpoint == "" && s.Spec.ClusterIP != corev1.ClusterIPNone) {
		return false
	}
	slices, fqdns := map[string]bool{}, map[string]bool{}
	for _, sl := range c.Slices {
		if sl.Namespace != ns || sl.Labels[discoveryv1.LabelServiceName] != svcName {
			continue
		}
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if endpoint != "" && endpoint != genEndpointName(e, a) {
					continue
				}
				slices[sl.Name] = true
				if sl.AddressType == discoveryv1.AddressTypeFQDN {
					fqdns[dns.Fqdn(a)] = true
				}
			}
		}
	}
	if len(slices) < 2 || len(fqdns) == 0 {
		return false
	}
	for _, answer := range []string{ours, stock} {
		if !strings.HasPrefix(answer, "NOERROR ") {
			return false
		}
		rrs := strings.Split(strings.SplitN(strings.SplitN(answer, "| answer: ", 2)[1], " |", 2)[0], "; ")
		if rrs[0] == "" {
			continue // NODATA
		}
		f := strings.Fields(rrs[0])
		if len(rrs) != 1 || len(f) != 5 || f[3] != "CNAME" || !fqdns[strings.ToLower(f[4])] {
			return false
		}
	}
	return true
}

// genEndpointName is the label the schema gives address a of endpoint e:
// its hostname, else the address with dashes (and a 0 after a final one).
func genEndpointName(e discoveryv1.Endpoint, a string) string {
	if e.Hostname != nil {
		return *e.Hostname
	}
	if strings.Contains(a, ".") {
		return strings.ReplaceAll(a, ".", "-")
	}
	d := strings.ReplaceAll(a, ":", "-")
	if strings.HasSuffix(d, "-") {
		d += "0"
	}
	return d
}

// genReport writes every mismatch of a seed to $MESHDNS_GEN_OUT/seed-N.txt
// (when set), for the analysis of a long run.
func genReport(t *testing.T, seed int64, ms []genMismatch) {
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
		err = os.WriteFile(filepath.Join(dir, "seed-"+strconv.FormatInt(seed, 10)+".txt"), []byte(b.String()), 0o644)
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
