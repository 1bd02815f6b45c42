package mdnsfallback

// Ready implements ready.Readiness: true once the snapshot (if any) is
// loaded and the record API (if any) listens.
func (p *MDNSFallback) Ready() bool { return p.ready.Load() }
