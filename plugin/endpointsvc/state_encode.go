package endpointsvc

import (
	"encoding/json"
	"io"
)

// encode writes st as the JSON document DecodeState reads, one service,
// task, node and namespace at a time, so that the snapshot of a large
// cluster is never held in memory whole (a single json.Marshal of 50,000
// tasks is a buffer of several times the table's size).
func (st *State) encode(w io.Writer) error {
	if err := writeArray(w, `{"services":`, st.Services); err != nil {
		return err
	}
	if err := writeArray(w, `,"tasks":`, st.Tasks); err != nil {
		return err
	}
	if err := writeArray(w, `,"nodes":`, st.Nodes); err != nil {
		return err
	}
	if len(st.Namespaces) > 0 {
		if err := writeArray(w, `,"namespaces":`, st.Namespaces); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "}\n")
	return err
}

// writeArray writes prefix and xs as a JSON array, one element per line.
func writeArray[T any](w io.Writer, prefix string, xs []T) error {
	if _, err := io.WriteString(w, prefix+"["); err != nil {
		return err
	}
	for i := range xs {
		b, err := json.Marshal(&xs[i])
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, ",\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "]")
	return err
}
