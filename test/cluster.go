// Package test holds multi-process end-to-end tests: real qmqd processes on
// loopback ports, driven by qmqctl and the SDK, killed with SIGKILL and
// restarted from their data.
//
// cluster.go is the reusable harness. A Cluster is one Raft group of
// processes: a broker group or the metaserver group. chaos.go applies faults
// to clusters on a seeded schedule, history.go records what clients did and
// saw and checks it, and replicas.go compares a group's logs across nodes;
// chaos_test.go puts them together (docs/reliability.md). apps.go runs
// application programs (test/internal/orderapp) as killable processes, for
// outbox_faults_test.go, the transactional outbox's end-to-end run.
// release.go builds the previous release's qmqd and qmqctl from the
// repository's history (previousRelease), and nodebinary.go starts a node
// on such a build (UseBinary), with only the flags it knows:
// upgrade_test.go and the chaos run's previous-build fault (chaos_previous.go).
//
//	c := NewCluster(t, "g1", "--election-timeout", "500ms")
//	n1 := c.Start("n1", true)  // qmqd broker … --bootstrap
//	n2 := c.Start("n2", false) // then: c.Join(via, n2), which runs qmqctl join
//	c.WaitFor(10*time.Second, "n1 leads", func() error { … })
//	n1.Kill(); n1.Restart()
//
//	meta := NewMetaGroup(t)                 // qmqd meta nodes
//	meta.Form("", "m1", "m2", "m3")         // bootstrap m1, join the others
//	g1 := NewCluster(t, "g1", "--meta", meta.ClientAddrs())
//	g1.Form(meta.ClientAddrs(), "a", "b", "c") // joined through the metaserver
//
// With UseTLS (before the first node starts) every node serves TLS only,
// with a certificate of a Security of the test's, and the harness talks to
// it over TLS (security.go); without it everything is plaintext.
//
// Every process is started with its own data directory under t.TempDir()
// and its own log file; t.Cleanup SIGKILLs and reaps every process still
// running, and prints the tail of every node's log when the test failed.
// Nothing here sleeps for a fixed time: waits poll each node's /status.
package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/ctljson"
	"github.com/qmqgo/qmq/test/netns"
	"github.com/qmqgo/qmq/test/netproxy"
)

// logTailLines is how much of each node's log a failed test prints.
const logTailLines = 60

// binaries are qmqd and qmqctl, built once per test binary.
var binaries struct {
	once         sync.Once
	dir          string
	qmqd, qmqctl string
	err          error
	took         time.Duration
	removeOnce   sync.Once
}

// Binaries builds qmqd and qmqctl (without -race, whatever the test binary
// was built with) into a temporary directory, once per test binary, and
// returns their paths. RemoveBinaries deletes them (TestMain calls it).
func Binaries(t testing.TB) (qmqd, qmqctl string) {
	t.Helper()
	b := &binaries
	b.once.Do(func() {
		start := time.Now()
		defer func() { b.took = time.Since(start) }()
		var err error
		if b.dir, err = os.MkdirTemp("", "qmq-e2e-bin-"); err != nil {
			b.err = err
			return
		}
		if b.err = goBuild(b.dir, "./cli/qmqd", "./cli/qmqctl"); b.err != nil {
			return
		}
		b.qmqd, b.qmqctl = filepath.Join(b.dir, "qmqd"), filepath.Join(b.dir, "qmqctl")
	})
	if b.err != nil {
		t.Fatalf("building qmqd and qmqctl: %v", b.err)
	}
	return b.qmqd, b.qmqctl
}

// goBuild builds the packages pkgs (paths from the module's root) into
// dir, without -race whatever the test binary was built with.
func goBuild(dir string, pkgs ...string) error {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", strings.Join(pkgs, " "), root, err, out)
	}
	return nil
}

// RemoveBinaries deletes the binaries Binaries built, if any.
func RemoveBinaries() {
	binaries.removeOnce.Do(func() {
		if binaries.dir != "" {
			os.RemoveAll(binaries.dir)
		}
	})
}

