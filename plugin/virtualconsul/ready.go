package virtualconsul

// Ready implements ready.Readiness: true once a table is loaded, from a
// source or from the snapshot.
func (v *VirtualConsul) Ready() bool { return v.table.Load() != nil }
