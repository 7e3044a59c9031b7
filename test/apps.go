package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// apps.go runs application processes beside a cluster: programs of the
// test (test/internal/...) built once per test binary, each process in a
// slot that survives Kill and Start, its standard output read line by line
// and its standard error appended to a log file.

// appBinaries are the test's application programs, built once each per
// test binary, by package path.
var appBinaries struct {
	sync.Mutex
	dir   string
	built map[string]string // package → binary
}

// AppBinary builds the main package pkg (a path from the module root, such
// as "./test/internal/orderapp"), without -race, once per test binary, and
// returns the binary's path. RemoveAppBinaries deletes them (TestMain
// calls it).
func AppBinary(t testing.TB, pkg string) string {
	t.Helper()
	b := &appBinaries
	b.Lock()
	defer b.Unlock()
	if path := b.built[pkg]; path != "" {
		return path
	}
	start := time.Now()
	if b.dir == "" {
		var err error
		if b.dir, err = os.MkdirTemp("", "qmq-e2e-apps-"); err != nil {
			t.Fatal(err)
		}
		b.built = map[string]string{}
	}
	if err := goBuild(b.dir, pkg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.dir, filepath.Base(pkg))
	b.built[pkg] = path
	t.Logf("%s built in %s (once per test binary)", pkg, time.Since(start).Round(time.Millisecond))
	return path
}

// RemoveAppBinaries deletes the binaries AppBinary built, if any.
func RemoveAppBinaries() {
	appBinaries.Lock()
	defer appBinaries.Unlock()
	if appBinaries.dir != "" {
		os.RemoveAll(appBinaries.dir)
		appBinaries.dir, appBinaries.built = "", nil
	}
}

// AppProc is one application process slot: the same program and
// arguments at every Start. Each line the process writes on its standard
// output goes to the slot's line function, on a goroutine of its own
// (one per life, in order); its standard error is appended to LogPath.
// t.Cleanup SIGKILLs and reaps it, and prints its log's tail if the test
// failed.
type AppProc struct {
	Name    string
	LogPath string

	t      testing.TB
	path   string
	args   []string
	onLine func(line string)

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd is reaped and its output read
	waitErr  error
	expected bool // the harness killed or signalled it: exiting is expected
	starts   int
}

// NewAppProc returns a slot for the program at path with args; it does
// not start it. Its log goes in dir.
func NewAppProc(t testing.TB, name, dir, path string, args []string, onLine func(line string)) *AppProc {
	a := &AppProc{Name: name, LogPath: filepath.Join(dir, name+".log"), t: t, path: path, args: args, onLine: onLine}
	t.Cleanup(func() {
		if err := a.kill(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("---- last %d lines of %s (%s) ----\n%s", logTailLines, a.Name, a.LogPath, tail(a.LogPath, logTailLines))
		}
	})
	return a
}

// Start starts a new life of the process; it must not be running.
func (a *AppProc) Start() {
	a.t.Helper()
	logf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "==== %s harness: start: %s %s\n", time.Now().Format("15:04:05.000"), filepath.Base(a.path), strings.Join(a.args, " "))
	cmd := exec.Command(a.path, a.args...)
	cmd.Stderr = logf
	cmd.SysProcAttr = dieWithParent()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		a.t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil && !isClosed(a.exited) {
		a.t.Fatalf("%s is already running (pid %d)", a.Name, a.cmd.Process.Pid)
	}
	if err := cmd.Start(); err != nil {
		a.t.Fatalf("starting %s: %v", a.Name, err)
	}
	exited := make(chan struct{})
	a.cmd, a.exited, a.expected, a.waitErr = cmd, exited, false, nil
	a.starts++
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			a.onLine(sc.Text())
		}
		err := cmd.Wait() // after the reads, as exec asks
		a.mu.Lock()
		a.waitErr = err
		a.mu.Unlock()
		close(exited)
	}()
}

// Kill SIGKILLs the process and waits until it is reaped.
func (a *AppProc) Kill() {
	a.t.Helper()
	if err := a.kill(); err != nil {
		a.t.Fatal(err)
	}
}

func (a *AppProc) kill() error {
	return a.signalAndWait(syscall.SIGKILL, 30*time.Second)
}

// Stop sends sig to the process and waits up to timeout for it to exit;
// it fails the test if the process does not exit, or exits with an error.
func (a *AppProc) Stop(sig syscall.Signal, timeout time.Duration) {
	a.t.Helper()
	if err := a.signalAndWait(sig, timeout); err != nil {
		a.t.Fatal(err)
	}
	a.mu.Lock()
	err := a.waitErr
	a.mu.Unlock()
	if err != nil {
		a.t.Fatalf("%s exited with %v after %s; its log %s ends: %s", a.Name, err, sig, a.LogPath, tail(a.LogPath, 5))
	}
}

func (a *AppProc) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	if cmd == nil {
		a.mu.Unlock()
		return nil
	}
	a.expected = true
	a.mu.Unlock()
	if !isClosed(exited) {
		cmd.Process.Signal(sig) // an error means it exited already; it is still reaped
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s (pid %d) not reaped %s after %s", a.Name, cmd.Process.Pid, timeout, sig)
	}
}

// Signal sends sig to the running process, which is expected to go on.
func (a *AppProc) Signal(sig syscall.Signal) {
	a.t.Helper()
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	if cmd == nil || isClosed(exited) {
		a.t.Fatalf("%s %s: it is not running", sig, a.Name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		a.t.Fatalf("%s %s: %v", sig, a.Name, err)
	}
}

// Starts returns how many lives the slot has started.
func (a *AppProc) Starts() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.starts
}

// Pid returns the process id of the current (or last) life, 0 before
// the first.
func (a *AppProc) Pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// UnexpectedExit returns an error if the process exited without the
// harness killing or stopping it.
func (a *AppProc) UnexpectedExit() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.expected || !isClosed(a.exited) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) exited on its own (%v); its log %s ends: %s",
		a.Name, a.cmd.Process.Pid, a.waitErr, a.LogPath, tail(a.LogPath, 3))
}
