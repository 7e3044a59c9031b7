package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// hostsEnv names the file this package's test binary runs with bound at
// /etc/hosts, in a mount namespace of its own: TestMain sets it when it
// starts the binary again there.
const hostsEnv = "QMQ_KUBERNETES_TEST_HOSTS"

// outerEnv names the mount namespace the tests were started in, which the
// one they run in must differ from.
const outerEnv = "QMQ_KUBERNETES_TEST_OUTER_NS"

// baseHosts is what the hosts file holds besides the pods' names.
const baseHosts = "127.0.0.1 localhost\n::1 localhost\n"

// TestMain runs the package's tests in a mount namespace of their own whose
// /etc/hosts is a file the test writes: the pods' DNS names resolve there,
// for every process the test starts (qmqd, qmqctl) and for the test's own
// SDK client, to the pods' current IPs, as the cluster's DNS resolves a
// headless service's records. It needs root and util-linux's unshare.
func TestMain(m *testing.M) {
	if path := os.Getenv(hostsEnv); path != "" {
		if err := checkHosts(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	os.Exit(inNamespace())
}

const needs = "deploy/kubernetes's tests need root and util-linux's unshare: they run in a mount namespace of their own, " +
	"with /etc/hosts bound to a file they write (the pods' DNS names)"

// inNamespace starts the test binary again, with its arguments and
// environment, under unshare with the hosts file bound at /etc/hosts, and
// returns its exit code. The mount goes with the namespace, when its last
// process exits.
func inNamespace() int {
	f, err := os.CreateTemp("", "qmq-kubernetes-hosts-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	path := f.Name()
	defer os.Remove(path)
	defer os.Remove(path + ".bound")
	_, err = f.WriteString(baseHosts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(path, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", needs, err)
		return 1
	}
	args := append([]string{"--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$1" /etc/hosts && shift && exec "$@"`, "sh", path, exe}, os.Args[1:]...)
	cmd := exec.Command(unshare, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	outer, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", needs, err)
		return 1
	}
	cmd.Env = append(os.Environ(), hostsEnv+"="+path, outerEnv+"="+outer)
	// unshare and sh exec the test binary in the same process: it dies
	// with this one (a timeout's kill), and its nodes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	if _, statErr := os.Stat(path + ".bound"); statErr != nil {
		fmt.Fprintf(os.Stderr, "%s; unshare --mount and mount --bind of %s failed: %v\n", needs, path, err)
		return 1
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
}

// checkHosts checks, in the namespace, that /etc/hosts is the file at path
// (never the machine's: the test writes it), and tells the parent so.
func checkHosts(path string) error {
	// Only a file this package made, and only in a mount namespace other
	// than the machine's (init's), however the variable came to be set.
	if dir, base := filepath.Split(filepath.Clean(path)); filepath.Clean(dir) != filepath.Clean(os.TempDir()) ||
		!strings.HasPrefix(base, "qmq-kubernetes-hosts-") {
		return fmt.Errorf("%s=%s: not a hosts file of this package's", hostsEnv, path)
	}
	self, err := os.Readlink("/proc/self/ns/mnt")
	if outer := os.Getenv(outerEnv); err != nil || outer == "" || self == outer {
		return fmt.Errorf("%s: not in a mount namespace of its own (%s, outside %q, %v)", needs, self, outer, err)
	}
	a, err := os.Stat("/etc/hosts")
	if err != nil {
		return fmt.Errorf("%s: %v", needs, err)
	}
	b, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %v", needs, err)
	}
	if !os.SameFile(a, b) {
		return fmt.Errorf("%s: /etc/hosts is not %s", needs, path)
	}
	return os.WriteFile(path+".bound", nil, 0o600)
}

// writeHosts writes the hosts file in place (the same inode, bound at
// /etc/hosts; never renamed over): localhost and lines of IP and name. Go's
// resolver reads it again within about 5 s of a change, libc's at once.
func writeHosts(t *testing.T, lines []string) {
	t.Helper()
	s := baseHosts
	for _, l := range lines {
		s += l + "\n"
	}
	if err := os.WriteFile(os.Getenv(hostsEnv), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
