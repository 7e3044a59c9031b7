package main

import (
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/server"
)

// nodeConfigOf runs a command of nodeFlags with args after the required
// flags, and returns the NodeConfig it reads.
func nodeConfigOf(t *testing.T, args ...string) server.NodeConfig {
	t.Helper()
	var cfg server.NodeConfig
	app := &cli.App{Name: "qmqd", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{{
		Name:   "broker",
		Flags:  nodeFlags("the group"),
		Action: func(c *cli.Context) error { cfg = nodeConfig(c); return nil },
	}}}
	base := []string{"qmqd", "broker", "--id", "n1", "--data", "d", "--listen", "127.0.0.1:1", "--raft", "127.0.0.1:2"}
	if err := app.Run(append(base, args...)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestTLSFlags: the --tls-* flags, or QMQ_TLS_* where a flag is not
// given, reach the node's config; the client auth mode goes with the
// files, and given without them it is refused.
func TestTLSFlags(t *testing.T) {
	if got := nodeConfigOf(t).TLS; got != (server.TLSConfig{}) {
		t.Fatalf("no flags: %+v, want TLS off", got)
	}
	files := []string{"--tls-ca", "ca.pem", "--tls-cert", "n1.pem", "--tls-key", "n1-key.pem"}
	want := server.TLSConfig{CAFile: "ca.pem", CertFile: "n1.pem", KeyFile: "n1-key.pem", ClientAuth: "require"}
	if got := nodeConfigOf(t, files...).TLS; got != want {
		t.Fatalf("the files: %+v, want %+v", got, want)
	}
	want.ClientAuth = "none"
	if got := nodeConfigOf(t, append(files, "--tls-client-auth", "none")...).TLS; got != want {
		t.Fatalf("with none: %+v, want %+v", got, want)
	}

	t.Setenv("QMQ_TLS_CA", "env-ca.pem")
	t.Setenv("QMQ_TLS_CERT", "env-n1.pem")
	t.Setenv("QMQ_TLS_KEY", "env-n1-key.pem")
	t.Setenv("QMQ_TLS_CLIENT_AUTH", "request")
	want = server.TLSConfig{CAFile: "env-ca.pem", CertFile: "env-n1.pem", KeyFile: "env-n1-key.pem", ClientAuth: "request"}
	if got := nodeConfigOf(t).TLS; got != want {
		t.Fatalf("QMQ_TLS_*: %+v, want %+v", got, want)
	}
	want.CAFile, want.ClientAuth = "ca.pem", "require"
	if got := nodeConfigOf(t, "--tls-ca", "ca.pem", "--tls-client-auth", "require").TLS; got != want {
		t.Fatalf("flags over QMQ_TLS_*: %+v, want %+v", got, want)
	}

	for _, env := range []string{"QMQ_TLS_CA", "QMQ_TLS_CERT", "QMQ_TLS_KEY", "QMQ_TLS_CLIENT_AUTH"} {
		t.Setenv(env, "") // restored when the test ends
		os.Unsetenv(env)
	}
	cfg := server.DefaultMetaConfig()
	cfg.NodeConfig = nodeConfigOf(t, "--tls-client-auth", "none")
	if err := cfg.Validate(); !errors.Is(err, server.ErrTLSConfig) {
		t.Fatalf("--tls-client-auth without the files: %v, want %v", err, server.ErrTLSConfig)
	}
}

// TestTLSFlagsOnEveryNodeCommand: meta, broker and dev take the four TLS
// flags with their environment variables.
func TestTLSFlagsOnEveryNodeCommand(t *testing.T) {
	env := map[string]string{"tls-cert": "QMQ_TLS_CERT", "tls-key": "QMQ_TLS_KEY", "tls-ca": "QMQ_TLS_CA", "tls-client-auth": "QMQ_TLS_CLIENT_AUTH"}
	for _, cmd := range nodeCommands() {
		for name, v := range env {
			i := slices.IndexFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), name) })
			if i < 0 {
				t.Errorf("qmqd %s has no --%s", cmd.Name, name)
				continue
			}
			if f, ok := cmd.Flags[i].(*cli.StringFlag); !ok || !slices.Equal(f.EnvVars, []string{v}) {
				t.Errorf("qmqd %s --%s: not a string flag read from %s", cmd.Name, name, v)
			}
		}
	}
}

// TestInsecureFlag: --insecure reaches the node's config on meta, broker
// and dev, and nothing in the environment sets it.
func TestInsecureFlag(t *testing.T) {
	for _, env := range []string{"QMQ_INSECURE", "INSECURE", "QMQD_INSECURE"} {
		t.Setenv(env, "true")
	}
	if nodeConfigOf(t).Insecure {
		t.Fatal("no --insecure: the config is insecure")
	}
	if !nodeConfigOf(t, "--insecure").Insecure {
		t.Fatal("--insecure does not reach the config")
	}
	for _, cmd := range nodeCommands() {
		i := slices.IndexFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "insecure") })
		if i < 0 {
			t.Errorf("qmqd %s has no --insecure", cmd.Name)
			continue
		}
		if f, ok := cmd.Flags[i].(*cli.BoolFlag); !ok || len(f.EnvVars) != 0 {
			t.Errorf("qmqd %s --insecure: not a bool flag without environment variables", cmd.Name)
		}
	}
}

// TestDevOffLoopbackNeedsInsecure: qmqd dev given an address that is not
// on loopback refuses to start without TLS or --insecure.
func TestDevOffLoopbackNeedsInsecure(t *testing.T) {
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	err := app.Run([]string{"qmqd", "dev", "--data", t.TempDir(), "--meta-listen", "0.0.0.0:0"})
	if !errors.Is(err, server.ErrInsecure) {
		t.Fatalf("dev --meta-listen 0.0.0.0:0: %v, want %v", err, server.ErrInsecure)
	}
}

// nodeCommands are qmqd's commands that run a node: all but restore,
// which only writes a data directory.
func nodeCommands() []*cli.Command {
	return slices.DeleteFunc(newApp().Commands, func(c *cli.Command) bool { return c.Name == "restore" })
}
