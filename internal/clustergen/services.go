package clustergen

import (
	"fmt"
	"hash/fnv"
	"math/rand"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Namespace names: the schema words first (a namespace called like a label
// of the schema — node, pod, svc, dns-version — must not confuse a server),
// then ordinary ones, then numbered ones.
var (
	schemaNamespaces   = []string{"default", "kube-system", "node", "pod", "svc", "dns-version"}
	ordinaryNamespaces = []string{"shop", "dns", "team-a", "a", "monitoring", "ns", "x1", "local", "arpa", "cluster"}
)

// Service names: some shared between namespaces, some schema words (all
// DNS-1035 labels: a letter first). "kubernetes" is left out: the API
// server owns kubernetes.default.
var serviceNames = []string{"web", "api", "db", "cache", "svc", "pod", "dns-version", "a", "ns", "default",
	"kube-dns", "x", "grpc", "tcp", "long-" + strings.Repeat("abcdefghij", 5) + "xyz"}

// Port names (DNS-1123 labels, some equal to protocol words) and numbers.
var (
	portNames   = []string{"http", "https", "grpc", "dns", "dns-tcp", "metrics", "p8080", "a", "tcp", "udp"}
	portNumbers = []int32{53, 80, 443, 5432, 6379, 8080, 8443, 9000, 9090}
)

// The kinds of Service the generator makes.
type kind int

const (
	kindClusterIP kind = iota
	kindNodePort
	kindLoadBalancer
	kindHeadless
	kindHeadlessNoPorts
	kindExternalName
	kindCount
)

// kindWeights are the odds of each kind, in that order.
var kindWeights = []int{30, 10, 8, 20, 8, 14}

// externalTargets are ExternalName targets outside the cluster domain: one
// that the test's upstream answers, one that no upstream answers, one
// written with a trailing dot, one that looks like an address.
var externalTargets = []string{"ext.example.test", "other.example.test", "ext.example.test.", "192.0.2.1"}

// newNamespace is the next namespace: schema words, ordinary, numbered.
func (c *Cluster) newNamespace(r *rand.Rand) *corev1.Namespace {
	var name string
	for _, n := range append(append([]string(nil), schemaNamespaces...), ordinaryNamespaces...) {
		if !c.used["namespace//"+n] {
			name = n
			break
		}
	}
	if name == "" {
		name = fmt.Sprintf("ns-%d", r.Intn(1000))
	}
	name = c.uniqueName("namespace", "", name)
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"clustergen": "yes", TeamLabel: team(name)}}}
}

// TeamLabel is a label every generated namespace has, "a" or "b" (a
// hash of its name: no draw of the generator, so clusters of a seed stay
// what they were), for namespace_labels to select by.
const TeamLabel = "clustergen/team"

func team(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return string(rune('a' + h.Sum32()%2))
}

// pickKind draws a kind by kindWeights.
func pickKind(r *rand.Rand) kind {
	n := r.Intn(100)
	for k, w := range kindWeights {
		if n < w {
			return kind(k)
		}
		n -= w
	}
	return kindClusterIP
}

// newService is a new Service of a random kind in namespace ns.
func (c *Cluster) newService(r *rand.Rand, ns string) *corev1.Service {
	name := c.uniqueName("service", ns, serviceNames[r.Intn(len(serviceNames))])
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}}}
	c.shapeService(r, s, pickKind(r))
	return s
}

// shapeService sets s's spec to a new one of kind k (cluster IPs fresh).
func (c *Cluster) shapeService(r *rand.Rand, s *corev1.Service, k kind) {
	s.Spec = corev1.ServiceSpec{PublishNotReadyAddresses: r.Intn(6) == 0}
	switch k {
	case kindClusterIP, kindNodePort, kindLoadBalancer:
		s.Spec.Type = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}[k]
		c.setClusterIPs(r, s)
		s.Spec.Ports = newPorts(r, 1+r.Intn(3))
	case kindHeadless, kindHeadlessNoPorts:
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		if k == kindHeadless {
			s.Spec.Ports = newPorts(r, 1+r.Intn(3))
		}
	case kindExternalName:
		s.Spec.Type = corev1.ServiceTypeExternalName
		s.Spec.ExternalName = c.externalName(r, s)
		if r.Intn(3) == 0 {
			s.Spec.Ports = newPorts(r, 1)
		}
	}
}

// setClusterIPs gives s fresh cluster IPs: IPv4 only, or with DualStack
// IPv6 only or both (in either order), with the family fields to match.
func (c *Cluster) setClusterIPs(r *rand.Rand, s *corev1.Service) {
	fams := []family{v4}
	if c.cfg.DualStack {
		switch n := r.Intn(20); {
		case n < 3:
			fams = []family{v6}
		case n < 8:
			fams = []family{v4, v6}
		case n < 10:
			fams = []family{v6, v4}
		}
	}
	s.Spec.ClusterIPs = nil
	for _, f := range fams {
		s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, c.clusterIP(r, f))
	}
	s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
	s.Spec.IPFamilies = fams
	policy := corev1.IPFamilyPolicySingleStack
	if len(fams) == 2 {
		policy = corev1.IPFamilyPolicyRequireDualStack
		if r.Intn(2) == 0 {
			policy = corev1.IPFamilyPolicyPreferDualStack
		}
	}
	s.Spec.IPFamilyPolicy = &policy
}

