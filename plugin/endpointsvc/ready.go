package endpointsvc

// Ready implements ready.Readiness: true once a state is being served
// (synced from the source once, or loaded from the snapshot).
func (e *Endpointsvc) Ready() bool { return e.ready.Load() }
