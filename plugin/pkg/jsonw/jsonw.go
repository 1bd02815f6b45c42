// Package jsonw helps meshdns's snapshot writers and listings append
// JSON by hand (a snapshot of a large cluster writes hundreds of thousands
// of records: reflection per record would dominate) and stream it out in
// chunks, so that no whole document is held in memory.
package jsonw

import (
	"encoding/json"
	"io"
	"net/netip"
)

// chunk is how much a Writer collects before it writes.
const chunk = 4096

// Writer collects appended JSON in Buf and writes it to its io.Writer
// in chunks.
type Writer struct {
	w   io.Writer
	Buf []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, Buf: make([]byte, 0, 2*chunk)} }

// Appender returns a Writer that appends to b and writes nowhere: Buf
// holds b and everything appended (a small document, such as a change
// log record, built in place).
func Appender(b []byte) *Writer { return &Writer{Buf: b} }

// Flush writes what was collected: once it is a chunk, or always. An
// Appender keeps it.
func (w *Writer) Flush(always bool) error {
	if w.w == nil || (!always && len(w.Buf) < chunk) {
		return nil
	}
	_, err := w.w.Write(w.Buf)
	w.Buf = w.Buf[:0]
	return err
}

// AppendString appends s as a JSON string, as encoding/json writes it:
// printable ASCII without quotes, backslashes or HTML characters as is
// (names, addresses, statuses), anything else through encoding/json.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !asIs[s[i]] {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// asIs are the bytes encoding/json writes as they are in a string:
// printable ASCII but quotes, backslashes and HTML characters (a look-up
// a byte instead of seven comparisons).
var asIs = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendStrings appends a JSON array of the strings a.
func AppendStrings(b []byte, a []string) []byte {
	b = append(b, '[')
	for i, s := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendAddrs appends a JSON array of the addresses a in their text form.
func AppendAddrs(b []byte, a []netip.Addr) []byte {
	b = append(b, '[')
	for i, x := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = x.AppendTo(b)
		b = append(b, '"')
	}
	return append(b, ']')
}