// usedPorts keeps FreeAddr from handing out a port twice in one test binary.
var usedPorts struct {
	sync.Mutex
	m map[string]bool
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago and
// that this test binary has not handed out before.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return freeAddrOn(t, "127.0.0.1")
}

// nodeIPs hands out loopback IPs, one per proxied node.
var nodeIPs struct {
	sync.Mutex
	next int
}

// nextNodeIP returns a loopback IP no other node of this test binary has:
// 127.0.0.2, 127.0.0.3, …
func nextNodeIP(t testing.TB) string {
	nodeIPs.Lock()
	defer nodeIPs.Unlock()
	if nodeIPs.next >= 250 {
		t.Fatal("out of loopback IPs for nodes")
	}
	nodeIPs.next++
	return fmt.Sprintf("127.0.0.%d", nodeIPs.next+1)
}

func freeAddrOn(t testing.TB, ip string) string {
	t.Helper()
	usedPorts.Lock()
	defer usedPorts.Unlock()
	if usedPorts.m == nil {
		usedPorts.m = map[string]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("allocating a port: %v", err)
		}
		addr := l.Addr().String()
		l.Close()
		if !usedPorts.m[addr] {
			usedPorts.m[addr] = true
			return addr
		}
	}
	t.Fatal("allocating a port: no unused port after 100 tries")
	return ""
}

// Cluster is a set of qmqd processes of one Raft group.
type Cluster struct {
	t      testing.TB
	Group  string
	meta   bool     // a metaserver group: `qmqd meta` processes
	flags  []string // appended to every `qmqd broker` command line
	dir    string
	qmqd   string
	qmqctl string
	http   *http.Client
	sec    *Security // nil: plaintext (UseTLS)

	mu         sync.Mutex
	nodes      []*Node
	proxied    bool                // nodes get an IP of their own and proxies in front (UseProxies)
	smallDisk  int64               // the size of every node's data disk (UseSmallDisks); 0: the machine's
	tmpfs      bool                // the small disks are tmpfs mounts
	syncFaults bool                // broker nodes get a sync fault file (UseSyncFaults)
	nodeFlags  map[string][]string // flags of one node's own (SetNodeFlags), by id
	hosts      *netns.Network      // every node on a host of its own (UseHosts); nil: loopback
	nodeBins   map[string]string   // the qmqd a node starts on, if not this build's (SetNodeBinary), by id
}

// UseProxies gives every node started from now on a loopback IP of its own,
// from which it also dials its peers, and a Proxy in front of its client
// and Raft ports: ClientAddr and RaftAddr are the proxies', the node
// listens behind them. Partitions and added latency then act on the
// proxies (Node.ClientProxy, Node.RaftProxy).
func (c *Cluster) UseProxies() { c.proxied = true }

// UseTLS makes the cluster's nodes serve TLS only, each with a node
// certificate of sec valid for every IP it is dialled at (its proxies'
// too) and --tls-client-auth request; Ctl and CtlJSON then connect with
// the operator's certificate, and Status reads /status over https. It
// must come before the first node starts.
func (c *Cluster) UseTLS(sec *Security) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.nodes) > 0 {
		c.t.Fatalf("%s: UseTLS after %d nodes started", c.Group, len(c.nodes))
	}
	c.sec, c.http = sec, sec.httpClient()
}

// UseSyncFaults gives every broker node started from now on a sync fault
// file (qmqd --sync-fault-file), which Node.FailSyncs fills.
func (c *Cluster) UseSyncFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncFaults = true
}

// SetNodeFlags gives node id flags of its own, added after the cluster's
// (NewCluster's) at every start: nodes of one group started with
// different flags. It must come before the node starts.
func (c *Cluster) SetNodeFlags(id string, flags ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodeFlags == nil {
		c.nodeFlags = map[string][]string{}
	}
	c.nodeFlags[id] = flags
}

// Security is what UseTLS gave the cluster: nil for plaintext. Its
// methods work on nil, so a client of the cluster connects with
// c.Security().ConnOption() either way.
func (c *Cluster) Security() *Security { return c.sec }