// externalName is an ExternalName target: outside the cluster domain, or a
// Service of the cluster (existing or not, possibly s itself).
func (c *Cluster) externalName(r *rand.Rand, s *corev1.Service) string {
	if r.Intn(2) == 0 {
		return externalTargets[r.Intn(len(externalTargets))]
	}
	if len(c.Services) == 0 || r.Intn(5) == 0 {
		return fmt.Sprintf("gone.%s.svc.%s", s.Namespace, c.cfg.Zone)
	}
	t := c.Services[r.Intn(len(c.Services))]
	return fmt.Sprintf("%s.%s.svc.%s", t.Name, t.Namespace, c.cfg.Zone)
}

// newPorts is n Service ports: one may be unnamed, several are named and
// unique by name and by number/protocol, as the API requires.
func newPorts(r *rand.Rand, n int) []corev1.ServicePort {
	var ps []corev1.ServicePort
	names, keys := map[string]bool{}, map[string]bool{}
	for len(ps) < n {
		p := corev1.ServicePort{Protocol: pickProtocol(r), Port: pickPort(r)}
		if n > 1 || r.Intn(3) > 0 {
			p.Name = portNames[r.Intn(len(portNames))]
		}
		key := fmt.Sprint(p.Port, p.Protocol)
		if names[p.Name] || keys[key] {
			continue
		}
		names[p.Name], keys[key] = true, true
		if r.Intn(2) == 0 {
			p.TargetPort = intstr.FromInt32(p.Port)
		} else {
			p.TargetPort = intstr.FromInt32(pickPort(r))
		}
		ps = append(ps, p)
	}
	return ps
}

// pickProtocol is TCP mostly, UDP often, SCTP sometimes.
func pickProtocol(r *rand.Rand) corev1.Protocol {
	switch n := r.Intn(20); {
	case n < 12:
		return corev1.ProtocolTCP
	case n < 17:
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolSCTP
}

// pickPort is a well-known port number mostly, any valid one sometimes.
func pickPort(r *rand.Rand) int32 {
	if r.Intn(4) == 0 {
		return int32(1 + r.Intn(65535))
	}
	return portNumbers[r.Intn(len(portNumbers))]
}

// kindOf is the kind s has.
func kindOf(s *corev1.Service) kind {
	switch {
	case s.Spec.Type == corev1.ServiceTypeExternalName:
		return kindExternalName
	case s.Spec.ClusterIP == corev1.ClusterIPNone && len(s.Spec.Ports) > 0:
		return kindHeadless
	case s.Spec.ClusterIP == corev1.ClusterIPNone:
		return kindHeadlessNoPorts
	case s.Spec.Type == corev1.ServiceTypeNodePort:
		return kindNodePort
	case s.Spec.Type == corev1.ServiceTypeLoadBalancer:
		return kindLoadBalancer
	}
	return kindClusterIP
}

// updatedService is a copy of s with one change the API allows on update:
// new ports, publishNotReadyAddresses flipped, another type among
// ClusterIP, NodePort and LoadBalancer (the cluster IPs stay: they are
// immutable), a new ExternalName target, or a conversion between
// ExternalName and ClusterIP (which clears or sets fresh cluster IPs).
func (c *Cluster) updatedService(r *rand.Rand, s *corev1.Service) *corev1.Service {
	n := s.DeepCopy()
	k := kindOf(s)
	switch op := r.Intn(5); {
	case op == 0:
		n.Spec.PublishNotReadyAddresses = !n.Spec.PublishNotReadyAddresses
	case k == kindExternalName && op == 1:
		c.shapeService(r, n, kindClusterIP)
	case k == kindExternalName:
		n.Spec.ExternalName = c.externalName(r, n)
	case (k == kindHeadless || k == kindHeadlessNoPorts) && op < 3:
		n.Spec.Ports = nil
		if r.Intn(4) > 0 {
			n.Spec.Ports = newPorts(r, 1+r.Intn(3))
		}
	case k == kindHeadless || k == kindHeadlessNoPorts:
		n.Spec.PublishNotReadyAddresses = !n.Spec.PublishNotReadyAddresses
	case op == 1:
		n.Spec.Ports = newPorts(r, 1+r.Intn(3))
	case op == 2:
		n.Spec.Type = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}[r.Intn(3)]
	case op == 3:
		c.shapeService(r, n, kindExternalName)
	default:
		n.Spec.Ports = append(n.Spec.Ports[:0:0], n.Spec.Ports[:1]...)
	}
	return n
}
