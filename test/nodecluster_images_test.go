package test

// Images for the one-node cluster without a registry: the harness writes a
// `docker save` tarball (one layer tar, a config JSON, manifest.json) from a
// list of files and imports it with `ctr -n k8s.io images import`; pods use
// them with imagePullPolicy Never.
//   pause    static busybox running sleep (the sandbox image)
//   meshdns  images/Dockerfile's prebuilt stage, read from the Dockerfile:
//            the binary under test for bin/meshdns, images/Corefile,
//            images/data owned by 65532, user 65532:65532, workdir
//            /var/lib/meshdns
//   client   static busybox, the host's glibc getent with the libraries ldd
//            names and an nsswitch.conf, and the test's Go client
//            (test/nodeclient)

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	pauseImage   = "e2e.meshdns.test/pause:node"
	meshdnsImage = "e2e.meshdns.test/meshdns:node"
	clientImage  = "e2e.meshdns.test/client:node"
)

// imageFile is one entry of an image's layer: a regular file (from src or
// data), a directory (dir) or a symlink (link).
type imageFile struct {
	path     string
	src      string
	data     []byte
	mode     int64
	uid, gid int
	dir      bool
	link     string
}

// imageSpec is one image: its reference, layer and runtime config.
type imageSpec struct {
	ref        string
	files      []imageFile
	entrypoint []string
	cmd        []string
	user       string
	workdir    string
	ports      []string
}

