package kubesource

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The Pods of `pods verified`, read as the kubernetes plugin reads them:
// every namespace (whatever `namespaces` says: autopath finds the client's
// namespace in any), the `labels` selector, no Pod in phase Succeeded,
// Failed or Unknown (the API server filters them, and a Pod that enters
// one leaves the watch as deleted); hostNetwork Pods count with their
// addresses (the node's). A Pod first seen with a deletion timestamp is
// left out; one that gets it later keeps the addresses it had until it is
// deleted (the kubernetes plugin ignores such updates). The informer's
// store holds a kPod per Pod; the index the mapping reads (podIndex) is
// kept by the handler, address → namespaces, without client-go's index
// (a set per address).

// podPhaseSelector is the kubernetes plugin's field selector of Pods.
const podPhaseSelector = "status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown"

// kPod is the slim form of a v1.Pod: its key and its addresses.
type kPod struct {
	kMeta // without resourceVersion: the pod handler does not read it
	ips   []netip.Addr
	skip  bool // terminating when first seen: not in the index
}

func (k *kPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies k (shared, never modified, addresses).
func (k *kPod) DeepCopyObject() runtime.Object { c := *k; return &c }

// transformPod converts a *v1.Pod into a *kPod. A terminating Pod keeps
// the version in store, if any (the kubernetes plugin skips its update);
// so does a Pod in a phase the field selector leaves out (it comes only
// as deleted, perhaps without its addresses: the stored version says
// which to take out of the index).
func transformPod(store cache.Store) cache.TransformFunc {
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		k := &kPod{kMeta: kMeta{Name: p.Name, Namespace: intern(p.Namespace)}}
		terminating := p.DeletionTimestamp != nil && !p.DeletionTimestamp.IsZero()
		if terminating || !podPhaseListed(p.Status.Phase) {
			if old, ok, _ := store.GetByKey(p.Namespace + "/" + p.Name); ok {
				return old, nil
			}
			if terminating {
				k.skip = true
				return k, nil
			}
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && a.Zone() == "" && !slices.Contains(k.ips, a.Unmap()) {
				k.ips = append(k.ips, a.Unmap())
			}
		}
		k.ips = slices.Clip(k.ips)
		return k, nil
	}
}

// podPhaseListed reports whether the field selector lists Pods in phase.
func podPhaseListed(phase corev1.PodPhase) bool {
	switch phase {
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return false
	}
	return true
}

// samePod reports whether two versions of a Pod give the index the same.
func samePod(o, c *kPod) bool {
	return o.Name == c.Name && o.Namespace == c.Namespace && o.skip == c.skip && slices.Equal(o.ips, c.ips)
}

// podInformer makes the Pod informer (not started) of every namespace.
func (k *Source) podInformer(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return corev1informers.NewFilteredPodInformer(c, metav1.NamespaceAll, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.LabelSelector = k.cfg.Labels
		o.FieldSelector = podPhaseSelector
	})
}

// podIndex is address → the namespaces of its Pods (one per Pod), kept by
// the Pod handler: it is changed before the address is marked dirty, so
// that a patch that reads it sees at least that change (reading it twice
// gives the same: whole lists, never deltas).
type podIndex struct {
	mu     sync.Mutex
	byAddr map[netip.Addr][]string
}

func newPodIndex() *podIndex { return &podIndex{byAddr: map[netip.Addr][]string{}} }

// add counts p's addresses in its namespace (sign 1) or takes them away.
func (x *podIndex) add(p *kPod, sign int) {
	if p == nil || p.skip {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, a := range p.ips {
		nss := x.byAddr[a]
		if sign > 0 {
			x.byAddr[a] = append(nss, p.Namespace)
			continue
		}
		if i := slices.Index(nss, p.Namespace); i >= 0 {
			nss = slices.Delete(slices.Clone(nss), i, i+1)
		}
		if len(nss) == 0 {
			delete(x.byAddr, a)
		} else {
			x.byAddr[a] = nss
		}
	}
}

// get is address a's entry of the index: its namespaces, sorted (none:
// gone).
func (x *podIndex) get(a netip.Addr) k8sdns.PodAddr {
	x.mu.Lock()
	defer x.mu.Unlock()
	nss := slices.Clone(x.byAddr[a])
	slices.Sort(nss)
	return k8sdns.PodAddr{Addr: a, Namespaces: nss}
}

// all is the whole index in address order.
func (x *podIndex) all() []k8sdns.PodAddr {
	x.mu.Lock()
	out := make([]k8sdns.PodAddr, 0, len(x.byAddr))
	for a, nss := range x.byAddr {
		out = append(out, k8sdns.PodAddr{Addr: a, Namespaces: slices.Clone(nss)})
	}
	x.mu.Unlock()
	for i := range out {
		slices.Sort(out[i].Namespaces)
	}
	slices.SortFunc(out, func(a, b k8sdns.PodAddr) int { return a.Addr.Compare(b.Addr) })
	return out
}

// podHandler keeps the index and marks the addresses that changed.
func (w *watcher) podHandler(stats *Stats) cache.ResourceEventHandlerFuncs {
	pod := func(obj any) *kPod {
		p, _ := object(obj).(*kPod)
		return p
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			w.pods.add(pod(obj), 1)
			w.markPod(pod(obj))
		},
		UpdateFunc: func(old, cur any) {
			o, c := pod(old), pod(cur)
			if o == c || (o != nil && c != nil && samePod(o, c)) {
				stats.Skipped.Add(1)
				return
			}
			w.pods.add(o, -1)
			w.pods.add(c, 1)
			w.markPod(o)
			w.markPod(c)
		},
		DeleteFunc: func(obj any) {
			w.pods.add(pod(obj), -1)
			w.markPod(pod(obj))
		},
	}
}

// markPod marks p's addresses and kicks the loop.
func (w *watcher) markPod(p *kPod) {
	if p == nil || p.skip || len(p.ips) == 0 {
		return
	}
	w.changed.markAddrs(p.ips)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// DNSPods maps API Pods onto the pod index as the source does, each Pod
// seen once (a terminating one is left out), with the phase filter the
// API server applies for the source's field selector (for tests and tools
// that start from API objects). The Pods are not changed.
func DNSPods(pods []*corev1.Pod) []k8sdns.PodAddr {
	x := newPodIndex()
	tr := transformPod(cache.NewStore(cache.MetaNamespaceKeyFunc))
	for _, p := range pods {
		if !podPhaseListed(p.Status.Phase) {
			continue
		}
		o, _ := tr(p.DeepCopy())
		x.add(o.(*kPod), 1)
	}
	return x.all()
}
