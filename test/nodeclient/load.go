package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// lookup is one line of the load log: a lookup's start, outcome and
// latency. Timeout is set when the lookup ran out of time (the resolver's
// own timeout or the per-lookup deadline); any other error is a lost
// lookup.
type lookup struct {
	Start   int64   `json:"t"` // unix nanoseconds
	Type    string  `json:"type"`
	Name    string  `json:"name"`
	Millis  float64 `json:"ms"`
	OK      bool    `json:"ok"`
	Timeout bool    `json:"timeout,omitempty"`
	Answers int     `json:"n"`
	Error   string  `json:"err,omitempty"`
}

// load asks the names in turn at a fixed rate through Go's resolver (UDP,
// the pod's resolv.conf) and appends every lookup to the log. It is
// bounded: it stops after -duration (at most an hour) and never has more
// than -inflight lookups running.
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	rate := fs.Float64("rate", 20, "lookups per second")
	duration := fs.Duration("duration", 10*time.Minute, "how long to run (at most 1h)")
	out := fs.String("out", "", "log file (appended)")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of one lookup")
	inflight := fs.Int("inflight", 200, "lookups running at once at most")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := fs.Args()
	if *out == "" || len(names) == 0 || *rate <= 0 || *duration > time.Hour {
		return errors.New("usage: nodeclient load -rate R -duration D (<= 1h) -out FILE TYPE:NAME...")
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	w := &logWriter{w: bufio.NewWriter(f)}
	stopFlush := w.flushEvery(200 * time.Millisecond)
	defer stopFlush()

	slots := make(chan struct{}, *inflight)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	defer tick.Stop()
	end := time.After(*duration)
	for i := 0; ; i++ {
		select {
		case <-end:
			wg.Wait()
			return nil
		case <-tick.C:
		}
		qtype, name, _ := strings.Cut(names[i%len(names)], ":")
		select {
		case slots <- struct{}{}:
		default:
			w.write(lookup{Start: time.Now().UnixNano(), Type: qtype, Name: name, Error: "skipped: too many lookups in flight"})
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			w.write(timedLookup(qtype, name, *timeout))
		}()
	}
}

// timedLookup runs one lookup with Go's resolver under a deadline.
func timedLookup(qtype, name string, timeout time.Duration) lookup {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	ans, err := goLookup(ctx, qtype, name)
	l := lookup{Start: start.UnixNano(), Type: qtype, Name: name, Millis: float64(time.Since(start).Microseconds()) / 1000, Answers: len(ans)}
	var de *net.DNSError
	switch {
	case err == nil && len(ans) > 0:
		l.OK = true
	case err == nil:
		l.Error = "no answer"
	default:
		l.Error = err.Error()
		l.Timeout = errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &de) && de.IsTimeout)
	}
	return l
}

// logWriter serialises the lookups' JSON lines.
type logWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *logWriter) write(v lookup) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(b)
	l.w.WriteByte('\n')
}

// flushEvery flushes the log every d until the returned stop is called
// (which flushes once more).
func (l *logWriter) flushEvery(d time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				l.mu.Lock()
				_ = l.w.Flush()
				l.mu.Unlock()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		l.mu.Lock()
		_ = l.w.Flush()
		l.mu.Unlock()
		fmt.Fprintln(os.Stderr, "load: done")
	}
}
