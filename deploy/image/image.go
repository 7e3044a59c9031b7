package main

import (
	"archive/tar"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's /etc/passwd and /etc/group, which the Dockerfile copies too.
var (
	//go:embed rootfs/etc/passwd
	passwd []byte
	//go:embed rootfs/etc/group
	group []byte
)

// moduleRoot returns the directory of the module's go.mod, wherever in it
// the builder runs.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the qmq module: run from the repository")
	}
	return filepath.Dir(mod), nil
}

// buildBinaries builds the image's binaries for linux/arch into dir, as
// the Dockerfile's build stage does.
func buildBinaries(dir, arch string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	args := append(append(append([]string{}, goBuild...), "-o", dir+string(filepath.Separator)), binaries...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), goBuildEnv...), "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// created is the time of the image and its files: SOURCE_DATE_EPOCH when
// set (a reproducible build), else now.
func created() (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Now().UTC().Truncate(time.Second), nil
}

// assemble returns the image of the binaries in bin, for linux/arch.
func assemble(bin, arch, version, revision string) (v1.Image, error) {
	when, err := created()
	if err != nil {
		return nil, err
	}
	layer, err := rootLayer(bin, when)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: when}, CreatedBy: "deploy/image: qmqd and qmqctl, /etc/passwd, /etc/group, CA certificates, " + dataDir,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: when}
	cf.Config = imageConfig(version, revision)
	return mutate.ConfigFile(img, cf)
}

// imageConfig is the image's runtime configuration.
func imageConfig(version, revision string) v1.Config {
	set := func(keys ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, k := range keys {
			m[k] = struct{}{}
		}
		return m
	}
	return v1.Config{
		User:         fmt.Sprintf("%d:%d", uid, gid),
		Entrypoint:   entrypoint,
		Env:          env,
		ExposedPorts: set(ports...),
		Volumes:      set(dataDir),
		WorkingDir:   dataDir,
		Labels:       labels(version, revision),
		StopSignal:   stopSignal,
	}
}

// rootLayer returns the image's one layer: the binaries in bin, root's and
// read-only to the user, /etc/passwd and /etc/group, the build machine's
// CA certificates if it has them, and the user's data directory.
func rootLayer(bin string, when time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, owner, mode int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(mode),
			Uid: owner, Gid: owner, ModTime: when, Format: tar.FormatPAX})
	}
	file := func(name string, mode int, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode),
			Size: int64(len(data)), ModTime: when, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	var errs []error
	for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "usr", "usr/local", "usr/local/bin", "var", "var/lib"} {
		errs = append(errs, dir(d, 0, 0o755))
	}
	errs = append(errs, dir(strings.TrimPrefix(dataDir, "/"), uid, 0o750),
		file("etc/passwd", 0o644, passwd), file("etc/group", 0o644, group))
	switch ca, err := os.ReadFile(caFile); {
	case err == nil:
		errs = append(errs, file(strings.TrimPrefix(caFile, "/"), 0o644, ca))
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, err)
	}
	for _, b := range binaries {
		name := path.Base(b)
		data, err := os.ReadFile(filepath.Join(bin, name))
		if err != nil {
			return nil, err
		}
		errs = append(errs, file(strings.TrimPrefix(binDir, "/")+"/"+name, 0o755, data))
	}
	errs = append(errs, tw.Close())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// write writes img, named tag, to the tarball out.
func write(img v1.Image, tag, out string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}
