package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runCredentials runs qmqctl with args before a probe command that reads
// the credentials every command connects with.
func runCredentials(t *testing.T, args ...string) (app, secret string, err error) {
	t.Helper()
	a := newApp()
	a.Commands = append(a.Commands, &cli.Command{Name: "probe", Action: func(c *cli.Context) error {
		app, secret, _ = appCredentials(c)
		return nil
	}})
	a.Writer, a.ErrWriter = &strings.Builder{}, &strings.Builder{}
	err = a.Run(append(append([]string{"qmqctl"}, args...), "probe"))
	return app, secret, err
}

// TestAppFlags: --app with --secret, --secret-file or their environment
// variables names the application every command works for; a secret
// without --app, --app without a secret, both secrets, or a file that
// cannot be read fail before the command runs.
func TestAppFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "billing.secret")
	if err := os.WriteFile(file, []byte("qmqs_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args         []string
		app, secret  string
		errSubstring string
	}{
		{nil, "", "", ""},
		{[]string{"--app", "billing", "--secret", "qmqs_x"}, "billing", "qmqs_x", ""},
		{[]string{"--app", "billing", "--secret-file", file}, "billing", "qmqs_fromfile", ""},
		{[]string{"--secret", "qmqs_x"}, "", "", "go with --app"},
		{[]string{"--app", "billing"}, "", "", "needs --secret or --secret-file"},
		{[]string{"--app", "billing", "--secret", "a", "--secret-file", file}, "", "", "not both"},
		{[]string{"--app", "billing", "--secret-file", file + ".missing"}, "", "", "--secret-file"},
	} {
		app, secret, err := runCredentials(t, c.args...)
		if c.errSubstring != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSubstring) {
				t.Errorf("%q: %v, want an error saying %q", c.args, err, c.errSubstring)
			}
			continue
		}
		if err != nil || app != c.app || secret != c.secret {
			t.Errorf("%q: %q %q %v, want %q %q", c.args, app, secret, err, c.app, c.secret)
		}
	}
	t.Setenv("QMQ_APP", "env-app")
	t.Setenv("QMQ_SECRET_FILE", file)
	if app, secret, err := runCredentials(t); err != nil || app != "env-app" || secret != "qmqs_fromfile" {
		t.Errorf("from the environment: %q %q %v", app, secret, err)
	}
}
