package endpointsvc

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// hash identifies a state by its content: every field of every service,
// task and node, in order, each string length-prefixed so that no two
// different states write the same bytes. It streams through a small buffer,
// so hashing a large cluster's state allocates next to nothing (a JSON
// encoding of it would be several times the table's size).
func (st *State) hash() contentHash {
	w := hashWriter{h: sha256.New(), buf: make([]byte, 0, 4096)}
	w.int(len(st.Services))
	for i := range st.Services {
		s := &st.Services[i]
		w.str(s.ID, s.Name, s.Namespace, s.Status, s.ExternalName)
		w.bool(s.Headless)
		w.int(len(s.ClusterIPs))
		w.str(s.ClusterIPs...)
		w.int(len(s.Ports))
		for _, p := range s.Ports {
			w.str(p.Name, p.Protocol)
			w.int(p.TargetPort, p.PublishedPort, p.Port)
		}
	}
	w.int(len(st.Tasks))
	for i := range st.Tasks {
		t := &st.Tasks[i]
		w.str(t.ID, t.ServiceID, t.NodeID, t.DesiredStatus, t.ActualStatus, t.Address, t.Hostname)
		w.int(int(t.Version), len(t.Ports))
		for _, p := range t.Ports {
			w.str(p.Name, p.Protocol)
			w.int(p.ContainerPort, p.HostPort)
		}
	}
	w.int(len(st.Nodes))
	for i := range st.Nodes {
		n := &st.Nodes[i]
		w.str(n.ID, n.Name, n.Address, n.Status)
	}
	w.int(len(st.Namespaces))
	w.str(st.Namespaces...)
	var out contentHash
	w.flush()
	w.h.Sum(out[:0])
	return out
}

type hashWriter struct {
	h   hash.Hash
	buf []byte
}

func (w *hashWriter) str(ss ...string) {
	for _, s := range ss {
		w.int(len(s))
		w.buf = append(w.buf, s...)
		if len(w.buf) >= 4096 {
			w.flush()
		}
	}
}

func (w *hashWriter) int(ns ...int) {
	for _, n := range ns {
		w.buf = binary.AppendUvarint(w.buf, uint64(n))
	}
}

func (w *hashWriter) bool(b bool) {
	if b {
		w.int(1)
	} else {
		w.int(0)
	}
}

func (w *hashWriter) flush() {
	w.h.Write(w.buf)
	w.buf = w.buf[:0]
}