// Node is one qmqd process slot: its addresses and data survive Kill and
// Restart.
type Node struct {
	ID         string
	ClientAddr string
	RaftAddr   string
	HTTPAddr   string
	DataDir    string
	LogPath    string
	// With proxies (Cluster.UseProxies): the node's own loopback IP, the
	// addresses it listens on behind its proxies, and the proxies.
	IP                     string
	ClientBind, RaftBind   string
	ClientProxy, RaftProxy *netproxy.Proxy
	// Host, with Cluster.UseHosts, is the network namespace the node runs
	// in (hosts.go); IP is then its address.
	Host *netns.Host
	// ClockFile, for a proxied broker node, holds an offset added to its
	// clock (SetClockOffset).
	ClockFile string
	// DiskFreeFile, for a node on a small disk (UseSmallDisks), caps the
	// free space the node sees: how its disk fills where there is no tmpfs
	// (FillDisk), and CapDiskFree's cap on any.
	DiskFreeFile string
	// SyncFaultFile, for a broker node of a cluster with UseSyncFaults,
	// fails its checkpoint syncs while it holds EIO (FailSyncs).
	SyncFaultFile string
	mounted       bool // a tmpfs is mounted on DataDir
	// TLS, with UseTLS, is the node's certificate, its key and the CA.
	TLS qmq.TLSFiles

	c         *Cluster
	bootstrap bool // only the first start passes --bootstrap

	// Guarded by c.mu.
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd is reaped
	waitErr error         // cmd.Wait's answer; read after exited is closed
	killed  bool          // the harness killed it: exiting is expected
	starts  int
}

// NewCluster returns an empty cluster of group; flags are added to every
// node's command line (e.g. "--election-timeout", "500ms").
func NewCluster(t testing.TB, group string, flags ...string) *Cluster {
	t.Helper()
	qmqd, qmqctl := Binaries(t)
	t.Logf("qmqd and qmqctl built in %s (once per test binary)", binaries.took.Round(time.Millisecond))
	// TempDir first: cleanups run last-in first-out, so every process is
	// dead before its directory is removed.
	c := &Cluster{t: t, Group: group, flags: flags, dir: t.TempDir(), qmqd: qmqd, qmqctl: qmqctl,
		http: (*Security)(nil).httpClient()}
	t.Cleanup(c.cleanup)
	return c
}

// NewMetaGroup returns an empty metaserver group; flags are added to every
// node's command line.
func NewMetaGroup(t testing.TB, flags ...string) *Cluster {
	t.Helper()
	c := NewCluster(t, admin.MetaGroup, flags...)
	c.meta = true
	return c
}

// cleanup SIGKILLs and reaps every process, then prints the logs' tails if
// the test failed.
func (c *Cluster) cleanup() {
	c.mu.Lock()
	nodes := append([]*Node(nil), c.nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		if err := n.kill(); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
		if err := n.unmount(); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
	c.http.CloseIdleConnections()
	if c.t.Failed() {
		for _, n := range nodes {
			c.t.Logf("---- last %d lines of %s (%s) ----\n%s", logTailLines, n.ID, n.LogPath, tail(n.LogPath, logTailLines))
		}
	}
}

// tail returns the last lines of a file.
func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}

// Start starts a new node id with fresh addresses and an empty data
// directory; bootstrap passes --bootstrap.
func (c *Cluster) Start(id string, bootstrap bool) *Node {
	c.t.Helper()
	if c.Node(id) != nil {
		c.t.Fatalf("node %s already exists", id)
	}
	n := &Node{
		ID: id, ClientAddr: FreeAddr(c.t), RaftAddr: FreeAddr(c.t), HTTPAddr: FreeAddr(c.t),
		DataDir: filepath.Join(c.dir, id, "data"), LogPath: filepath.Join(c.dir, id, "qmqd.log"),
		c: c, bootstrap: bootstrap,
	}
	if c.proxied {
		n.proxy()
	}
	if c.hosts != nil {
		n.onHost()
	}
	if c.sec != nil {
		n.TLS = c.sec.NodeCert(c.Group+"-"+id, n.addrs()...)
	}
	if err := os.MkdirAll(filepath.Dir(n.LogPath), 0o755); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	size := c.smallDisk
	if c.syncFaults && !c.meta {
		n.SyncFaultFile = filepath.Join(filepath.Dir(n.LogPath), "sync-fault")
	}
	c.mu.Unlock()
	if size > 0 {
		n.smallDisk(size)
	}
	n.start()
	return n
}

