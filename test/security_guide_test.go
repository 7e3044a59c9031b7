package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecurityGuide follows docs/security.md's walkthrough as written: it
// runs every command of its shell blocks in order, expects each command
// the guide shows refused to fail with the text it shows, and every other
// to succeed; then checks what the guide promises of its output and of
// the secret files.
func TestSecurityGuide(t *testing.T) {
	steps := guideSteps(t, "../docs/security.md", "## Walkthrough: a TLS cluster with applications", "")
	if len(steps) < 19 {
		t.Fatalf("found %d commands in the walkthrough, expected all of it", len(steps))
	}
	g := newGuide(t)
	g.run(steps)
	all := strings.Join(g.outputs, "\n")
	for _, want := range []string{"order 1", "billing", "ops"} {
		if !strings.Contains(all, want) {
			t.Errorf("the guide's commands never printed %q", want)
		}
	}
	for _, f := range []string{"ops.secret", "billing.secret", "billing.secret.new"} {
		fi, err := os.Stat(filepath.Join(g.dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}
