package test

// The Deployment of deploy/kubernetes/deployment.yaml runs meshdns as a
// non-root user with every capability dropped and still serves port 53: the
// pod's sysctl net.ipv4.ip_unprivileged_port_start lets unprivileged
// processes bind from 53 up in the pod's network namespace. Docker ≥ 20.10
// lowers that sysctl to 0 in every container by itself, which would hide a
// manifest without it, so this test sets it explicitly on a real dockerd (in
// a network namespace of its own, see mdnsupdater_helpers_test.go): once to
// the kernel's 1024 (meshdns must fail to bind), once to the manifest's
// values (meshdns must answer on 53 over UDP and TCP, as UID 65532 with no
// effective capability).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// portStartSysctl is the sysctl the manifest must set for port 53.
const portStartSysctl = "net.ipv4.ip_unprivileged_port_start"

// port53Corefile serves one name on port 53 of every address of the
// container.
const port53Corefile = `.:53 {
    errors
    hosts {
        192.0.2.53 port53.meshdns.test
    }
}
`

// podSecurity is what the test takes from the manifest's pod and meshdns
// container.
type podSecurity struct {
	uid, gid       int64
	sysctls        []corev1.Sysctl
	drop, add      []corev1.Capability
	readOnlyRoot   bool
	noPrivEscalate bool
}

// manifestSecurity reads deploy/kubernetes/deployment.yaml and returns the
// security settings of its meshdns container (the container's own
// runAsUser/runAsGroup override the pod's, as in Kubernetes). It fails when
// the manifest lacks what the port-53 setup needs.
func manifestSecurity(t *testing.T) podSecurity {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &dep); err != nil {
		t.Fatalf("deployment.yaml: %v", err)
	}
	pod := dep.Spec.Template.Spec
	var ctr *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == "meshdns" {
			ctr = &pod.Containers[i]
		}
	}
	if ctr == nil {
		t.Fatal("deployment.yaml has no container named meshdns")
	}
	var s podSecurity
	var uid, gid *int64
	if psc := pod.SecurityContext; psc != nil {
		uid, gid, s.sysctls = psc.RunAsUser, psc.RunAsGroup, psc.Sysctls
	}
	csc := ctr.SecurityContext
	if csc != nil {
		if csc.RunAsUser != nil {
			uid = csc.RunAsUser
		}
		if csc.RunAsGroup != nil {
			gid = csc.RunAsGroup
		}
		if csc.Capabilities != nil {
			s.drop, s.add = csc.Capabilities.Drop, csc.Capabilities.Add
		}
		s.readOnlyRoot = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
		s.noPrivEscalate = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	}
	if uid == nil || gid == nil || *uid == 0 {
		t.Fatalf("deployment.yaml: meshdns must run as a non-root runAsUser and runAsGroup (user %v, group %v)", uid, gid)
	}
	s.uid, s.gid = *uid, *gid
	dropsAll := false
	for _, c := range s.drop {
		dropsAll = dropsAll || c == "ALL"
	}
	if !dropsAll {
		t.Fatalf("deployment.yaml: the meshdns container drops %v, not ALL capabilities", s.drop)
	}
	found := false
	for _, sc := range s.sysctls {
		if sc.Name == portStartSysctl {
			found = true
			if v, err := strconv.Atoi(sc.Value); err != nil || v > 53 {
				t.Fatalf("deployment.yaml: %s = %q does not let an unprivileged process bind 53", sc.Name, sc.Value)
			}
		}
	}
	if !found {
		t.Fatalf("deployment.yaml: the pod securityContext has no sysctl %s (sysctls %v): a non-root meshdns with no capability cannot bind 53 on runtimes that keep the kernel's 1024", portStartSysctl, s.sysctls)
	}
	var udp, tcp bool
	for _, p := range ctr.Ports {
		udp = udp || (p.ContainerPort == 53 && p.Protocol == corev1.ProtocolUDP)
		tcp = tcp || (p.ContainerPort == 53 && p.Protocol == corev1.ProtocolTCP)
	}
	if !udp || !tcp {
		t.Errorf("deployment.yaml: the meshdns container does not declare port 53 over UDP and TCP: %+v", ctr.Ports)
	}
	return s
}

