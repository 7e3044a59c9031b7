package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// previousRelease is the commit of the release before this one: the
// mixed-version tests (upgrade_test.go) and the chaos run's
// previous-build fault run its qmqd and qmqctl next to this build's. It is
// eb696dd, the release before version gates (internal/version: V1). At a
// release, move it to the commit of the release just made, once the
// tests pass against it, so that each release is tested against the one
// before; the tests' expectations of what the previous build does (how
// it meets a group past its versions) move with it.
const previousRelease = "eb696dd3c7137a0ebfac453dabef6af8c025cc01"

// releaseCacheDir is where built releases are kept across runs, by
// commit, under os.UserCacheDir().
const releaseCacheDir = "qmq-test-releases"

// releases are the builds of earlier commits, once per test binary.
var releases struct {
	sync.Mutex
	m map[string]*release
}

type release struct {
	once         sync.Once
	qmqd, qmqctl string
	err          error
}

// PreviousRelease returns the paths of qmqd and qmqctl of previousRelease,
// built once per test binary (release).
func PreviousRelease(t testing.TB) (qmqd, qmqctl string) {
	t.Helper()
	return Release(t, previousRelease)
}

// Release returns the paths of qmqd and qmqctl built from commit hash of
// this repository's history: `git archive hash | tar -x` into a
// temporary directory, then go build there (without -race). It builds
// once per test binary, and keeps the binaries across runs in the user's
// cache directory (releaseCacheDir/HASH/bin), which a build fills whole or
// not at all (it renames the finished directory into place). A clone
// without the commit (a shallow one) fails the test, saying to fetch the
// full history.
func Release(t testing.TB, hash string) (qmqd, qmqctl string) {
	t.Helper()
	releases.Lock()
	if releases.m == nil {
		releases.m = map[string]*release{}
	}
	r := releases.m[hash]
	if r == nil {
		r = &release{}
		releases.m[hash] = r
	}
	releases.Unlock()
	r.once.Do(func() {
		start := time.Now()
		r.qmqd, r.qmqctl, r.err = buildRelease(hash)
		if r.err == nil {
			t.Logf("release %.12s: qmqd and qmqctl ready in %s (%s)", hash, time.Since(start).Round(time.Millisecond), filepath.Dir(r.qmqd))
		}
	})
	if r.err != nil {
		t.Fatalf("release %s: %v", hash, r.err)
	}
	return r.qmqd, r.qmqctl
}

// buildRelease returns release hash's binaries from the cache, building
// them first if they are not there.
func buildRelease(hash string) (qmqd, qmqctl string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", hash+"^{commit}").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("commit %s is not in the clone at %s (%s): a shallow clone? "+
			"fetch the full history (git fetch --unshallow) to test against the previous release", hash, root, strings.TrimSpace(string(out)))
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, releaseCacheDir, hash)
	qmqd, qmqctl = filepath.Join(dir, "bin", "qmqd"), filepath.Join(dir, "bin", "qmqctl")
	if complete(qmqd, qmqctl) {
		return qmqd, qmqctl, nil
	}
	if err := os.RemoveAll(dir); err != nil { // a build removed by hand in part
		return "", "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), hash+".building-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp) // whatever was not renamed into place
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, hash, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("git archive %s | tar -x: %w\n%s", hash, err, out)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(tmp, "bin")+string(filepath.Separator), "./cli/qmqd", "./cli/qmqctl")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build of %s: %w\n%s", hash, err, out)
	}
	if err := os.RemoveAll(src); err != nil {
		return "", "", err
	}
	// One rename puts the finished build in place: a directory at dir is
	// whole. Another test binary may have put its own there meanwhile.
	if err := os.Rename(tmp, dir); err != nil && !complete(qmqd, qmqctl) {
		return "", "", fmt.Errorf("keeping the build of %s: %w", hash, err)
	}
	if !complete(qmqd, qmqctl) {
		return "", "", fmt.Errorf("the build of %s lacks %s or %s", hash, qmqd, qmqctl)
	}
	return qmqd, qmqctl, nil
}

// complete reports whether every path is an executable regular file.
func complete(paths ...string) bool {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o100 == 0 {
			return false
		}
	}
	return true
}

// moduleRoot is the directory of this repository's go.mod.
func moduleRoot() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	if strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", errors.New("go env GOMOD: not in a module")
	}
	return filepath.Dir(strings.TrimSpace(string(gomod))), nil
}
