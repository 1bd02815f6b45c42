package kubesource

import (
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/feed"
	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The DNS programming latency (the kubernetes plugin's SLI): an
// EndpointSlice written by the endpoint slice controller says when the
// change it carries was triggered (the last-change-trigger-time
// annotation). A slice event that changes what the mapping reads, after
// the first build, records that time with its Service's name (dirty); the
// patch that maps the name carries it with the Service's kind, and the
// plugin observes it once the patch is in the served table. The first
// build's objects, updates that change nothing the mapping reads (the
// handler skips them), deletions and slices without the annotation are
// not observed.

// trigger is a slice event's trigger time (unix nanoseconds) and the
// Service name ("namespace/name") it is labelled with.
type trigger struct {
	name string
	at   int64
}

// triggerTime reads a slice's last-change-trigger-time annotation: unix
// nanoseconds, 0 when there is none; a value that is not RFC 3339 is
// logged and counts as none (the slice itself is served as ever).
func triggerTime(m *metav1.ObjectMeta) int64 {
	v, ok := m.Annotations[corev1.EndpointsLastChangeTriggerTime]
	return parseTrigger(v, ok, m.Namespace, m.Name)
}

// parseTrigger is triggerTime of the annotation's value v (ok: present)
// of slice namespace/name.
func parseTrigger(v string, ok bool, namespace, name string) int64 {
	if !ok {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.UnixNano() <= 0 {
		log.Warningf("No DNS programming latency for EndpointSlice %s/%s: bad %s annotation %q", namespace, name, corev1.EndpointsLastChangeTriggerTime, v)
		return 0
	}
	return t.UnixNano()
}

// serviceKind is the service_kind of s; false for an ExternalName Service
// (answered from the Service alone: no slice of it is served).
func serviceKind(s *kService) (string, bool) {
	switch s.svc.Kind {
	case k8sdns.ExternalName:
		return "", false
	case k8sdns.Headless:
		if s.selector {
			return feed.KindHeadlessWithSelector, true
		}
		return feed.KindHeadlessWithoutSelector, true
	}
	return feed.KindClusterIP, true
}

// programmed maps the recorded triggers onto the Services they change,
// each (name, time) once; a name with no Service (not known yet, outside
// the namespaces or the label selector) or an ExternalName is left out,
// as the kubernetes plugin leaves out a slice whose Service it does not
// know.
func programmed(st stores, ts []trigger) []feed.Trigger {
	if len(ts) == 0 {
		return nil
	}
	out := make([]feed.Trigger, 0, len(ts))
	seen := make(map[trigger]bool, len(ts))
	for _, t := range ts {
		if seen[t] {
			continue
		}
		seen[t] = true
		s := st.service(t.name)
		if s == nil || s.skip {
			continue
		}
		if kind, ok := serviceKind(s); ok {
			out = append(out, feed.Trigger{Kind: kind, At: time.Unix(0, t.at)})
		}
	}
	return out
}
