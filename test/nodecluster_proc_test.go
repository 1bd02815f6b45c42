package test

// Processes of the one-node cluster. Each runs in its own process group with
// its log in <state>/logs/<name>.log and its PID in <state>/pids/<name>.pid,
// so a run that was killed (go test's timeout, ^C) leaves enough behind for
// the next run's cleanup to stop exactly what it started: a PID from a pid
// file is signalled only while its command line still names the state
// directory, which every component's arguments do.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nodeProc is one process of the cluster.
type nodeProc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
	pidPath string
	logFile *os.File
}

// startNodeProc starts argv with its output appended to the component's log
// file and its PID written to the component's pid file.
func startNodeProc(state, name string, env []string, argv ...string) (*nodeProc, error) {
	for _, d := range []string{"logs", "pids"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			return nil, err
		}
	}
	p := &nodeProc{name: name, logPath: filepath.Join(state, "logs", name+".log"), pidPath: filepath.Join(state, "pids", name+".pid")}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "==== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.cmd, p.logFile, p.done = cmd, f, make(chan struct{})
	if err := os.WriteFile(p.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// pid is the process's PID.
func (p *nodeProc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *nodeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process (by PID) while it runs.
func (p *nodeProc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM (SIGCONT first, in case a drill froze it), waits up to
// grace, then SIGKILL; the pid file goes once the process is gone.
func (p *nodeProc) stop(grace time.Duration) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		stopProcess(p.cmd, p.done, grace)
	}
	_ = os.Remove(p.pidPath)
}

// kill ends the process with SIGKILL at once (a crash, for the drills).
func (p *nodeProc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
	_ = os.Remove(p.pidPath)
}

// logTail returns the last n lines of the component's log.
func (p *nodeProc) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	return tail(string(b), n)
}

// cmdlineHas reports whether /proc/<pid>/cmdline holds s (false once the
// process is gone).
func cmdlineHas(pid int, s string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte(s))
}

// killPidFiles SIGKILLs every process named in <state>/pids whose command
// line still holds marker, and removes the pid files. It returns what it
// killed, for the log.
func killPidFiles(state, marker string) []string {
	ents, _ := os.ReadDir(filepath.Join(state, "pids"))
	var killed []string
	for _, e := range ents {
		path := filepath.Join(state, "pids", e.Name())
		b, err := os.ReadFile(path)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && perr == nil && pid > 1 && cmdlineHas(pid, marker) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, fmt.Sprintf("%s(%d)", strings.TrimSuffix(e.Name(), ".pid"), pid))
		}
		_ = os.Remove(path)
	}
	return killed
}

// shimPIDs returns the containerd shims serving the containerd at sock (a
// shim's command line holds "-address <sock>").
func shimPIDs(sock string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == sock {
				out = append(out, pid)
			}
		}
	}
	return out
}

// waitGone waits up to d until none of pids exists any more.
func waitGone(pids []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		alive := false
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil && !isZombie(p) {
				alive = true
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isZombie reports whether pid has exited and waits for its parent.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}
