package virtualconsul

// Ready implements ready.Readiness: true once a table is loaded, from a
// source or from the snapshot; always in remote-listener mode, which needs
// no table.
func (v *VirtualConsul) Ready() bool { return v.remote != nil || v.table.Load() != nil }