// runArgs are the docker run flags for s, with sysctls in place of the
// manifest's.
func (s podSecurity) runArgs(sysctls []corev1.Sysctl) []string {
	args := []string{"--user", fmt.Sprintf("%d:%d", s.uid, s.gid)}
	for _, c := range s.drop {
		args = append(args, "--cap-drop", string(c))
	}
	for _, c := range s.add {
		args = append(args, "--cap-add", string(c))
	}
	for _, sc := range sysctls {
		args = append(args, "--sysctl", sc.Name+"="+sc.Value)
	}
	if s.readOnlyRoot {
		args = append(args, "--read-only")
	}
	if s.noPrivEscalate {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	return args
}

// procStatus returns the fields of /proc/<pid>/status.
func procStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// netnsSysctl reads a net.* sysctl in the network namespace of pid.
func netnsSysctl(t *testing.T, pid, name string) string {
	t.Helper()
	p := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	out, err := exec.Command("nsenter", "--net=/proc/"+pid+"/ns/net", "cat", p).CombinedOutput()
	if err != nil {
		t.Fatalf("reading %s in the netns of %s: %v\n%s", name, pid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestClusterDNSImagePort53 runs the image built by build/image.sh with the
// Deployment's security settings on a real dockerd and shows that port 53
// works because of the manifest's sysctl, not because of Docker's default.
func TestClusterDNSImagePort53(t *testing.T) {
	sec := manifestSecurity(t)
	t.Logf("manifest: user %d:%d, drop %v, add %v, sysctls %v, read-only root %v, no privilege escalation %v",
		sec.uid, sec.gid, sec.drop, sec.add, sec.sysctls, sec.readOnlyRoot, sec.noPrivEscalate)
	d := newDockerNS(t)

	start := time.Now()
	const image = "meshdns:e2e-port53"
	cmd := exec.Command(filepath.Join(repoRoot, "build", "image.sh"), "prebuilt")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+d.sock, "MESHDNS_BIN="+meshdnsBin, "IMAGE="+image)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build/image.sh: %v\n%s", err, out)
	}
	t.Logf("image built in %v", time.Since(start).Round(time.Millisecond))

	dir := t.TempDir()
	corefile := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(port53Corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	mount := []string{"-v", corefile + ":/etc/meshdns/Corefile:ro"}

	t.Run("kernel default 1024 denies port 53", func(t *testing.T) {
		start := time.Now()
		var sysctls []corev1.Sysctl
		for _, sc := range sec.sysctls {
			if sc.Name != portStartSysctl {
				sysctls = append(sysctls, sc)
			}
		}
		sysctls = append(sysctls, corev1.Sysctl{Name: portStartSysctl, Value: "1024"})
		args := append([]string{"run", "-d", "--name", "port53-denied"}, sec.runArgs(sysctls)...)
		d.docker(t, append(append(args, mount...), image)...)
		Eventually(t, 20*time.Second, func() string {
			if st := d.docker(t, "inspect", "-f", "{{.State.Status}}", "port53-denied"); st != "exited" {
				return "meshdns still " + st + " with " + portStartSysctl + "=1024"
			}
			return ""
		})
		code := d.docker(t, "inspect", "-f", "{{.State.ExitCode}}", "port53-denied")
		logs := d.docker(t, "logs", "port53-denied")
		if code == "0" || !strings.Contains(logs, ":53") || !strings.Contains(logs, "permission denied") {
			t.Fatalf("want meshdns to fail binding 53 (exit %s):\n%s", code, logs)
		}
		t.Logf("exit code %s after %v: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(logs))
	})

	t.Run("manifest settings bind port 53", func(t *testing.T) {
		start := time.Now()
		args := append([]string{"run", "-d", "--name", "port53", "-p", "1053:53/udp", "-p", "1053:53/tcp"}, sec.runArgs(sec.sysctls)...)
		d.docker(t, append(append(args, mount...), image)...)
		addr := d.nsIP + ":1053"
		Eventually(t, 20*time.Second, func() string {
			if st := d.docker(t, "inspect", "-f", "{{.State.Status}}", "port53"); st != "running" {
				logs, _ := d.tryDocker("logs", "port53")
				t.Fatalf("meshdns is %s with the manifest's settings:\n%s", st, logs)
			}
			rc, ans, err := rcode(addr, "port53.meshdns.test")
			if err != nil || rc != "NOERROR" || len(ans) != 1 || ans[0] != "192.0.2.53" {
				return fmt.Sprintf("port53.meshdns.test at %s: %s %v %v", addr, rc, ans, err)
			}
			return ""
		})
		t.Logf("answering on 53 after %v", time.Since(start).Round(time.Millisecond))
		if got := DigShort(t, addr, "port53.meshdns.test", "A"); len(got) != 1 || got[0] != "192.0.2.53" {
			t.Errorf("dig (udp) port53.meshdns.test = %v", got)
		}
		if got := DigShort(t, addr, "+tcp", "port53.meshdns.test", "A"); len(got) != 1 || got[0] != "192.0.2.53" {
			t.Errorf("dig (tcp) port53.meshdns.test = %v", got)
		}

		uid := strconv.FormatInt(sec.uid, 10)
		gid := strconv.FormatInt(sec.gid, 10)
		top := d.docker(t, "top", "port53", "-o", "pid,uid,gid,args")
		t.Logf("docker top:\n%s", top)
		if ls := strings.Split(top, "\n"); len(ls) != 2 || len(strings.Fields(ls[1])) < 4 ||
			strings.Join(strings.Fields(ls[1])[1:4], " ") != uid+" "+gid+" /meshdns" {
			t.Errorf("want one meshdns process as %s:%s:\n%s", uid, gid, top)
		}
		pid := d.docker(t, "inspect", "-f", "{{.State.Pid}}", "port53")
		st := procStatus(t, pid)
		t.Logf("/proc/%s/status: Uid %s, Gid %s, CapEff %s, CapPrm %s, CapBnd %s, CapAmb %s, NoNewPrivs %s",
			pid, st["Uid"], st["Gid"], st["CapEff"], st["CapPrm"], st["CapBnd"], st["CapAmb"], st["NoNewPrivs"])
		if want := strings.Repeat(uid+" ", 4); st["Uid"]+" " != want {
			t.Errorf("Uid = %q, want %s (real, effective, saved, fs)", st["Uid"], uid)
		}
		if want := strings.Repeat(gid+" ", 4); st["Gid"]+" " != want {
			t.Errorf("Gid = %q, want %s", st["Gid"], gid)
		}
		for _, k := range []string{"CapEff", "CapPrm", "CapAmb"} {
			if st[k] != "0000000000000000" {
				t.Errorf("%s = %q, want no capability", k, st[k])
			}
		}
		if len(sec.add) == 0 && st["CapBnd"] != "0000000000000000" {
			t.Errorf("CapBnd = %q, want empty with every capability dropped", st["CapBnd"])
		}
		if sec.noPrivEscalate && st["NoNewPrivs"] != "1" {
			t.Errorf("NoNewPrivs = %q, want 1", st["NoNewPrivs"])
		}
		for _, sc := range sec.sysctls {
			if strings.HasPrefix(sc.Name, "net.") {
				got := netnsSysctl(t, pid, sc.Name)
				t.Logf("%s = %s in the container's network namespace", sc.Name, got)
				if got != sc.Value {
					t.Errorf("%s in the container = %s, want the manifest's %s", sc.Name, got, sc.Value)
				}
			}
		}
	})
}