// proxy gives the node its own IP and puts proxies in front of its ports;
// they live as long as the test.
func (n *Node) proxy() {
	t := n.c.t
	n.IP = nextNodeIP(t)
	n.HTTPAddr = freeAddrOn(t, n.IP)
	n.ClientBind, n.RaftBind = freeAddrOn(t, n.IP), freeAddrOn(t, n.IP)
	var err error
	if n.ClientProxy, err = netproxy.New(freeAddrOn(t, n.IP), n.ClientBind); err != nil {
		t.Fatalf("proxy for %s: %v", n.ID, err)
	}
	if n.RaftProxy, err = netproxy.New(freeAddrOn(t, n.IP), n.RaftBind); err != nil {
		t.Fatalf("proxy for %s: %v", n.ID, err)
	}
	n.ClientAddr, n.RaftAddr = n.ClientProxy.Addr(), n.RaftProxy.Addr()
	if !n.c.meta {
		n.ClockFile = filepath.Join(filepath.Dir(n.LogPath), "clock-offset")
	}
	t.Cleanup(func() {
		n.ClientProxy.Close()
		n.RaftProxy.Close()
	})
}

// addrs are every address the node listens or is dialled at.
func (n *Node) addrs() []string {
	var out []string
	for _, a := range []string{n.ClientAddr, n.RaftAddr, n.HTTPAddr, n.ClientBind, n.RaftBind} {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// SetClockOffset makes the proxied broker node's clock read d ahead of
// the machine's (behind, for a negative d) within 100 ms.
func (n *Node) SetClockOffset(d time.Duration) {
	n.c.t.Helper()
	if n.ClockFile == "" {
		n.c.t.Fatalf("node %s has no clock offset file (a proxied broker node has)", n.ID)
	}
	if err := os.WriteFile(n.ClockFile, []byte(d.String()), 0o644); err != nil {
		n.c.t.Fatal(err)
	}
}

// Node returns the node named id, or nil.
func (c *Cluster) Node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Nodes returns every node started, in start order.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// ClientAddrs returns every node's client address, comma-separated: the
// server list the SDK and qmqctl take.
func (c *Cluster) ClientAddrs() string {
	var addrs []string
	for _, n := range c.Nodes() {
		addrs = append(addrs, n.ClientAddr)
	}
	return strings.Join(addrs, ",")
}

// Args returns the node's qmqd command line (without the binary).
func (n *Node) Args() []string {
	args := []string{"broker", "--broker-group", n.c.Group}
	if n.c.meta {
		args = []string{"meta"}
	}
	if n.IP != "" {
		args = append(args, "--id", n.ID, "--data", n.DataDir, "--listen", n.ClientBind, "--advertise", n.ClientAddr,
			"--raft", n.RaftBind, "--raft-advertise", n.RaftAddr, "--http", n.HTTPAddr, "--source-ip", n.IP)
		if n.ClockFile != "" {
			args = append(args, "--clock-offset-file", n.ClockFile)
		}
	} else {
		args = append(args, "--id", n.ID, "--data", n.DataDir, "--listen", n.ClientAddr, "--raft", n.RaftAddr, "--http", n.HTTPAddr)
	}
	if n.DiskFreeFile != "" {
		args = append(args, "--disk-free-file", n.DiskFreeFile)
	}
	if n.SyncFaultFile != "" {
		args = append(args, "--sync-fault-file", n.SyncFaultFile)
	}
	args = append(args, n.c.sec.NodeArgs(n.TLS)...)
	args = append(args, n.hostArgs()...)
	n.c.mu.Lock()
	first := n.starts == 0
	own := n.c.nodeFlags[n.ID]
	n.c.mu.Unlock()
	if n.bootstrap && first {
		args = append(args, "--bootstrap")
	}
	return append(append(args, n.c.flags...), own...)
}

func (n *Node) start() {
	t := n.c.t
	t.Helper()
	bin, args := n.binaryArgs()
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "==== %s harness: start: qmqd %s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "))
	cmd := n.command(bin, args)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = dieWithParent()
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.cmd != nil && !isClosed(n.exited) {
		t.Fatalf("node %s is already running (pid %d)", n.ID, n.cmd.Process.Pid)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node %s: %v", n.ID, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.killed = cmd, exited, false
	n.starts++
	go func() {
		err := cmd.Wait()
		n.c.mu.Lock()
		if n.exited == exited {
			n.waitErr = err
		}
		n.c.mu.Unlock()
		close(exited)
	}()
}

// dieWithParent makes the kernel SIGKILL a child when the test process
// dies, so that a test binary killed mid-run (a timeout, ^C) leaves no
// server running.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the node and waits until the process is reaped.
func (n *Node) Kill() {
	n.c.t.Helper()
	if err := n.kill(); err != nil {
		n.c.t.Fatal(err)
	}
}

func (n *Node) kill() error {
	n.c.mu.Lock()
	cmd, exited := n.cmd, n.exited
	if cmd == nil {
		n.c.mu.Unlock()
		return nil
	}
	n.killed = true
	n.c.mu.Unlock()
	if !isClosed(exited) {
		// An error here means it already exited; Wait still reaps it.
		cmd.Process.Kill()
	}
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node %s (pid %d) not reaped 30s after SIGKILL", n.ID, cmd.Process.Pid)
	}
}