// layerTar returns the layer as an uncompressed tar, parents before
// children, with the parent directories it needs.
func (s imageSpec) layerTar() ([]byte, error) {
	files := append([]imageFile(nil), s.files...)
	have := map[string]bool{}
	for _, f := range files {
		have[strings.Trim(f.path, "/")] = true
	}
	for _, f := range s.files {
		for d := filepath.Dir(strings.Trim(f.path, "/")); d != "." && !have[d]; d = filepath.Dir(d) {
			have[d] = true
			files = append(files, imageFile{path: d, dir: true, mode: 0o755})
		}
	}
	sort.Slice(files, func(i, j int) bool { return strings.Trim(files[i].path, "/") < strings.Trim(files[j].path, "/") })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	for _, f := range files {
		h := &tar.Header{Name: strings.Trim(f.path, "/"), Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime, Format: tar.FormatPAX}
		var data []byte
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, data = tar.TypeReg, f.data
			if f.src != "" {
				b, err := os.ReadFile(f.src)
				if err != nil {
					return nil, err
				}
				data = b
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeDockerArchive writes the image as a docker-save tarball at path.
func (s imageSpec) writeDockerArchive(path string) error {
	layer, err := s.layerTar()
	if err != nil {
		return err
	}
	diff := sha256.Sum256(layer)
	ports := map[string]struct{}{}
	for _, p := range s.ports {
		ports[p] = struct{}{}
	}
	config := map[string]any{
		"architecture": "amd64", "os": "linux", "created": "2023-11-14T22:13:20Z",
		"config": map[string]any{
			"Entrypoint": s.entrypoint, "Cmd": s.cmd, "User": s.user, "WorkingDir": s.workdir, "ExposedPorts": ports,
			"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
		"history": []map[string]string{{"created": "2023-11-14T22:13:20Z", "created_by": "meshdns e2e harness"}},
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{s.ref}, "Layers": []string{"layer/layer.tar"}}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		data []byte
	}{{"layer/layer.tar", layer}, {cfgName, cfg}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// pauseImageSpec is the sandbox image: busybox sleeping for ever.
func pauseImageSpec() imageSpec {
	return imageSpec{ref: pauseImage, entrypoint: []string{"/bin/busybox", "sleep", "2147483647"},
		files: []imageFile{{path: "bin/busybox", src: "/bin/busybox", mode: 0o755}}}
}

// meshdnsImageSpec is images/Dockerfile's prebuilt stage, read from the
// Dockerfile itself (dockerfileStage), with bin/meshdns standing for the
// binary under test.
func meshdnsImageSpec(bin string) (imageSpec, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "images", "Dockerfile"))
	if err != nil {
		return imageSpec{}, err
	}
	s, err := dockerfileStage(string(b), "prebuilt", map[string]string{"bin/meshdns": bin})
	s.ref = meshdnsImage
	return s, err
}

// dockerfileStage builds an image spec from one FROM-scratch stage of a
// Dockerfile: COPY [--chown=U:G] SRC DST (SRC relative to the checkout, or
// as replaced by srcs), WORKDIR, USER, EXPOSE, ENTRYPOINT and CMD in JSON
// form. Any other instruction is an error, so a Dockerfile that grows one
// fails the harness instead of shipping an image the test never built.
func dockerfileStage(dockerfile, stage string, srcs map[string]string) (imageSpec, error) {
	var s imageSpec
	in := false
	for _, l := range dockerfileLines(dockerfile) {
		f := strings.Fields(l)
		op := strings.ToUpper(f[0])
		if op == "FROM" {
			in = len(f) == 4 && f[1] == "scratch" && strings.EqualFold(f[2], "AS") && f[3] == stage
			continue
		}
		if !in {
			continue
		}
		var err error
		switch op {
		case "COPY":
			err = s.dockerCopy(f[1:], srcs)
		case "WORKDIR":
			s.workdir = f[1]
		case "USER":
			s.user = f[1]
		case "EXPOSE":
			s.ports = append(s.ports, f[1:]...)
		case "ENTRYPOINT":
			err = json.Unmarshal([]byte(strings.TrimSpace(l[len(f[0]):])), &s.entrypoint)
		case "CMD":
			err = json.Unmarshal([]byte(strings.TrimSpace(l[len(f[0]):])), &s.cmd)
		default:
			err = fmt.Errorf("instruction %s is not supported by the harness", op)
		}
		if err != nil {
			return s, fmt.Errorf("images/Dockerfile stage %s: %q: %w", stage, l, err)
		}
	}
	if len(s.files) == 0 {
		return s, fmt.Errorf("images/Dockerfile has no stage %q copying files", stage)
	}
	return s, nil
}

// dockerfileLines returns the Dockerfile's instructions, continuation lines
// joined, comments and blank lines dropped.
func dockerfileLines(dockerfile string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(dockerfile, "\n") {
		t := strings.TrimSpace(l)
		if cur == "" && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		out = append(out, cur+t)
		cur = ""
	}
	return out
}

// dockerCopy adds COPY's files: a file to a file path, or a directory's
// contents into a directory (created with the --chown owner).
func (s *imageSpec) dockerCopy(args []string, srcs map[string]string) error {
	uid, gid := 0, 0
	if len(args) > 0 && strings.HasPrefix(args[0], "--chown=") {
		if _, err := fmt.Sscanf(strings.TrimPrefix(args[0], "--chown="), "%d:%d", &uid, &gid); err != nil {
			return fmt.Errorf("numeric --chown only: %w", err)
		}
		args = args[1:]
	}
	if len(args) != 2 || strings.HasPrefix(args[0], "--") {
		return fmt.Errorf("want COPY [--chown=U:G] SRC DST")
	}
	src, dst := args[0], strings.Trim(args[1], "/")
	path := filepath.Join(repoRoot, src)
	if p, ok := srcs[src]; ok {
		path = p
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		s.files = append(s.files, imageFile{path: dst, src: path, mode: int64(info.Mode().Perm()), uid: uid, gid: gid})
		return nil
	}
	s.files = append(s.files, imageFile{path: dst, dir: true, mode: 0o755, uid: uid, gid: gid})
	return filepath.Walk(path, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == path {
			return err
		}
		rel, _ := filepath.Rel(path, p)
		f := imageFile{path: dst + "/" + rel, uid: uid, gid: gid, mode: int64(fi.Mode().Perm()), dir: fi.IsDir()}
		if !fi.IsDir() {
			f.src = p
		}
		s.files = append(s.files, f)
		return nil
	})
}

// clientImageSpec is busybox, getent with its libraries, and nodeclient.
func clientImageSpec(nodeclient string) (imageSpec, error) {
	s := imageSpec{ref: clientImage, entrypoint: []string{"/bin/busybox", "sleep", "3600"},
		files: []imageFile{
			{path: "bin/busybox", src: "/bin/busybox", mode: 0o755},
			{path: "nodeclient", src: nodeclient, mode: 0o755},
			{path: "etc/nsswitch.conf", data: []byte("hosts: files dns\n"), mode: 0o644},
			{path: "tmp", dir: true, mode: 0o1777},
		}}
	for _, l := range []string{"sh", "sleep", "cat", "ls", "nslookup"} {
		s.files = append(s.files, imageFile{path: "bin/" + l, link: "busybox"})
	}
	getent, err := exec.LookPath("getent")
	if err != nil {
		return s, fmt.Errorf("getent (libc-bin) is not installed: %w", err)
	}
	s.files = append(s.files, imageFile{path: "usr/bin/getent", src: getent, mode: 0o755})
	out, err := exec.Command("ldd", getent).Output()
	if err != nil {
		return s, fmt.Errorf("ldd %s: %w", getent, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
		f := strings.Fields(l)
		for _, w := range f {
			if strings.HasPrefix(w, "/") {
				real, err := filepath.EvalSymlinks(w)
				if err != nil {
					return s, err
				}
				s.files = append(s.files, imageFile{path: strings.TrimPrefix(w, "/"), src: real, mode: 0o755})
				break
			}
		}
	}
	return s, nil
}

// importImage writes spec's tarball under dir and imports it into the
// containerd at sock (namespace k8s.io, unpacked for the CRI).
func importImage(ctr, sock, dir string, spec imageSpec) error {
	name := strings.NewReplacer("/", "_", ":", "_").Replace(spec.ref) + ".tar"
	path := filepath.Join(dir, name)
	if err := spec.writeDockerArchive(path); err != nil {
		return fmt.Errorf("writing %s: %w", spec.ref, err)
	}
	_, err := hostRun(ctr, "-a", sock, "-n", "k8s.io", "images", "import", path)
	return err
}

// buildNodeClient builds test/nodeclient statically into out.
func buildNodeClient(out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./test/nodeclient")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building test/nodeclient: %w\n%s", err, b)
	}
	return nil
}

// TestNodeImageLayout checks the meshdns image the harness writes against
// images/Dockerfile's prebuilt stage: the files, their owners, the user,
// working directory and command (no cluster needed).
func TestNodeImageLayout(t *testing.T) {
	s, err := meshdnsImageSpec(meshdnsBin)
	if err != nil {
		t.Fatal(err)
	}
	if s.user != "65532:65532" || s.workdir != "/var/lib/meshdns" || strings.Join(s.entrypoint, " ") != "/meshdns" ||
		strings.Join(s.cmd, " ") != "-conf /etc/meshdns/Corefile" {
		t.Errorf("user %q, workdir %q, entrypoint %q, cmd %q", s.user, s.workdir, s.entrypoint, s.cmd)
	}
	layer, err := s.layerTar()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got[h.Name] = fmt.Sprintf("%d:%d %o", h.Uid, h.Gid, h.Mode)
	}
	for name, want := range map[string]string{
		"meshdns": "0:0 755", "etc/meshdns/Corefile": "0:0 644", "var/lib/meshdns/": "65532:65532 755",
		"var/lib/meshdns/README": "65532:65532 644",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q (layer: %v)", name, got[name], want, got)
		}
	}
}
