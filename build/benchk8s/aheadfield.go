package main

import (
	"bufio"
	"bytes"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// A leader a version ahead of its followers negotiates down to the
// version the follower asks for, but may still add fields to the lines
// of that version which the follower does not know (as version 4 added
// "buckets" beside version 3's fields): the drill "version ahead" stands
// for it by adding aheadField to every JSON line of a version-2+ stream
// the balancer passes on. Version 1 followers refuse unknown fields, so
// no leader adds any to their streams, and neither does the drill.

// aheadField is the field the next version would send.
const aheadField = `"next_version":{"note":"a field this follower does not know","n":5},`

// speaksV2 reports whether an HTTP request line asks for version 2 or
// later (?v=N).
func speaksV2(reqLine string) bool {
	f := strings.Fields(reqLine)
	if len(f) < 2 {
		return false
	}
	u, err := url.Parse(f[1])
	if err != nil {
		return false
	}
	v, err := strconv.Atoi(u.Query().Get("v"))
	return err == nil && v >= 2
}

// aheadReader passes an HTTP response on unchanged up to the end of its
// header, then every body line that is a JSON object with aheadField
// added as its first field (a line longer than the buffer is read in
// pieces; only its first piece gets the field).
type aheadReader struct {
	r       *bufio.Reader
	header  bool // the header has been passed on
	atStart bool // the next piece begins a line
	pending []byte
	err     error
}

func newAheadReader(r io.Reader) *aheadReader {
	return &aheadReader{r: bufio.NewReaderSize(r, 256<<10), atStart: true}
}

func (a *aheadReader) Read(p []byte) (int, error) {
	for len(a.pending) == 0 && a.err == nil {
		piece, err := a.r.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			a.err = err
		}
		a.pending = a.pending[:0]
		switch {
		case !a.header:
			a.header = string(piece) == "\r\n"
		case a.atStart && bytes.HasPrefix(piece, []byte("{")):
			a.pending = append(a.pending, '{')
			a.pending = append(a.pending, aheadField...)
			if bytes.HasPrefix(piece[1:], []byte("}")) { // an empty object: no comma after the field
				a.pending = a.pending[:len(a.pending)-1]
			}
			piece = piece[1:]
		}
		a.pending = append(a.pending, piece...)
		a.atStart = bytes.HasSuffix(piece, []byte("\n"))
	}
	if len(a.pending) == 0 {
		return 0, a.err
	}
	n := copy(p, a.pending)
	a.pending = a.pending[n:]
	return n, nil
}