// ExpectExit tells the harness that the node is about to stop by itself
// (fail-stop): its exit then fails no wait (WaitFor), as a kill does not.
// Restart clears it.
func (n *Node) ExpectExit() {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.killed = true
}

// AwaitExit waits up to timeout for the node's process to exit; exited is
// false if it still ran then, else err is how it exited (cmd.Wait's
// answer: nil for status 0).
func (n *Node) AwaitExit(timeout time.Duration) (exited bool, err error) {
	n.c.mu.Lock()
	done := n.exited
	n.c.mu.Unlock()
	if done == nil {
		return true, nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		return false, nil
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return true, n.waitErr
}

// FailSyncs makes the broker node's checkpoint syncs fail with EIO (on)
// from its next sync on, or succeed again (qmqd --sync-fault-file, which
// the node reads at each sync; UseSyncFaults).
func (n *Node) FailSyncs(on bool) {
	n.c.t.Helper()
	if n.SyncFaultFile == "" {
		n.c.t.Fatalf("node %s has no sync fault file (UseSyncFaults)", n.ID)
	}
	var b []byte
	if on {
		b = []byte("EIO")
	}
	if err := os.WriteFile(n.SyncFaultFile, b, 0o644); err != nil {
		n.c.t.Fatal(err)
	}
}

// LogSinceStart returns what the node's current (or last) process wrote
// to its log: the log file from the harness's last start line on.
func (n *Node) LogSinceStart() string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return err.Error()
	}
	s := string(b)
	if i := strings.LastIndex(s, " harness: start: "); i >= 0 {
		return s[strings.LastIndex(s[:i], "\n")+1:]
	}
	return s
}

// Pause stops the node's process with SIGSTOP: it is alive but answers
// nothing, as a node whose disk or machine hangs. Resume continues it.
func (n *Node) Pause() { n.signal(syscall.SIGSTOP) }

// Resume continues a paused node with SIGCONT.
func (n *Node) Resume() { n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) {
	n.c.t.Helper()
	n.c.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.c.mu.Unlock()
	if cmd == nil || isClosed(exited) {
		n.c.t.Fatalf("%s %s: it is not running", sig, n.ID)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		n.c.t.Fatalf("%s %s: %v", sig, n.ID, err)
	}
}

