package endpointsvc

import (
	"net/netip"
	"sort"
	"strings"
)

// specState maps slim Kubernetes objects onto the model for schema
// kubernetes (the Kubernetes DNS specification), so that the one predicate
// (IsEndpoint) and the snapshot serve it as they serve schema orch:
//
//   - every Service is a service (id "namespace/name", status active) with
//     its cluster IPs, headless flag or external name, and its ports (the
//     Service's port as Port and TargetPort, the nodePort as PublishedPort);
//   - an EndpointSlice endpoint is a task of its Service: desired running,
//     actual healthy when ready (or when the Service publishes not-ready
//     addresses), otherwise unhealthy, so the predicate admits exactly the
//     endpoints the specification publishes; it runs on no node (the
//     specification does not look at nodes), its address is its first
//     address, its hostname its hostname, its ports the slice's ports.
//
// Output is sorted (services by id, slices by name) so that the same
// objects give the same state. Objects that cannot be mapped (a name that is
// not a DNS label, an address of the wrong family) are skipped.
func specState(services []*kService, slices []*kSlice) *State {
	st := &State{Services: make([]Service, 0, len(services))}
	notReady := make(map[string]bool)
	svcs := make(map[string]bool, len(services))
	for _, s := range services {
		svc, ok := specService(s)
		if !ok {
			continue
		}
		svcs[svc.ID] = true
		if s.notReady {
			notReady[svc.ID] = true
		}
		st.Services = append(st.Services, svc)
	}
	sort.Slice(st.Services, func(i, j int) bool { return st.Services[i].ID < st.Services[j].ID })

	st.Tasks = sliceTasks(slices, svcs, func(sl *kSlice, i int, t *Task) {
		t.Hostname, t.ActualStatus = specEndpoint(sl, i, notReady[sl.service])
	})
	return st
}

// specService maps one Service, or reports that it has nothing to answer.
func specService(s *kService) (Service, bool) {
	name, ns := strings.ToLower(s.Name), strings.ToLower(s.Namespace)
	if s.skip || !validLabel(name) || !validLabel(ns) {
		return Service{}, false
	}
	svc := Service{ID: ns + "/" + name, Name: name, Namespace: ns, Status: "active", Headless: s.headless}
	switch {
	case s.externalName:
		t := strings.TrimSuffix(s.target, ".")
		if _, err := netip.ParseAddr(t); err == nil || !validName(strings.ToLower(t)) {
			return Service{}, false // no name to answer with (an address is no CNAME target: NXDOMAIN, as the kubernetes plugin)
		}
		svc.ExternalName, svc.Headless = t+".", false
	case !s.headless:
		for _, a := range s.clusterIPs {
			if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
				svc.ClusterIPs = append(svc.ClusterIPs, ip.Unmap().String())
			}
		}
		if len(svc.ClusterIPs) == 0 {
			return Service{}, false // neither headless nor addressed: nothing to answer
		}
	}
	svc.Ports = servicePorts(s)
	return svc, true
}

// specEndpoint is endpoint i of slice sl as schema kubernetes maps it: its
// hostname (when it is a DNS label), and healthy when ready or its Service
// publishes not-ready addresses, else unhealthy.
func specEndpoint(sl *kSlice, i int, notReady bool) (hostname, actual string) {
	if h := sl.hostname(i); validLabel(h) {
		hostname = h
	}
	actual = StatusUnhealthy
	if sl.endpoints[i].ready || notReady {
		actual = StatusHealthy
	}
	return hostname, actual
}
