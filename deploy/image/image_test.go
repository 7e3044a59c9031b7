package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestImage builds the image as `make image` does, reads the tarball back
// as `docker load` would, and checks what it holds: a non-root numeric
// user that /etc/passwd names, the entrypoint, ports, volume and labels,
// static executables of root that the user cannot change, a data
// directory the user owns, and binaries that run.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := buildBinaries(bin, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "qmq-image.tar")
	if err := run(options{out: out, tag: "qmq:test", arch: runtime.GOARCH, version: "v9.8.7", revision: "abc123", bin: bin}); err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil || len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{"qmq:test"}) {
		t.Fatalf("the tarball's manifest.json: %+v, %v: want one image, tagged qmq:test (docker load names it so)", m, err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Digests, diff ids, sizes and the manifest agree, as a registry or
	// docker load checks them.
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image is not consistent: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	u, g, ok := strings.Cut(c.User, ":")
	un, uerr := strconv.Atoi(u)
	gn, gerr := strconv.Atoi(g)
	if !ok || uerr != nil || gerr != nil || un == 0 || gn == 0 {
		t.Fatalf("config user %q: want a numeric UID:GID, not root's", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/qmqd"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/usr/local/bin/qmqd] and no cmd", c.Entrypoint, c.Cmd)
	}
	if want := []string{"6222/tcp", "6223/tcp", "6224/tcp", "6225/tcp", "6280/tcp", "6281/tcp"}; !slices.Equal(slices.Sorted(maps.Keys(c.ExposedPorts)), want) {
		t.Errorf("exposed ports %v, want %v", slices.Sorted(maps.Keys(c.ExposedPorts)), want)
	}
	if got := slices.Sorted(maps.Keys(c.Volumes)); !slices.Equal(got, []string{"/var/lib/qmq"}) || c.WorkingDir != "/var/lib/qmq" {
		t.Errorf("volumes %v, workdir %q: want /var/lib/qmq", got, c.WorkingDir)
	}
	if c.StopSignal != "SIGTERM" || !slices.Contains(c.Env, "PATH=/usr/local/bin") {
		t.Errorf("stop signal %q, env %q", c.StopSignal, c.Env)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title":    "qmq",
		"org.opencontainers.image.source":   "https://github.com/qmqgo/qmq",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  "v9.8.7",
		"org.opencontainers.image.revision": "abc123",
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, c.Labels[k], v)
		}
	}

	// The one layer.
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v: want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	data := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(path.Clean(h.Name), "/")
		files[name] = h
		if h.Typeflag == tar.TypeReg {
			if data[name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every file's parent directory is in the layer (an empty base has none).
	for name := range files {
		for d := path.Dir(name); d != "/"; d = path.Dir(d) {
			if h := files[d]; h == nil || h.Typeflag != tar.TypeDir {
				t.Errorf("%s: its directory %s is not in the layer", name, d)
			}
		}
	}
	if !strings.Contains(string(data["/etc/passwd"]), fmt.Sprintf("qmq:x:%d:%d:", un, gn)) {
		t.Errorf("/etc/passwd has no qmq of %d:%d:\n%s", un, gn, data["/etc/passwd"])
	}
	if !strings.Contains(string(data["/etc/group"]), fmt.Sprintf("qmq:x:%d:", gn)) {
		t.Errorf("/etc/group has no qmq of %d:\n%s", gn, data["/etc/group"])
	}
	if _, err := os.Stat(caFile); err == nil && !bytes.Contains(data[caFile], []byte("BEGIN CERTIFICATE")) {
		t.Errorf("%s: not the build machine's CA certificates (%d bytes)", caFile, len(data[caFile]))
	}
	if h := files["/var/lib/qmq"]; h == nil || h.Typeflag != tar.TypeDir || h.Uid != un || h.Gid != gn || h.Mode&0o700 != 0o700 {
		t.Errorf("/var/lib/qmq: %+v: want a directory the user %d:%d owns and may write", h, un, gn)
	}
	for _, d := range []string{"/usr/local/bin", "/etc"} {
		if h := files[d]; h == nil || h.Uid != 0 || h.Mode&0o022 != 0 {
			t.Errorf("%s: %+v: want root's, not writable by others", d, h)
		}
	}
	for _, b := range []string{"qmqd", "qmqctl"} {
		name := "/usr/local/bin/" + b
		h := files[name]
		if h == nil || h.Typeflag != tar.TypeReg {
			t.Errorf("%s: not a file of the layer", name)
			continue
		}
		if h.Uid != 0 || h.Gid != 0 || h.Mode&0o111 != 0o111 || h.Mode&0o022 != 0 {
			t.Errorf("%s: owner %d:%d mode %o: want root's, executable by all, writable by root only", name, h.Uid, h.Gid, h.Mode)
		}
		checkStatic(t, name, data[name])

		// It runs: extracted from the layer, as a process.
		exe := filepath.Join(dir, "extracted-"+b)
		if err := os.WriteFile(exe, data[name], os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(exe, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), b+" version ") {
			t.Errorf("%s --version: %v: %q", name, err, out)
		}
	}
}

// checkStatic fails t unless data is an executable ELF of this machine's
// architecture with no interpreter and no dynamic section: it needs
// nothing of an image that has nothing.
func checkStatic(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not an ELF file: %v", name, err)
		return
	}
	if f.Type != elf.ET_EXEC {
		t.Errorf("%s: ELF type %v, want ET_EXEC (a static, non-PIE executable)", name, f.Type)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if want != 0 && f.Machine != want {
		t.Errorf("%s: machine %v, want %v", name, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has a %v program header: dynamically linked", name, p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Errorf("%s: has a .dynamic section", name)
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s: needs %v", name, libs)
	}
}

// TestReproducible: with SOURCE_DATE_EPOCH, two builds of the same
// binaries are the same image, byte for byte, dated then.
func TestReproducible(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := buildBinaries(bin, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	var digests []string
	for range 2 {
		img, err := assemble(bin, runtime.GOARCH, defaultVersion, defaultRevision)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !cf.Created.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("created %v, want SOURCE_DATE_EPOCH's %v", cf.Created.Time, time.Unix(1700000000, 0).UTC())
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds: %s and %s", digests[0], digests[1])
	}
}