// Restart starts the killed node again: same flags, addresses and data,
// without --bootstrap.
func (n *Node) Restart() {
	n.c.t.Helper()
	n.c.mu.Lock()
	running := n.cmd != nil && !isClosed(n.exited)
	n.c.mu.Unlock()
	if running {
		n.c.t.Fatalf("restart %s: it is still running", n.ID)
	}
	n.c.t.Logf("restarting %s", n.ID)
	n.start()
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.cmd != nil && !isClosed(n.exited)
}

// Pid returns the process id of the node's current (or last) process.
func (n *Node) Pid() int {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// unexpectedExit returns an error if the node's process exited without the
// harness killing it.
func (n *Node) unexpectedExit() error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.cmd == nil || n.killed || !isClosed(n.exited) {
		return nil
	}
	return fmt.Errorf("node %s (pid %d) exited on its own (%v); its log %s ends: %s",
		n.ID, n.cmd.Process.Pid, n.waitErr, n.LogPath, tail(n.LogPath, 1))
}

// Status fetches the node's /status over HTTP (https with UseTLS).
func (n *Node) Status() (*admin.Status, error) {
	resp, err := n.c.http.Get(n.c.sec.scheme() + "://" + n.HTTPAddr + "/status")
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node %s: /status answered %s", n.ID, resp.Status)
	}
	var st admin.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("node %s: decoding /status: %w", n.ID, err)
	}
	return &st, nil
}

// Statuses fetches the status of every running node, by id; it fails if any
// running node does not answer.
func (c *Cluster) Statuses() (map[string]*admin.Status, error) {
	out := map[string]*admin.Status{}
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		st, err := n.Status()
		if err != nil {
			return nil, err
		}
		out[n.ID] = st
	}
	return out, nil
}

// Leader returns the running node that reports itself leader with the
// highest term, or an error if none does.
func (c *Cluster) Leader() (*Node, *admin.Status, error) {
	var best *Node
	var bestSt *admin.Status
	var errs []error
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		st, err := n.Status()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.State == "Leader" && (bestSt == nil || st.Term > bestSt.Term) {
			best, bestSt = n, st
		}
	}
	if best == nil {
		if len(errs) > 0 {
			return nil, nil, fmt.Errorf("no running node reports itself leader: %w", errors.Join(errs...))
		}
		return nil, nil, errors.New("no running node reports itself leader")
	}
	return best, bestSt, nil
}

// Converged checks that every running node answers, all name the same
// leader, that leader is running and says so itself, and all report the
// same applied index; it returns the statuses.
func (c *Cluster) Converged() (map[string]*admin.Status, error) {
	sts, err := c.Statuses()
	if err != nil {
		return nil, err
	}
	if len(sts) == 0 {
		return nil, errors.New("no node is running")
	}
	var leader string
	var applied uint64
	first := true
	for _, st := range sts {
		if first {
			leader, applied, first = st.Leader, st.AppliedIndex, false
		}
		if st.Leader == "" || st.Leader != leader || st.AppliedIndex != applied {
			return sts, fmt.Errorf("not converged: %s", Describe(sts))
		}
	}
	if ls := sts[leader]; ls == nil || ls.State != "Leader" {
		return sts, fmt.Errorf("leader %s is not running or does not lead: %s", leader, Describe(sts))
	}
	return sts, nil
}

// Describe summarises statuses on one line, sorted by id.
func Describe(sts map[string]*admin.Status) string {
	ids := make([]string, 0, len(sts))
	for id := range sts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		st := sts[id]
		fmt.Fprintf(&b, "[%s %s leader=%q term=%d commit=%d applied=%d last=%d members=%d] ",
			id, st.State, st.Leader, st.Term, st.CommitIndex, st.AppliedIndex, st.LastIndex, len(st.Members))
	}
	return strings.TrimSpace(b.String())
}

