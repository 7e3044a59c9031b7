package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/testcluster"
)

// TestBenchHostile: against a metaserver with TLS and --auth that takes
// three connections from one address, `bench hostile` holds three of its
// five idle connections (the other two are refused by the limit) and its
// wrong secrets are all refused.
func TestBenchHostile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if out, err := runCLI("tls", "init", "--dir", dir, "--node", "m1=127.0.0.1", "--client", "app"); err != nil {
		t.Fatalf("tls init: %v\n%s", err, out)
	}
	m := testcluster.Meta(t, func(c *server.MetaConfig) {
		c.TLS = server.TLSConfig{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "m1.pem"), KeyFile: filepath.Join(dir, "m1-key.pem")}
		c.Auth, c.ClientLimits.ConnsPerAddr = true, 3
	})
	run := func(args ...string) []int {
		t.Helper()
		out, err := runCLI(append([]string{"--server", m.ClientAddr(), "--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "app.pem"),
			"--tls-key", filepath.Join(dir, "app-key.pem"), "bench", "hostile", "--duration", "1s"}, args...)...)
		if err != nil {
			t.Fatalf("bench hostile: %v\n%s", err, out)
		}
		got := regexp.MustCompile(`hellos refused (\d+), connections held (\d+), refused by a limit (\d+), other errors (\d+)`).FindStringSubmatch(out)
		if got == nil {
			t.Fatalf("bench hostile printed:\n%s", out)
		}
		var n []int
		for _, g := range got[1:] {
			v, _ := strconv.Atoi(g)
			n = append(n, v)
		}
		t.Log(out)
		return n
	}
	// Five idle connections from one address: three held, two refused.
	if n := run("--loops", "0", "--idle", "5"); n[0] != 0 || n[1] != 3 || n[2] != 2 || n[3] != 0 {
		t.Fatalf("five idle connections under a limit of three: refused hellos, held, refused by the limit, other errors = %v", n)
	}
	// Wrong secrets: every one refused UNAUTHENTICATED.
	if n := run("--loops", "2", "--idle", "0"); n[0] == 0 || n[1] != 0 || n[3] != 0 {
		t.Fatalf("wrong secrets in a loop: refused hellos, held, refused by the limit, other errors = %v", n)
	}
}
