package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersion: qmqd --version names the build: its version, and the Go
// release it was built with.
func TestVersion(t *testing.T) {
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	if err := app.Run([]string{"qmqd", "--version"}); err != nil || !strings.HasPrefix(out.String(), "qmqd version ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("qmqd --version: %v, %q", err, out.String())
	}
}