// Ctl runs qmqctl with args (bounded by 30 s) and returns its combined
// output. With UseTLS it connects with the operator's certificate.
func (c *Cluster) Ctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(c.sec.CtlArgs(), args...)
	out, err := exec.CommandContext(ctx, c.qmqctl, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("qmqctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// CtlJSON runs qmqctl with args and --json (bounded by 30 s) and decodes
// what it printed on its standard output into out (its durations, Go
// duration strings, included). With UseTLS it
// connects with the operator's certificate.
func (c *Cluster) CtlJSON(out any, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(append(c.sec.CtlArgs(), args...), "--json")
	cmd := exec.CommandContext(ctx, c.qmqctl, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("qmqctl %s: %w\n%s%s", strings.Join(args, " "), err, b, stderr.String())
	}
	if err := ctljson.Decode(b, out); err != nil {
		return fmt.Errorf("qmqctl %s: decoding %q: %w", strings.Join(args, " "), b, err)
	}
	return nil
}

// Join adds node n to the group with `qmqctl --server via join …`.
func (c *Cluster) Join(via string, n *Node) {
	c.t.Helper()
	if err := c.join(via, n); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) join(via string, n *Node) error {
	_, err := c.Ctl("--server", via, "join", "--broker-group", c.Group, "--id", n.ID, "--raft", n.RaftAddr, "--addr", n.ClientAddr)
	return err
}

// Poll calls cond every 20 ms until it returns nil or timeout passes; it
// then returns cond's last error. Safe on any goroutine.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor polls cond until it returns nil; the test fails (naming what was
// awaited and cond's last error) if timeout passes first, or at once if a
// node dies without the harness killing it. Call it on the test goroutine.
func (c *Cluster) WaitFor(timeout time.Duration, what string, cond func() error) {
	c.t.Helper()
	start := time.Now()
	var exitErr error
	err := Poll(timeout, func() error {
		for _, n := range c.Nodes() {
			if exitErr = n.unexpectedExit(); exitErr != nil {
				return nil // stop polling
			}
		}
		return cond()
	})
	switch {
	case exitErr != nil:
		c.t.Fatalf("waiting for %s: %v", what, exitErr)
	case err != nil:
		c.t.Fatalf("waiting for %s: not true after %s: %v", what, timeout, err)
	}
	c.t.Logf("%s (after %s)", what, time.Since(start).Round(time.Millisecond))
}

// Form starts the group's nodes: the first bootstraps, the others join
// with qmqctl through via (a metaserver address; "" for the first node's
// own address). It returns once every node reports the same leader, all
// members and the same applied index.
func (c *Cluster) Form(via string, ids ...string) []*Node {
	c.t.Helper()
	first := c.Start(ids[0], true)
	c.WaitFor(20*time.Second, c.Group+": "+first.ID+" leads and reports its leader_addr", func() error {
		st, err := first.Status()
		if err != nil {
			return err
		}
		if st.State != "Leader" || st.LeaderAddr == "" {
			return fmt.Errorf("%s: state %s, leader_addr %q", first.ID, st.State, st.LeaderAddr)
		}
		return nil
	})
	if via == "" {
		via = first.ClientAddr
	}
	nodes := []*Node{first}
	for _, id := range ids[1:] {
		n := c.Start(id, false)
		c.WaitFor(20*time.Second, n.ID+" answers /status", func() error { _, err := n.Status(); return err })
		// Through a metaserver, the join fails until the group's first node
		// has registered; joining is idempotent, so retry it.
		c.WaitFor(20*time.Second, "qmqctl join "+n.ID, func() error { return c.join(via, n) })
		nodes = append(nodes, n)
	}
	c.WaitFor(20*time.Second, fmt.Sprintf("%s: all %d nodes agree", c.Group, len(ids)), func() error {
		sts, err := c.Converged()
		if err != nil {
			return err
		}
		for id, st := range sts {
			if len(st.Members) != len(ids) {
				return fmt.Errorf("%s knows %d members: %s", id, len(st.Members), Describe(sts))
			}
		}
		return nil
	})
	return nodes
}
