package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The fleet's counting proxy runs as child processes (fleetProxy): each is
// `benchconsul -proxy-child TARGET`. It listens on a loopback port, writes
// that address as its first stdout line, then one line per request it
// receives: "<unix ns>\t<X-Consul-Token>\t<path>". A line "1" on its stdin
// starts a failure (503 to new requests, every request in flight cut), "0"
// ends it; end of stdin ends the child.

// runProxyChild serves as one such child until its stdin closes.
func runProxyChild(target string) {
	u, err := url.Parse("http://" + target)
	if err != nil {
		log.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// idle upstream connections are descriptors too: keep only a few
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second, ResponseHeaderTimeout: 10 * time.Minute}
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var (
		mu      sync.Mutex
		failing bool
	)
	cut, cutNow := context.WithCancel(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	var outMu sync.Mutex
	fmt.Fprintln(out, l.Addr().String())
	out.Flush()
	// report lines are flushed every 50 ms: the parent's timestamps come
	// from the line, not from when it reads it
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			outMu.Lock()
			out.Flush()
			outMu.Unlock()
		}
	}()
	srv := &http.Server{IdleTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := strconv.FormatInt(time.Now().UnixNano(), 10) + "\t" + r.Header.Get("X-Consul-Token") + "\t" + r.URL.Path + "\n"
		outMu.Lock()
		out.WriteString(line)
		outMu.Unlock()
		mu.Lock()
		f, c := failing, cut
		mu.Unlock()
		if f {
			http.Error(w, "bench: failing", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(c, cancel)
		defer stop()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})}
	go srv.Serve(l)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		mu.Lock()
		switch strings.TrimSpace(sc.Text()) {
		case "1":
			failing = true
			cutNow()
			cut, cutNow = context.WithCancel(context.Background())
		case "0":
			failing = false
		}
		mu.Unlock()
	}
	mu.Lock()
	cutNow()
	mu.Unlock()
	srv.Close()
	outMu.Lock()
	out.Flush()
	outMu.Unlock()
}

// parseChildLine reads one report line of a proxy child.
func parseChildLine(s string) (fleetRequest, bool) {
	f := strings.SplitN(s, "\t", 3)
	if len(f) != 3 {
		return fleetRequest{}, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return fleetRequest{}, false
	}
	return fleetRequest{at: time.Unix(0, ns), src: f[1], path: f[2], probe: f[2] == "/v1/agent/version"}, true
}
