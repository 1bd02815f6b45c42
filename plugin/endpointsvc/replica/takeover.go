package replica

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// A stream served by Server takes its connection over from net/http
// (Hijack) once the request is checked, and is written by a goroutine of
// its own while the handler returns: the server's per-connection state -
// its read and write buffers, the response's chunking buffer, its
// background reader - is dropped, and an idle stream holds its socket,
// two small buffers, a timer and two goroutines (the writer, and a reader
// of one byte that ends the stream when the follower goes). The response
// is HTTP/1.1 200 with Connection: close and no length: the body ends
// when the connection does. Under another server (no base context) or
// where the connection cannot be taken over (HTTP/2), the stream is
// written through the ResponseWriter as before.

// baseKey holds, in a request's context, Server's base context: it ends
// when the server stops, and so do the streams taken over.
type baseKey struct{}

// writer is where a stream writes: a ResponseWriter or a connection.
type writer interface {
	io.Writer
	SetWriteDeadline(time.Time) error
	Flush() error
}

// httpWriter writes through a ResponseWriter.
type httpWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (w httpWriter) SetWriteDeadline(t time.Time) error { return w.rc.SetWriteDeadline(t) }
func (w httpWriter) Flush() error                       { return w.rc.Flush() }

// connWriter writes to a connection taken over: nothing is buffered.
type connWriter struct{ net.Conn }

func (connWriter) Flush() error { return nil }

// streamHeader is the response's head on a connection taken over.
const streamHeader = "HTTP/1.1 200 OK\r\nContent-Type: " + ContentType + "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"

// takeOver writes the response's head on r's connection, taken over from
// net/http, and returns the connection and the context that ends with
// the server; ok is false (nothing written) when r is not Server's or
// its connection cannot be taken over.
func takeOver(w http.ResponseWriter, r *http.Request, timeout time.Duration) (conn net.Conn, base context.Context, ok bool) {
	base, ok = r.Context().Value(baseKey{}).(context.Context)
	if !ok || r.ProtoMajor != 1 {
		return nil, nil, false
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, streamHeader); err != nil {
		conn.Close()
		return nil, nil, false
	}
	return conn, base, true
}

// streamConn is stream on a connection taken over; it closes it. The
// follower sends nothing after its request: a read that ends (it closed
// the connection) ends the stream.
func (l *Leader) streamConn(base context.Context, conn net.Conn, q query, s step) {
	defer conn.Close()
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	go func() {
		var b [1]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				cancel()
				return
			}
		}
	}()
	l.stream(ctx, connWriter{conn}, q, s)
}
