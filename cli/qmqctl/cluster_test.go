package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// runCLI runs qmqctl with args and returns what it printed, on stdout
// and stderr.
func runCLI(args ...string) (string, error) {
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := execute(app, append([]string{"qmqctl"}, args...))
	return out.String(), err
}

// runCLIStatus runs qmqctl with args as its main does, and returns what
// it printed on stdout and on stderr and its exit status.
func runCLIStatus(args ...string) (stdout, stderr string, status int) {
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	status = exitStatus(execute(app, append([]string{"qmqctl"}, args...)), &errOut)
	return out.String(), errOut.String(), status
}

// startCluster starts a one-node metaserver group and two one-node broker
// groups, g1 and g2, registered with it (a new subject lives in both), and
// returns the metaserver's client address once both groups are available.
func startCluster(t *testing.T) string {
	t.Helper()
	m := testcluster.Meta(t, nil)
	for _, g := range []string{"g1", "g2"} {
		testcluster.Broker(t, testcluster.Registered(g, m.ClientAddr()))
	}
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var c *admin.Cluster
	done := false
	defer func() { // the last answer, when the wait below failed
		if !done {
			t.Logf("the cluster as last seen: %+v %v", c, err)
		}
	}()
	poll.Until(t, 20*time.Second, "the broker groups to be available", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if c, err = a.Cluster(ctx); err != nil {
			return false
		}
		ready := 0
		for _, g := range c.BrokerGroups {
			if g.Available && g.Writable && g.Leader != "" && len(g.Nodes) == 1 && g.Nodes[0].State == "Leader" {
				ready++
			}
		}
		return ready == 2
	})
	done = true
	return m.ClientAddr()
}

// Against an address where nothing listens, every command fails within a
// few seconds with one line that names the address and says what to
// check; a malformed address fails at once. (consume printed nothing for
// minutes, send took 30 s, status 10 s.)
func TestUnreachableServerFailsFast(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	want := "cannot reach " + addr + ": connection refused: is qmqd running?"
	for _, args := range [][]string{
		{"consume", "--subject", "x", "--group", "g"},
		{"send", "--subject", "x", "hi"},
		{"status"},
		{"subject", "show", "x"},
		{"consumer-group", "list", "--subject", "x"},
		{"status", "--check"},
	} {
		start := time.Now()
		out, err := runCLI(append([]string{"--server", addr}, args...)...)
		if took := time.Since(start); err == nil || plain(err).Error() != "qmq: "+want || took > 10*time.Second {
			t.Errorf("qmqctl %s: %v after %s (printed %q), want an error saying %q within seconds", strings.Join(args, " "), err, took, out, want)
		}
	}
	if _, err := runCLI("--server", "127.0.0.1:99999", "status"); err == nil || !strings.Contains(err.Error(), "malformed server address") {
		t.Errorf("a malformed address: %v", err)
	}
}

// subject forget-group says what it destroys and asks: without --yes and
// without a terminal it refuses and changes nothing; on a terminal it
// goes ahead only on "y". (It forgot groups with live consumers without
// a word, and its help said they start again at the oldest message.)
func TestForgetGroupAsks(t *testing.T) {
	meta := startCluster(t)
	if _, err := runCLI("--server", meta, "send", "--subject", "jobs", "--count", "3", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI("--server", meta, "consume", "--subject", "jobs", "--group", "old", "--count", "1", "--start", "earliest"); err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		out, err := runCLI("--server", meta, "consumer-group", "list", "--subject", "jobs")
		return err == nil && strings.Contains(out, "old")
	}
	forget := []string{"--server", meta, "subject", "forget-group", "--group", "old", "jobs"}
	_, err := runCLI(forget...)
	if err == nil || !strings.Contains(err.Error(), "destroys its position in 2 broker groups") ||
		!strings.Contains(err.Error(), "--yes") || !exists() {
		t.Fatalf("without --yes, no terminal: %v (the group exists: %v)", err, exists())
	}
	stdinIsTerminal = func() bool { return true }
	defer func() { stdinIsTerminal, confirmIn = func() bool { return false }, os.Stdin }()
	confirmIn = strings.NewReader("n\n")
	if _, err := runCLI(forget...); err == nil || !exists() {
		t.Fatalf("answered n: %v (the group exists: %v)", err, exists())
	}
	confirmIn = strings.NewReader("y\n")
	if out, err := runCLI(forget...); err != nil || !strings.Contains(out, "drops its 1 live consumer. Go ahead? [y/N]") || exists() {
		t.Fatalf("answered y: %v, %q (the group exists: %v)", err, out, exists())
	}
	// A group no broker group holds is forgotten too (the metaserver's
	// record of it goes), saying so.
	out, err := runCLI("--server", meta, "subject", "forget-group", "--group", "never", "--yes", "jobs")
	if err != nil || !strings.Contains(out, "consumer group never not known") {
		t.Fatalf("forgetting a group no broker group holds: %v, %q", err, out)
	}
}

// TestVersion: qmqctl --version names the build: its version, and the
// Go release it was built with.
func TestVersion(t *testing.T) {
	out, err := runCLI("--version")
	if err != nil || !strings.HasPrefix(out, "qmqctl version ") || !strings.Contains(out, "go1.") {
		t.Fatalf("qmqctl --version: %v, %q", err, out)
	}
}
