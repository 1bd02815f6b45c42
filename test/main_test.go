// Package test holds meshdns's end-to-end tests: they build the real binary
// once, start it with Corefiles on free loopback ports, and query it with
// miekg/dns, dig and kdig over real sockets.
package test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// meshdnsBin is the binary under test, built once by TestMain.
var meshdnsBin string

// repoRoot is the checkout's top directory.
var repoRoot string

// hostNetNS is the test process's network namespace at its start (the
// host's: the node's host-network pods share it).
var hostNetNS string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	dir, err := os.MkdirTemp("", "meshdns-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	meshdnsBin = filepath.Join(dir, "meshdns")
	if env := os.Getenv("MESHDNS_BIN"); env != "" {
		// make test builds bin/meshdns first and passes it in, so the
		// binary is built once per run.
		meshdnsBin = env
	} else {
		cmd := exec.Command("go", "build", "-o", meshdnsBin, "-ldflags", "-X main.version=e2e", ".")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building meshdns:", err)
			return 1
		}
	}
	// The one-node cluster (nodecluster_helpers_test.go) outlives the test
	// that started it and goes when the run ends, whatever the outcome.
	defer stopNodeCluster()
	// The host's network namespace, read before any test runs: later,
	// /proc/self/ns/net is the main thread's, which a test's goroutine
	// that entered a namespace and ended locked may have left there.
	hostNetNS, _ = os.Readlink("/proc/self/ns/net")
	// The parallel tests here mostly wait (an outage drill, a rule's
	// duration), and the node tests wait their turn (sharedNodeCluster)
	// while holding a slot of -parallel, which defaults to the cores: with
	// two, a queue of node tests would hold both and the others would wait
	// behind the drill. An explicit -parallel is kept.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "32")
	}
	return m.Run()
}
