package test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// shippedClusterCorefile returns the Corefile of deploy/kubernetes/configmap.yaml,
// changed only as far as a test on loopback needs: the kubernetes source
// reads kubeconfig instead of the in-cluster configuration, the snapshot
// lives in the test's directory, the HTTP endpoints listen on loopback, and
// the upstream resolvers are a hosts entry standing in for the outside
// world plus a loopback port where nothing answers.
func shippedClusterCorefile(t *testing.T, kubeconfig string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatalf("configmap.yaml: %v", err)
	}
	cf := cm.Data["Corefile"]
	for _, r := range []struct{ old, new string }{
		{"source kubernetes\n", "source kubernetes " + kubeconfig + "\n"},
		{"/var/lib/meshdns/", ""},
		{"/var/run/secrets/meshdns-replication/", ""}, // the stream's token: a file "token" beside the snapshot
		{" :", " 127.0.0.1:"},
		{"forward . /etc/resolv.conf", extHosts + "\n    forward . 127.0.0.1:5301"},
	} {
		if !strings.Contains(cf, r.old) {
			t.Fatalf("the shipped Corefile has no %q:\n%s", r.old, cf)
		}
		cf = strings.ReplaceAll(cf, r.old, r.new)
	}
	return cf
}

// extHosts answers the one outside name the ExternalName Services point at.
const extHosts = `hosts {
        192.0.2.99 ext.example.test
        fallthrough
    }`

// stockCorefile is the shipped Corefile with the stock kubernetes plugin in
// place of endpointsvc, with the options kubeadm gives it (the same ones
// the shipped endpointsvc block uses): every other plugin of the chain
// (cache, loadbalance, forward) is the same in both.
func stockCorefile(t *testing.T, shipped, kubeconfig string) string {
	t.Helper()
	i := strings.Index(shipped, "endpointsvc cluster.local")
	if i < 0 {
		t.Fatalf("no endpointsvc block in the shipped Corefile:\n%s", shipped)
	}
	j, depth := i, 0 // the end of the block: its closing brace
	for ; j < len(shipped); j++ {
		if shipped[j] == '{' {
			depth++
		} else if shipped[j] == '}' {
			if depth--; depth == 0 {
				break
			}
		}
	}
	return shipped[:i] + `kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig ` + kubeconfig + `
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }` + shipped[j+1:]
}

// (Freeze and Thaw stop and continue kube-apiserver with SIGSTOP/SIGCONT:
// its sockets stay open and every request hangs, as with an API server
// that is overloaded or partitioned away.)

// Freeze sends SIGSTOP to kube-apiserver.
func (k *kubeAPI) Freeze() { k.signal(syscall.SIGSTOP) }

// Thaw sends SIGCONT to kube-apiserver.
func (k *kubeAPI) Thaw() { k.signal(syscall.SIGCONT) }

func (k *kubeAPI) signal(sig syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.api == nil {
		k.t.Fatal("kube-apiserver is not running")
	}
	if err := k.api.Process.Signal(sig); err != nil {
		k.t.Fatalf("kube-apiserver: %v", err)
	}
}

// question is one name and type of the differential list.
type question struct {
	name  string
	qtype uint16
}

func (q question) String() string { return q.name + " " + dns.TypeToString[q.qtype] }

// canonical writes a reply so that two servers' replies compare equal when
// they answer the same: the rcode, then the answer and additional RRsets
// sorted (order is not part of an RRset, and loadbalance shuffles it),
// TTLs left out (a cache in front counts them down), and the authority
// section's types with the SOA's serial left out (it is the time of the
// last change, which each server notes on its own).
func canonical(m *dns.Msg) string {
	if m == nil {
		return "no reply"
	}
	rrs := func(sec []dns.RR) string {
		var out []string
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			c := dns.Copy(rr)
			c.Header().Ttl = 0
			if soa, ok := c.(*dns.SOA); ok {
				soa.Serial = 0
			}
			out = append(out, strings.ReplaceAll(c.String(), "\t", " "))
		}
		sort.Strings(out)
		return strings.Join(out, "; ")
	}
	return fmt.Sprintf("%s aa=%v | answer: %s | authority: %s | additional: %s",
		dns.RcodeToString[m.Rcode], m.Authoritative, rrs(m.Answer), rrs(m.Ns), rrs(m.Extra))
}

// ask queries addr over UDP (TCP when truncated) and canonicalises.
func ask(addr string, q question) string {
	c := dns.Client{Timeout: 2 * 1e9}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(q.name), q.qtype)
	m.SetEdns0(4096, false)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return "error: " + err.Error()
	}
	return canonical(r)
}

// ptrName is the reverse name of an address.
func ptrName(t *testing.T, ip string) string {
	t.Helper()
	n, err := dns.ReverseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// port is a Service port.
func svcPort(name string, proto corev1.Protocol, port, target int32) corev1.ServicePort {
	p := corev1.ServicePort{Name: name, Protocol: proto, Port: port}
	p.TargetPort.IntVal = target
	return p
}

// specEndpoint is an EndpointSlice endpoint with a hostname ("" none) and
// its conditions.
func specEndpoint(addr, hostname string, ready, serving, terminating bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}
	if hostname != "" {
		e.Hostname = &hostname
	}
	return e
}

// specSlice creates an EndpointSlice of Service svc with ports (name/proto/port).
func specSlice(t *testing.T, k *kubeAPI, ns, name, svc string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) {
	t.Helper()
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "meshdns-e2e"}},
		AddressType: at, Endpoints: eps, Ports: ports,
	}
	if _, err := k.Client.DiscoveryV1().EndpointSlices(ns).Create(ctxT(t), sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// slicePort is an EndpointSlice port.
func slicePort(name string, proto corev1.Protocol, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
}
