package main

// -mix spec: endpointsvc's schema kubernetes against the stock kubernetes
// plugin on a cluster-DNS mix of objects and queries.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/procstatus"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var (
	namespacesN   = flag.Int("namespaces", 50, "-mix spec: namespaces the Services are spread over")
	headlessShare = flag.Float64("headless-share", 0.10, "-mix spec: share of headless Services (StatefulSet-like, endpoints with hostnames)")
	externalShare = flag.Float64("external-share", 0.05, "-mix spec: share of ExternalName Services (the rest have a ClusterIP)")
	sampleEvery   = flag.Duration("sample", 20*time.Millisecond, "-mix spec: interval of the RssAnon samples behind the peaks")
	relistSettle  = flag.Duration("relist-settle", 10*time.Second, "-mix spec: how long after the restarted API server's /readyz (and at least 5 s after the plugin's last relist request) the relist peak is sampled")
)

// auditPolicy logs the list and watch requests of the objects the plugins
// read, so that the run sees each plugin's lists (and relists).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["list", "watch"]
  resources:
  - group: ""
    resources: ["services", "namespaces", "nodes", "endpoints", "pods"]
  - group: "discovery.k8s.io"
    resources: ["endpointslices"]
- level: None
`

// specService is one Service of the spec mix, with what the queries need.
type specService struct {
	name, ns  string
	clusterIP string   // ClusterIP Services: the allocated address
	hosts     []string // headless Services: the endpoints' hostnames
	eps       int      // endpoints
}

func (s *specService) fqdn() string { return s.name + "." + s.ns + ".svc.cluster.local." }

// specObjects is what populateSpec created.
type specObjects struct {
	clusterIP, headless, external []*specService
	endpoints, slices             int
}

// pool runs the functions sent to its channel on n workers and returns the
// first error.
func pool(n int, fill func(work chan<- func() error)) error {
	work := make(chan func() error, 256)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := f(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	fill(work)
	close(work)
	wg.Wait()
	return first
}

// populateSpec creates the namespaces, the Nodes, and the Services with
// their EndpointSlices (at most 100 endpoints per slice, as the
// EndpointSlice controller writes them): ClusterIP Services with 0.1-2.4x
// -endpoints ready endpoints (on average -endpoints) and named ports,
// headless Services whose endpoints have hostnames (StatefulSet pods; as
// many endpoints on average as make the total Services x -endpoints), and
// ExternalName Services without endpoints.
func populateSpec(c kubernetes.Interface) *specObjects {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	nh := int(float64(*services)**headlessShare + 0.5)
	ne := int(float64(*services)**externalShare + 0.5)
	nc := *services - nh - ne
	if nc < 0 {
		fail("-headless-share + -external-share > 1")
	}
	kinds := make([]byte, 0, *services)
	kinds = append(kinds, bytes.Repeat([]byte{'c'}, nc)...)
	kinds = append(kinds, bytes.Repeat([]byte{'h'}, nh)...)
	kinds = append(kinds, bytes.Repeat([]byte{'e'}, ne)...)
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })

	// endpoint counts: ClusterIP 0.1-2.4x the mean, headless 1/3-5/3x theirs
	cFactors := []float64{0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 2.4}
	hMean := 0.0
	if nh > 0 {
		hMean = float64(*perSvc) * float64(*services-nc) / float64(nh)
	}
	o := &specObjects{}
	all := make([]*specService, *services)
	first := make([]int, *services) // index of each Service's first endpoint
	for i, k := range kinds {
		s := &specService{ns: fmt.Sprintf("ns-%d", i%*namespacesN)}
		switch k {
		case 'c':
			s.name = fmt.Sprintf("svc-%d", i)
			s.eps = max(1, int(float64(*perSvc)*cFactors[len(o.clusterIP)%len(cFactors)]+0.5))
			o.clusterIP = append(o.clusterIP, s)
		case 'h':
			s.name = fmt.Sprintf("sts-%d", i)
			s.eps = max(1, int(hMean*float64(1+len(o.headless)%5)/3+0.5))
			for j := 0; j < s.eps; j++ {
				s.hosts = append(s.hosts, fmt.Sprintf("%s-%d", s.name, j))
			}
			o.headless = append(o.headless, s)
		case 'e':
			s.name = fmt.Sprintf("ext-%d", i)
			o.external = append(o.external, s)
		}
		all[i] = s
		first[i] = o.endpoints
		o.endpoints += s.eps
		o.slices += (s.eps + 99) / 100
	}

	err := pool(16, func(work chan<- func() error) {
		for n := 0; n < *namespacesN; n++ {
			work <- func() error {
				_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%d", n)}}, metav1.CreateOptions{})
				return err
			}
		}
	})
	if err != nil {
		fail("creating namespaces: %v", err)
	}
	ip := func(n int) string { return fmt.Sprintf("10.%d.%d.%d", 100+n/65536, n/256%256, n%256) }
	zones := []string{"zone-a", "zone-b", "zone-c"}
	err = pool(16, func(work chan<- func() error) {
		for n := 0; n < *nodes; n++ {
			work <- func() error {
				return createNode(ctx, c, n, map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node-%d", n), "topology.kubernetes.io/zone": zones[n%3]})
			}
		}
		tcp := corev1.ProtocolTCP
		for i, s := range all {
			work <- func() error {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns,
					Labels: map[string]string{"app": s.name, "app.kubernetes.io/name": s.name, "app.kubernetes.io/part-of": "bench"}}}
				var ports []discoveryv1.EndpointPort
				port := func(name string, p, target int32) {
					svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: name, Protocol: tcp, Port: p, TargetPort: intstr.FromInt32(target)})
					ports = append(ports, discoveryv1.EndpointPort{Name: &name, Protocol: &tcp, Port: &target})
				}
				switch kinds[i] {
				case 'c':
					svc.Spec.Selector = map[string]string{"app": s.name}
					port("http", 80, 8080)
					if i%3 == 0 {
						port("metrics", 9090, 9090)
					}
				case 'h':
					svc.Spec.ClusterIP = corev1.ClusterIPNone
					svc.Spec.Selector = map[string]string{"app": s.name}
					port("http", 80, 8080)
					port("peer", 7000, 7000)
				case 'e':
					svc.Spec.Type = corev1.ServiceTypeExternalName
					svc.Spec.ExternalName = s.name + ".example.com"
				}
				created, err := c.CoreV1().Services(s.ns).Create(ctx, svc, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				s.clusterIP = created.Spec.ClusterIP
				tr, ctrl := true, true
				for k := 0; k*100 < s.eps; k++ {
					sl := &discoveryv1.EndpointSlice{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05x", s.name, k*7919%0x100000), Namespace: s.ns,
							Labels:          map[string]string{discoveryv1.LabelServiceName: s.name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": s.name},
							Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2025-01-01T00:00:00Z"},
							OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: s.name, UID: created.UID, Controller: &ctrl, BlockOwnerDeletion: &ctrl}}},
						AddressType: discoveryv1.AddressTypeIPv4,
						Ports:       ports,
					}
					for j := k * 100; j < min(s.eps, (k+1)*100); j++ {
						n := first[i] + j
						node, zone := fmt.Sprintf("node-%d", n%*nodes), zones[n%*nodes%3]
						pod := fmt.Sprintf("%s-%x", s.name, n)
						ep := discoveryv1.Endpoint{
							Addresses:  []string{ip(n)},
							Conditions: discoveryv1.EndpointConditions{Ready: &tr, Serving: &tr},
							NodeName:   &node,
							Zone:       &zone,
							TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: s.ns, Name: pod, UID: "00000000-0000-0000-0000-000000000000"},
						}
						if kinds[i] == 'h' {
							host := s.hosts[j]
							ep.Hostname, ep.TargetRef.Name = &host, host
						}
						sl.Endpoints = append(sl.Endpoints, ep)
					}
					if _, err := c.DiscoveryV1().EndpointSlices(s.ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
						return err
					}
				}
				return nil
			}
		}
	})
	if err != nil {
		fail("creating objects: %v", err)
	}
	return o
}

// specQuery is one query of the mix.
type specQuery struct {
	name  string
	qtype uint16
}

// specQueries returns the load's queries (60% A: 45% ClusterIP Service
// names, 10% headless Service names, 5% headless endpoint hostnames; 20%
// SRV _http._tcp of ClusterIP and headless Services; 20% PTR of ClusterIPs),
// n of them in a fixed shuffled order, and the checks: a sample of those
// and some ExternalName names.
func specQueries(o *specObjects, n int) (load, checks []specQuery) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(l []*specService) *specService { return l[rng.IntN(len(l))] }
	named := append(slices.Clone(o.clusterIP), o.headless...)
	for j := 0; j < n; j++ {
		var q specQuery
		switch k := j % 20; {
		case k < 9 || (k < 12 && len(o.headless) == 0):
			q = specQuery{pick(o.clusterIP).fqdn(), dns.TypeA}
		case k < 11:
			q = specQuery{pick(o.headless).fqdn(), dns.TypeA}
		case k < 12:
			s := pick(o.headless)
			q = specQuery{s.hosts[rng.IntN(len(s.hosts))] + "." + s.fqdn(), dns.TypeA}
		case k < 16:
			q = specQuery{"_http._tcp." + pick(named).fqdn(), dns.TypeSRV}
		default:
			r, _ := dns.ReverseAddr(pick(o.clusterIP).clusterIP)
			q = specQuery{r, dns.TypePTR}
		}
		load = append(load, q)
	}
	rng.Shuffle(len(load), func(i, j int) { load[i], load[j] = load[j], load[i] })
	for j := 0; j < len(load); j += max(1, len(load)/400) {
		checks = append(checks, load[j])
	}
	for j := 0; j < len(o.external) && j < 20; j++ {
		checks = append(checks, specQuery{o.external[j].fqdn(), dns.TypeA})
	}
	return load, checks
}

func writeQueries(path string, qs []specQuery) {
	var b strings.Builder
	for _, q := range qs {
		fmt.Fprintf(&b, "%s %s\n", q.name, dns.TypeToString[q.qtype])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fail("%v", err)
	}
}

// answers asks every check and returns, per check, its rcode and sorted
// answer records (TTL 0), and how many failed or came back empty.
func answers(port int, checks []specQuery) (map[specQuery]string, int) {
	c := &dns.Client{Timeout: 2 * time.Second}
	out := map[specQuery]string{}
	bad := 0
	for _, q := range checks {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		r, _, err := c.Exchange(m, fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			out[q] = "error: " + err.Error()
			bad++
			continue
		}
		var rrs []string
		for _, rr := range r.Answer {
			rr.Header().Ttl = 0
			rrs = append(rrs, rr.String())
		}
		slices.Sort(rrs)
		out[q] = dns.RcodeToString[r.Rcode] + "\n" + strings.Join(rrs, "\n")
		if r.Rcode != dns.RcodeSuccess || len(rrs) == 0 {
			bad++
		}
	}
	return out, bad
}

// sampler records the peak RssAnon of a process.
type sampler struct {
	stop, done chan struct{}
	peak       int64
	n          int
}

func sampleAnon(pid int) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(*sampleEvery)
		defer t.Stop()
		for {
			if kib, err := procstatus.KiB(pid, "RssAnon"); err == nil {
				s.peak, s.n = max(s.peak, kib), s.n+1
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops the sampling and returns the peak in MiB and the samples taken.
func (s *sampler) end() (float64, int) {
	close(s.stop)
	<-s.done
	return float64(s.peak) / 1024, s.n
}

// auditEvent is the part of an audit log line read here.
type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  *struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// pluginLists reads the audit log from offset on and returns, per resource,
// the last successful full list by a client other than the API server and
// this program (not endpointsvc's one-Node probe) (a LIST, or a streaming list: a watch with
// sendInitialEvents=true) and how it was made.
func pluginLists(path string, offset int64) map[string]listSeen {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil
	}
	seen := map[string]listSeen{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.ObjectRef == nil ||
			strings.HasPrefix(e.UserAgent, "kube-apiserver") || strings.HasPrefix(e.UserAgent, benchUserAgent) {
			continue
		}
		if e.ResponseStatus != nil && e.ResponseStatus.Code != 0 && e.ResponseStatus.Code != 200 {
			continue
		}
		if u := e.RequestURI; strings.Contains(u, "limit=1&") || strings.HasSuffix(u, "limit=1") {
			continue // endpointsvc's probe of the API server, one Node
		}
		how := ""
		switch {
		case e.Verb == "list" && e.Stage == "ResponseComplete":
			how = "list"
		case e.Verb == "watch" && e.Stage == "ResponseStarted" && strings.Contains(e.RequestURI, "sendInitialEvents=true"):
			how = "watch-list"
		default:
			continue
		}
		l := seen[e.ObjectRef.Resource]
		l.at, l.how, l.n = e.StageTimestamp, how, l.n+1
		seen[e.ObjectRef.Resource] = l
	}
	return seen
}

type listSeen struct {
	at  time.Time
	how string
	n   int
}

func fileSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// compactEtcd writes a key outside the API server's prefix (so that the
// revision moves past every resourceVersion the plugin holds) and compacts
// etcd at the new revision, through etcd's JSON gateway, and returns the
// revision. A watch from an older resourceVersion then fails with "too old
// resource version" and the reflector relists. Without it, a re-watch that
// reaches the restarted API server while its watch cache initialises is
// served from etcd and needs no relist, by chance.
func compactEtcd(url string) int64 {
	post := func(path, body string) []byte {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			fail("etcd %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			fail("etcd %s: %s: %s", path, resp.Status, b)
		}
		return b
	}
	var put struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	b := post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, base64.StdEncoding.EncodeToString([]byte("/benchk8s/bump")), base64.StdEncoding.EncodeToString([]byte(time.Now().String()))))
	if err := json.Unmarshal(b, &put); err != nil {
		fail("etcd put: %v: %s", err, b)
	}
	rev, err := strconv.ParseInt(put.Header.Revision, 10, 64)
	if err != nil {
		fail("etcd put: revision %q", put.Header.Revision)
	}
	post("/v3/kv/compaction", fmt.Sprintf(`{"revision":%d,"physical":true}`, rev))
	return rev
}

// specRun is one plugin's figures in one round (memory in MiB).
type specRun struct {
	sync                                                 time.Duration
	syncPeak, afterSync, afterLoad, relistPeak, afterRel float64
	rssAfterSync, heap                                   float64
	syncSamples, relistSamples                           int
	qps                                                  int
	rcodes, lists, relists                               string
	apiBack, relistTook                                  time.Duration
}

// runSpec is -mix spec.
func runSpec(dir string, api *apiServer) {
	t0 := time.Now()
	o := populateSpec(api.client)
	if *podsN > 0 {
		populatePods(api.client, *podsN)
	}
	fmt.Printf("objects: %d namespaces, %d Services (%d ClusterIP, %d headless with endpoint hostnames, %d ExternalName), %d EndpointSlices with %d ready endpoints, %d Nodes, %d Pods; created in %v\n",
		*namespacesN, *services, len(o.clusterIP), len(o.headless), len(o.external), o.slices, o.endpoints, *nodes, *podsN, time.Since(t0).Round(time.Millisecond))
	if *hold > 0 {
		fmt.Printf("kubeconfig %s (held for %v)\n", api.kubeconfig, *hold)
		time.Sleep(*hold)
		return
	}
	load, checks := specQueries(o, 20000)
	queries := filepath.Join(dir, "queries-spec.txt")
	writeQueries(queries, load)
	fmt.Printf("queries: %d in a fixed shuffled order, 45%% A ClusterIP Service, 10%% A headless Service, 5%% A headless endpoint hostname, 20%% SRV _http._tcp, 20%% PTR of ClusterIPs; %d checked names (with %d ExternalName)\n",
		len(load), len(checks), min(20, len(o.external)))

	idle := specIdle(dir)
	fmt.Printf("idle meshdns (whoami only, no plugin holding data): anonymous RSS %.1f MiB 3 s after /ready (RSS %.1f), live Go heap %.1f MiB\n", idle.afterSync, idle.rssAfterSync, idle.heap)

	variants := specVariants(api.kubeconfig)
	res := map[string][]specRun{}
	first := map[string]map[specQuery]string{} // each plugin's answers after its first sync
	for r := 1; r <= *rounds; r++ {
		order := []string{"endpointsvc", "kubernetes"}
		if r%2 == 0 {
			order = []string{"kubernetes", "endpointsvc"}
		}
		for _, name := range order {
			x, ans := specOne(dir, api, r, name, variants[name], queries, checks)
			res[name] = append(res[name], x)
			if first[name] == nil {
				first[name] = ans
			}
		}
	}
	// Do both plugins answer the same?
	diff := 0
	for _, q := range checks {
		if a, b := first["endpointsvc"][q], first["kubernetes"][q]; a != b {
			if diff < 5 {
				fmt.Printf("answers differ for %s %s:\n  endpointsvc: %s\n  kubernetes:  %s\n", q.name, dns.TypeToString[q.qtype],
					strings.ReplaceAll(a, "\n", " | "), strings.ReplaceAll(b, "\n", " | "))
			}
			diff++
		}
	}
	fmt.Printf("answer sections of the %d checked names: %d differ between the plugins\n", len(checks), diff)
	if *logs != "" {
		if b, err := os.ReadFile(api.audit); err == nil {
			_ = os.WriteFile(filepath.Join(*logs, "audit-spec.log"), b, 0o644)
		}
	}
	printSpecTable(res)
}

// specVariants are the two server blocks compared: the shipped stanza and
// the stock plugin with the same options.
func specVariants(kc string) map[string]string {
	if *podsN > 0 { // both with pods verified: each watches every Pod
		v := specVariantsInsecure(kc)
		for k, b := range v {
			v[k] = strings.Replace(b, "pods insecure", "pods verified", 1)
		}
		return v
	}
	return specVariantsInsecure(kc)
}

func specVariantsInsecure(kc string) map[string]string {
	return map[string]string{
		"endpointsvc": "    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source kubernetes " + kc + "\n        schema kubernetes\n        pods insecure\n        snapshot endpointsvc.snapshot.json\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n",
		"kubernetes":  "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        kubeconfig " + kc + "\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n",
	}
}

// specIdle measures meshdns without a plugin holding data: the baseline of
// every anonymous RSS figure.
func specIdle(dir string) (x specRun) {
	ready, prom, pp := freePort(), freePort(), freePort()
	cf := filepath.Join(dir, "Corefile.spec.idle")
	corefile := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n    pprof 127.0.0.1:%d\n    whoami\n}\n", freePort(), ready, prom, pp)
	if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
		fail("%v", err)
	}
	p := start(dir, "taskset", "-c", "0", *meshdns, "-conf", cf)
	waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", ready), p, 60*time.Second)
	time.Sleep(3 * time.Second)
	pid := p.cmd.Process.Pid
	x.afterSync, x.rssAfterSync = statusMiB(pid, "RssAnon"), statusMiB(pid, "VmRSS")
	gc(pp)
	x.heap = heapMiB(prom)
	p.stop()
	return x
}

// specOne runs one plugin once: sync, memory, load, relist.
func specOne(dir string, api *apiServer, round int, name, block, queries string, checks []specQuery) (x specRun, ans map[specQuery]string) {
	port, ready, prom, pp := freePort(), freePort(), freePort(), freePort()
	corefile := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n    pprof 127.0.0.1:%d\n%s}\n", port, ready, prom, pp, block)
	cf := filepath.Join(dir, "Corefile.spec."+name)
	if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
		fail("%v", err)
	}
	logf := func(format string, args ...any) {
		fmt.Printf("round %d: %-12s "+format+"\n", append([]any{round, name}, args...)...)
	}

	// sync: start until /ready, its peak until 2 s later (from the API
	// server: no snapshot of an earlier round to start from; the one this
	// run writes is part of what the sync costs)
	_ = os.Remove(filepath.Join(dir, "endpointsvc.snapshot.json"))
	off := fileSize(api.audit)
	start0 := time.Now()
	p := start(dir, "taskset", "-c", "0", *meshdns, "-conf", cf) // taskset execs meshdns: same PID
	pid := p.cmd.Process.Pid
	smp := sampleAnon(pid)
	waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", ready), p, 180*time.Second)
	x.sync = time.Since(start0)
	time.Sleep(2 * time.Second)
	x.syncPeak, x.syncSamples = smp.end()
	lists := pluginLists(api.audit, off)
	var expect []string
	for res := range lists {
		expect = append(expect, res)
	}
	slices.Sort(expect)
	if len(expect) == 0 {
		logf("saw no list in the audit log: the relist peak is sampled for -relist-settle only")
	}
	for _, res := range expect {
		x.lists += fmt.Sprintf(" %s(%s)", res, lists[res].how)
	}
	logf("synced in %v (lists:%s); peak anonymous RSS during the sync %.1f MiB (%d samples)", x.sync.Round(time.Millisecond), x.lists, x.syncPeak, x.syncSamples)

	var bad int
	ans, bad = answers(port, checks)
	if bad > len(checks)/10 {
		fail("%s: %d of %d checked names failed or answered nothing\n%s", name, bad, len(checks), tail(p.log.String()))
	}
	time.Sleep(1 * time.Second) // settle: 3 s after /ready, as -mix headless
	x.afterSync, x.rssAfterSync = statusMiB(pid, "RssAnon"), statusMiB(pid, "VmRSS")
	logf("after sync: anonymous RSS %.1f MiB (RSS %.1f); %d of %d checked names failed or were empty", x.afterSync, x.rssAfterSync, bad, len(checks))

	// load
	x.qps, x.rcodes = qpsSpec(port, queries)
	x.afterLoad = statusMiB(pid, "RssAnon")
	la, _ := os.ReadFile("/proc/loadavg")
	logf("QPS %d (%s; load average %s); anonymous RSS after the load %.1f MiB", x.qps, x.rcodes, strings.Join(strings.Fields(string(la))[:3], " "), x.afterLoad)

	// relist: restart the API server, sample until it is back and the plugin
	// has listed everything again, and -relist-settle more
	off = fileSize(api.audit)
	smp = sampleAnon(pid)
	down := time.Now()
	api.proc.stop()
	stopped := time.Since(down)
	rev := compactEtcd(api.etcd)
	api.proc = start(api.dir, *apiserver, api.args...)
	api.waitReady()
	x.apiBack = time.Since(down)
	logf("API server stopped in %v, etcd compacted at revision %d, /readyz again after %v", stopped.Round(time.Millisecond), rev, x.apiBack.Round(time.Millisecond))
	readyAt := time.Now()
	var last time.Time
	for {
		rel := pluginLists(api.audit, off)
		all := true
		for _, res := range expect {
			l, ok := rel[res]
			if !ok {
				all = false
				continue
			}
			if l.at.After(last) {
				last = l.at
			}
		}
		if all || time.Since(readyAt) > 90*time.Second {
			x.relists = ""
			for _, res := range expect {
				if l, ok := rel[res]; ok {
					x.relists += fmt.Sprintf(" %s(%s, %.1fs after /readyz)", res, l.how, l.at.Sub(readyAt).Seconds())
				} else {
					x.relists += " " + res + "(NOT relisted)"
				}
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	end := readyAt.Add(*relistSettle)
	if e := last.Add(5 * time.Second); e.After(end) {
		end = e
	}
	time.Sleep(time.Until(end))
	x.relistPeak, x.relistSamples = smp.end()
	x.relistTook = time.Since(down)
	x.afterRel = statusMiB(pid, "RssAnon")
	after, bad := answers(port, checks)
	same := 0
	for _, q := range checks {
		if ans[q] == after[q] {
			same++
		} else if len(checks)-same <= 3 { // the first few that changed
			logf("after the relist %s %s answers %q, before %q", q.name, dns.TypeToString[q.qtype], after[q], ans[q])
		}
	}
	logf("relist: API server back after %v; relists:%s; peak anonymous RSS %.1f MiB over %v (%d samples); anonymous RSS after %.1f MiB; %d of %d checked names answer as before the restart (%d failed or were empty)",
		x.apiBack.Round(time.Millisecond), x.relists, x.relistPeak, x.relistTook.Round(time.Millisecond), x.relistSamples, x.afterRel, same, len(checks), bad)

	// the live heap last: the forced GC maps the symbol tables in again
	gc(pp)
	x.heap = heapMiB(prom)
	logf("live Go heap at the end (after GC) %.1f MiB", x.heap)
	if *memstats {
		printMemstats(name, pp, pid)
	}
	if *profile != "" && round == 1 {
		saveProfile(pp, filepath.Join(*profile, name+"-spec.heap"))
	}
	if *logs != "" {
		_ = os.WriteFile(filepath.Join(*logs, fmt.Sprintf("%s-spec-round%d.log", name, round)), p.log.Bytes(), 0o644)
	}
	p.stop()
	return x, ans
}

// qpsSpec runs dnsload and returns the QPS and dnsperf's response codes.
func qpsSpec(port int, queries string) (int, string) {
	cmd := exec.Command(*dnsload, "127.0.0.1", strconv.Itoa(port), queries, strconv.Itoa(*secs))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		fail("dnsload: %v\n%s%s", err, out, stderr.String())
	}
	codes := ""
	for _, l := range strings.Split(stderr.String(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Response codes:"); ok {
			codes = strings.Join(strings.Fields(v), " ")
		}
	}
	ls := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, f := range strings.Fields(ls[len(ls)-1]) {
		if v, ok := strings.CutPrefix(f, "qps="); ok {
			n, _ := strconv.Atoi(v)
			return n, codes
		}
	}
	return 0, codes
}

// printSpecTable prints every figure per round and the ratios
// endpointsvc/kubernetes as a Markdown table.
func printSpecTable(res map[string][]specRun) {
	e, k := res["endpointsvc"], res["kubernetes"]
	n := min(len(e), len(k))
	fmt.Printf("\n| figure | goal |")
	for r := 1; r <= n; r++ {
		fmt.Printf(" endpointsvc r%d | kubernetes r%d | ratio r%d |", r, r, r)
	}
	fmt.Printf(" ratio of the means |\n|---|---|%s\n", strings.Repeat("---:|", 3*n+1))
	row := func(what, goal, unit string, f func(specRun) float64) {
		fmt.Printf("| %s | %s |", what, goal)
		var sa, sb float64
		for r := 0; r < n; r++ {
			a, b := f(e[r]), f(k[r])
			sa, sb = sa+a, sb+b
			fmt.Printf(" %.1f%s | %.1f%s | **%.2f** |", a, unit, b, unit, a/b)
		}
		fmt.Printf(" **%.2f** |\n", sa/sb)
	}
	row("time to sync (start until /ready 200)", "", " s", func(x specRun) float64 { return x.sync.Seconds() })
	row("peak anonymous RSS during the sync (until /ready + 2 s)", "≤ 0.5", " MiB", func(x specRun) float64 { return x.syncPeak })
	row("anonymous RSS after sync (/ready + 3 s)", "≤ 0.5", " MiB", func(x specRun) float64 { return x.afterSync })
	row("anonymous RSS after the QPS load", "≤ 0.5", " MiB", func(x specRun) float64 { return x.afterLoad })
	row("peak anonymous RSS during the relist (API server restart)", "≤ 0.5", " MiB", func(x specRun) float64 { return x.relistPeak })
	row("anonymous RSS after the relist", "", " MiB", func(x specRun) float64 { return x.afterRel })
	row("total RSS after sync (for reference)", "", " MiB", func(x specRun) float64 { return x.rssAfterSync })
	row("live Go heap at the end (after GC)", "", " MiB", func(x specRun) float64 { return x.heap })
	row("QPS (A/SRV/PTR mix)", "≥ 1.5", "", func(x specRun) float64 { return float64(x.qps) })
}
