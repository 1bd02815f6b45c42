package publish

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LeaseLabel marks the Leases of the publishers of a Service (its value is
// the Service's name), so that each replica watches its peers' alone.
const LeaseLabel = "endpointsvc.meshdns.io/publish"

// Each replica holds a Lease (coordination.k8s.io) named after its slices
// and renews it while it runs. The one-writer rule (plan's writer) rests on
// it: at any instant each slice has at most one writer - its own replica
// while that one's Lease is live by the replica's own clock (counted from
// the time it sent its last successful renewal, and a third shorter, for a
// write still in flight), a steward only once the Lease has
// lapsed by the steward's clock (the time it saw the renewal's change,
// which is later). A peer judges a Lease by when it saw it change, on its
// own clock, as the node lifecycle controller judges the kubelets'
// Leases: clocks may differ, and a Lease first seen counts as just
// renewed. A steward reads the Lease from the API again right before it
// writes (confirmLapsed), so a renewal its informer has not brought yet
// still stops it.

// LeaseName is the name of pod's Lease for service.
func LeaseName(service, pod string) string { return service + "-" + pod }

// leaseSeen is when this replica last saw a peer's Lease change.
type leaseSeen struct {
	key string // leaseKey of the Lease as last seen
	at  time.Time
}

// leaseKey identifies one renewal of a Lease: its resource version and
// renew time (either changes with every renewal; a fake API keeps the
// first as it was).
func leaseKey(l *coordinationv1.Lease) string {
	renew := ""
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return l.ResourceVersion + "/" + renew
}

// leaseHolder is the replica a Lease speaks for: its holder, when the
// Lease bears that holder's name (a Lease of another name speaks for no
// one), else "".
func (p *Publisher) leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return ""
	}
	if h := *l.Spec.HolderIdentity; l.Name == LeaseName(p.cfg.Service, h) {
		return h
	}
	return ""
}

// observeLeases updates when each peer's Lease was last seen to change and
// returns the peers whose Lease is live at now. Called with p.mu held.
func (p *Publisher) observeLeases(leases []*coordinationv1.Lease, now time.Time) map[string]bool {
	live := map[string]bool{}
	seen := map[string]bool{}
	for _, l := range leases {
		holder := p.leaseHolder(l)
		if holder == "" || holder == p.cfg.Pod {
			continue
		}
		seen[holder] = true
		if p.seeLease(holder, l, now) {
			live[holder] = true
		}
	}
	for holder := range p.leases {
		if !seen[holder] {
			delete(p.leases, holder)
		}
	}
	return live
}

// seeLease records that holder's Lease l was seen at now and reports
// whether it is live. Called with p.mu held.
func (p *Publisher) seeLease(holder string, l *coordinationv1.Lease, now time.Time) bool {
	s, ok := p.leases[holder]
	if k := leaseKey(l); !ok || s.key != k {
		s = leaseSeen{key: k, at: now}
		p.leases[holder] = s
	}
	return now.Sub(s.at) < p.cfg.LeaseDuration
}

// confirmLapsed reads pod's Lease from the API and reports whether it has
// lapsed (or does not exist): a steward calls it right before it writes
// pod's slice, so that a renewal its informer has not brought yet stops
// it. An error counts as live (nothing is written on a guess).
func (p *Publisher) confirmLapsed(ctx context.Context, pod string) bool {
	l, err := p.client.CoordinationV1().Leases(p.cfg.Namespace).Get(ctx, LeaseName(p.cfg.Service, pod), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	case p.leaseHolder(l) != pod:
		return true // another holder's Lease speaks for no one
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.seeLease(pod, l, time.Now())
}

// renewLease creates this replica's Lease, or renews it once a third of
// the lease duration has passed since the last renewal. A failure is
// returned for the round's report: the replica publishes on, but its peers
// take it for silent.
func (p *Publisher) renewLease(ctx context.Context, self *corev1.Pod, now time.Time) error {
	name := LeaseName(p.cfg.Service, p.cfg.Pod)
	c := p.client.CoordinationV1().Leases(p.cfg.Namespace)
	var have *coordinationv1.Lease
	for _, o := range p.lister.leases.List() {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Name == name {
			have = l
		}
	}
	renew := metav1.NewMicroTime(now)
	var err error
	switch {
	case have == nil:
		if self == nil {
			return nil // no pod (UID) to own it yet
		}
		_, err = c.Create(ctx, p.wantLease(name, self, renew), metav1.CreateOptions{})
	case have.Spec.RenewTime != nil && now.Sub(have.Spec.RenewTime.Time) < p.cfg.LeaseDuration/3 && now.Sub(have.Spec.RenewTime.Time) >= 0:
		p.setRenewed(have.Spec.RenewTime.Time)
		return nil
	default:
		upd := have.DeepCopy()
		holder, secs := p.cfg.Pod, p.leaseSeconds()
		upd.Spec.HolderIdentity, upd.Spec.LeaseDurationSeconds, upd.Spec.RenewTime = &holder, &secs, &renew
		_, err = c.Update(ctx, upd, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return nil // the informer brings the current version; the next round renews
	}
	if err == nil {
		p.setRenewed(now)
	}
	if err != nil {
		writeErrors.WithLabelValues(p.cfg.Service).Inc()
		return fmt.Errorf("renew Lease %s/%s (peers take this replica for silent while it lapses): %w", p.cfg.Namespace, name, err)
	}
	return nil
}

// wantLease is this replica's new Lease, owned by its pod (the garbage
// collector removes it with the pod).
func (p *Publisher) wantLease(name string, self *corev1.Pod, renew metav1.MicroTime) *coordinationv1.Lease {
	holder, secs := p.cfg.Pod, p.leaseSeconds()
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.cfg.Namespace,
			Labels:          map[string]string{LeaseLabel: p.cfg.Service},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: self.Name, UID: self.UID}},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &renew, AcquireTime: &renew},
	}
}

// leaseSeconds is the lease duration as the Lease states it (at least 1).
func (p *Publisher) leaseSeconds() int32 {
	return max(int32(p.cfg.LeaseDuration/time.Second), 1)
}

// setRenewed records this replica's last renewal.
func (p *Publisher) setRenewed(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.After(p.renewed) {
		p.renewed = at
	}
}
