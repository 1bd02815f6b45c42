// Package clustergen generates random but valid Kubernetes clusters — the
// Namespaces, Services and EndpointSlices a DNS server of the cluster zone
// reads — and the questions a client could ask about them. It is seeded:
// the same seed and Config give the same cluster, the same steps and the
// same questions, so a failing seed is a reproducible case.
//
// Every object is valid for a real kube-apiserver (it validates them): the
// names are DNS labels, cluster IPs are set explicitly inside the test
// cluster's Service CIDRs (10.96.0.0/16 and fd00:96::/108) and never handed
// out twice, endpoint addresses are pod-range addresses of the slice's
// family. The shapes cover what the Kubernetes DNS specification
// distinguishes: namespaces named like schema words, every Service kind,
// dual-stack cluster IPs, named and unnamed ports over TCP, UDP and SCTP,
// several slices per Service of every address type, multi-address
// endpoints with and without hostname, every ready/serving/terminating mix
// (unset included), slices whose ports differ from the Service's, slices
// without ports, slices of Services that do not exist, and addresses shared
// between Services. With Config.Pods it makes Pods too (pods.go): what
// `pods verified` and autopath read.
package clustergen

import (
	"fmt"
	"math/rand"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// Config sizes a generated cluster. Zero fields take Small's values.
type Config struct {
	Namespaces   int    // namespaces, the schema-word ones first
	Services     int    // Services over all namespaces
	MaxSlices    int    // EndpointSlices per Service, at most
	MaxEndpoints int    // endpoints per EndpointSlice, at most
	DualStack    bool   // IPv6 and dual-stack cluster IPs besides IPv4 ones
	Zone         string // the cluster domain, default cluster.local
	Pods         int    // Pods (pods.go); 0: none, and no Pod steps
	Terminating  bool   // some new Pods are terminating already (in-process use only)
	// Imports are ServiceImports (imports.go) with their slices, answered
	// under ClusterSetZone (default clusterset.local); 0: none, and no
	// multicluster steps or questions.
	Imports        int
	ClusterSetZone string
	// External gives a share of the Services external IPs and
	// LoadBalancer ingresses (external.go; in-process use only).
	External bool
}

// Small is a cluster of ten namespaces and forty Services: fast enough for
// a few seeds in every test run.
func Small() Config {
	return Config{Namespaces: 10, Services: 40, MaxSlices: 3, MaxEndpoints: 4, DualStack: true, Zone: "cluster.local"}
}

// withDefaults fills the zero fields from Small.
func (cfg Config) withDefaults() Config {
	s := Small()
	if cfg.Namespaces <= 0 {
		cfg.Namespaces = s.Namespaces
	}
	if cfg.Services <= 0 {
		cfg.Services = s.Services
	}
	if cfg.MaxSlices <= 0 {
		cfg.MaxSlices = s.MaxSlices
	}
	if cfg.MaxEndpoints <= 0 {
		cfg.MaxEndpoints = s.MaxEndpoints
	}
	if cfg.Zone == "" {
		cfg.Zone = s.Zone
	}
	if cfg.ClusterSetZone == "" {
		cfg.ClusterSetZone = "clusterset.local"
	}
	return cfg
}

// Cluster is a generated cluster. The slices hold the current objects in a
// stable order; Step replaces an object it changes with a new one (never
// mutates it), so pointers taken earlier keep their old state.
type Cluster struct {
	Namespaces []*corev1.Namespace
	Services   []*corev1.Service
	Slices     []*discoveryv1.EndpointSlice
	Pods       []*corev1.Pod // with Config.Pods
	// Imports and ImportSlices are the ServiceImports and their slices
	// (with Config.Imports).
	Imports      []*mcsapi.ServiceImport
	ImportSlices []*discoveryv1.EndpointSlice

	cfg  Config
	used map[string]bool // every cluster IP, pod address and object key ever handed out
	seq  int             // suffix for unique names
	gone []gone          // Services and slices deleted by Step, for questions

	goneImports []gone // ServiceImports deleted by Step
}

// gone is a deleted object, remembered so that questions ask for it.
type gone struct{ namespace, service string }

// Op is the kind of a Change.
type Op int

// The operations of a Change.
const (
	Add Op = iota
	Update
	Delete
)

func (o Op) String() string {
	switch o {
	case Add:
		return "add"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Change is one change Step made: Obj is a *corev1.Namespace, a
// *corev1.Service, a *discoveryv1.EndpointSlice, a *corev1.Pod or a
// *mcsapi.ServiceImport — a copy the caller may
// modify (an Update carries the whole new object, a Delete the deleted one).
type Change struct {
	Op  Op
	Obj runtime.Object
}

// Generate returns the cluster of seed: the same seed and cfg give the same
// objects.
func Generate(seed int64, cfg Config) *Cluster {
	cfg = cfg.withDefaults()
	r := rand.New(rand.NewSource(seed))
	c := &Cluster{cfg: cfg, used: map[string]bool{}}
	for _, ip := range reservedIPs {
		c.used[ip] = true
	}
	for i := 0; i < cfg.Namespaces; i++ {
		c.Namespaces = append(c.Namespaces, c.newNamespace(r))
	}
	for i := 0; i < cfg.Services; i++ {
		svc := c.newService(r, c.pickNamespace(r))
		c.Services = append(c.Services, svc)
		for n := r.Intn(cfg.MaxSlices + 1); n > 0; n-- {
			c.Slices = append(c.Slices, c.newSlice(r, svc.Namespace, svc.Name, svc))
		}
	}
	// slices of Services that do not exist
	for i := 0; i < 1+cfg.Services/20; i++ {
		ns := c.pickNamespace(r)
		c.Slices = append(c.Slices, c.newSlice(r, ns, c.uniqueName("service", ns, "ghost"), nil))
	}
	for i := 0; i < cfg.Pods; i++ {
		c.Pods = append(c.Pods, c.newPod(r, c.pickNamespace(r)))
	}
	if cfg.Imports > 0 {
		c.generateImports(r) // last: the draws above stay those of a seed without
	}
	if cfg.External {
		c.generateExternal(r) // after the imports: their draws stay too
	}
	return c
}

// Config returns the (defaulted) configuration the cluster was made with.
func (c *Cluster) Config() Config { return c.cfg }

// Clone returns a copy of c that Step can change independently of c (the
// objects are shared: Step never mutates one).
func (c *Cluster) Clone() *Cluster {
	d := *c
	d.Namespaces = slices.Clone(c.Namespaces)
	d.Services = slices.Clone(c.Services)
	d.Slices = slices.Clone(c.Slices)
	d.Pods = slices.Clone(c.Pods)
	d.gone = slices.Clone(c.gone)
	d.Imports, d.ImportSlices, d.goneImports = slices.Clone(c.Imports), slices.Clone(c.ImportSlices), slices.Clone(c.goneImports)
	d.used = make(map[string]bool, len(c.used))
	for k := range c.used {
		d.used[k] = true
	}
	return &d
}

// Service returns the Service ns/name, or nil.
func (c *Cluster) Service(ns, name string) *corev1.Service {
	for _, s := range c.Services {
		if s.Namespace == ns && s.Name == name {
			return s
		}
	}
	return nil
}

// pickNamespace is one of the cluster's namespaces.
func (c *Cluster) pickNamespace(r *rand.Rand) string {
	return c.Namespaces[r.Intn(len(c.Namespaces))].Name
}

// uniqueName is base if no object of its kind in namespace ns was ever
// called that, else base with a numeric suffix (a deleted object's name is
// not reused, so a question about it stays a question about nothing).
func (c *Cluster) uniqueName(kind, ns, base string) string {
	name := base
	for c.used[kind+"/"+ns+"/"+name] {
		c.seq++
		name = fmt.Sprintf("%s-%d", base, c.seq)
	}
	c.used[kind+"/"+ns+"/"+name] = true
	return name
}

// sliceIndex is the index of slice ns/name in c.Slices, or -1.
func (c *Cluster) sliceIndex(ns, name string) int {
	return slices.IndexFunc(c.Slices, func(s *discoveryv1.EndpointSlice) bool { return s.Namespace == ns && s.Name == name })
}

// serviceIndex is the index of Service ns/name in c.Services, or -1.
func (c *Cluster) serviceIndex(ns, name string) int {
	return slices.IndexFunc(c.Services, func(s *corev1.Service) bool { return s.Namespace == ns && s.Name == name })
}
