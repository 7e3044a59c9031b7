package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMain runs qmqctl's main instead of the tests when the test binary is
// started as qmqctl (mainEnv set): the tests that need a process of its
// own (its exit status, a signal, a shell's completion) start it.
func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const mainEnv = "QMQCTL_TEST_RUN_MAIN"

// qmqctlCommand is qmqctl as a process of its own: the test binary with
// mainEnv set.
func qmqctlCommand(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	return cmd
}

// qmqctlOnPath puts a program named qmqctl that runs qmqctl's main in a
// directory of the test's and returns it, for a shell to find on $PATH.
func qmqctlOnPath(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\n" + mainEnv + "=1 exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "qmqctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
