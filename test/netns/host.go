package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// prefix starts the name of every namespace this package creates:
// qmqt-<pid>-h<N>, so that runs at once never collide and a run that died
// is recognised by its pid.
const prefix = "qmqt-"

// Network is a test's emulated network: its hosts, the switch between
// them, and the test process's own host (Self).
type Network struct {
	tb     testing.TB
	sw     *Switch
	subnet byte // the X of 10.213.X.0/24
	self   *Host

	mu    sync.Mutex
	hosts []*Host
}

// Host is one network namespace with one TUN device, at 10.213.X.N/24.
type Host struct {
	Name string     // the namespace: qmqt-<pid>-h<N>; "" for Self
	Addr netip.Addr // 10.213.X.N
	net  *Network
}

// Available returns nil if this process can create namespaces and TUN
// devices (root, /dev/net/tun, the ip command), else why not.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: creating network namespaces needs root (running as uid " + strconv.Itoa(os.Geteuid()) + ")")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("netns: no TUN device: %w", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("netns: no ip command (Debian: apt-get install iproute2): %w", err)
	}
	return nil
}

// New creates a network with no host but the test process's own (Self),
// its switch seeded with seed, and removes it when the test ends. It
// first deletes the namespaces of test processes that no longer run. It
// fails the test where Available fails.
func New(tb testing.TB, seed uint64) *Network {
	tb.Helper()
	if err := Available(); err != nil {
		tb.Fatal(err)
	}
	if err := Sweep(); err != nil {
		tb.Fatal(err)
	}
	sw, err := NewSwitch(seed)
	if err != nil {
		tb.Fatal(err)
	}
	n := &Network{tb: tb, sw: sw}
	tb.Cleanup(n.close)
	if err := n.claimSubnet(); err != nil {
		tb.Fatal(err)
	}
	n.self = &Host{Addr: n.addr(254), net: n}
	return n
}

// claimSubnet gives the test process's end of the network the first
// 10.213.X.254/24 no other interface of its namespace has, under a lock
// that serialises the runs that pick at once.
func (n *Network) claimSubnet() error {
	lock, err := os.OpenFile("/run/qmqt.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("netns: locking /run/qmqt.lock: %w", err)
	}
	out, err := run("ip", "-4", "-o", "addr", "show")
	if err != nil {
		return err
	}
	for x := 0; x < 256; x++ {
		if strings.Contains(out, fmt.Sprintf(" 10.213.%d.", x)) {
			continue
		}
		n.subnet = byte(x)
		dev := fmt.Sprintf("qt%dr", os.Getpid())
		tun, err := openTUN(dev)
		if err != nil {
			return err
		}
		if err := n.sw.Attach(n.addr(254), tun); err != nil {
			tun.Close()
			return err
		}
		return runAll(
			[]string{"ip", "addr", "add", n.addr(254).String() + "/24", "dev", dev},
			[]string{"ip", "link", "set", dev, "up"},
		)
	}
	return errors.New("netns: every subnet 10.213.X.0/24 is taken")
}

func (n *Network) addr(host byte) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 213, n.subnet, host})
}

// Self is the test process's own host: its namespace is the machine's,
// its address 10.213.X.254.
func (n *Network) Self() *Host { return n.self }

// Switch is the network's switch, for its Stats and links one by one.
func (n *Network) Switch() *Switch { return n.sw }

// Hosts returns every host made by Host, in order.
func (n *Network) Hosts() []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Host(nil), n.hosts...)
}

// Host creates a new host: the namespace qmqt-<pid>-h<N>, with lo and a
// TUN device at 10.213.X.N/24 up, attached to the switch.
func (n *Network) Host() *Host {
	n.tb.Helper()
	n.mu.Lock()
	i := len(n.hosts) + 1
	if i > 250 {
		n.mu.Unlock()
		n.tb.Fatal("netns: at most 250 hosts")
	}
	h := &Host{Name: fmt.Sprintf("%s%d-h%d", prefix, os.Getpid(), i), Addr: n.addr(byte(i)), net: n}
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	if err := h.create(fmt.Sprintf("qt%dh%d", os.Getpid(), i)); err != nil {
		n.tb.Fatal(err)
	}
	return h
}

func (h *Host) create(dev string) error {
	if err := runAll([]string{"ip", "netns", "add", h.Name}); err != nil {
		return err
	}
	tun, err := openTUN(dev)
	if err != nil {
		return err
	}
	if err := runAll([]string{"ip", "link", "set", dev, "netns", h.Name}); err != nil {
		tun.Close()
		return err
	}
	if err := h.net.sw.Attach(h.Addr, tun); err != nil {
		tun.Close()
		return err
	}
	in := []string{"ip", "-n", h.Name}
	return runAll(
		append(in, "addr", "add", h.Addr.String()+"/24", "dev", dev),
		append(in, "link", "set", dev, "up"),
		append(in, "link", "set", "lo", "up"),
	)
}

// SetLinks sets the model of every link between two hosts (Self's too)
// that has none of its own.
func (n *Network) SetLinks(l Link) { n.sw.SetDefault(l) }

// SetLink sets the model of the link between a and b, both directions.
func (n *Network) SetLink(a, b *Host, l Link) {
	n.sw.SetLink(a.Addr, b.Addr, l)
	n.sw.SetLink(b.Addr, a.Addr, l)
}

// Cut cuts host h off from every other host, Self included (down), or
// restores its links: a partition of one.
func (n *Network) Cut(h *Host, down bool) {
	for _, o := range append(n.Hosts(), n.self) {
		if o != h {
			n.sw.SetDown(h.Addr, o.Addr, down)
		}
	}
}

// Split cuts (down) or restores every link between a host of a and a
// host of b, leaving the links within each side and to the other hosts.
func (n *Network) Split(a, b []*Host, down bool) {
	for _, x := range a {
		for _, y := range b {
			n.sw.SetDown(x.Addr, y.Addr, down)
		}
	}
}

// close stops the switch (which removes the TUN devices with their last
// descriptor) and deletes the namespaces.
func (n *Network) close() {
	if err := n.sw.Close(); err != nil {
		n.tb.Errorf("netns: closing the switch: %v", err)
	}
	for _, h := range n.Hosts() {
		if err := runAll([]string{"ip", "netns", "del", h.Name}); err != nil {
			n.tb.Errorf("%v", err)
		}
	}
}

// Sweep deletes every namespace qmqt-<pid>-* whose process no longer
// runs: what a test process killed before its cleanup left.
func Sweep() error {
	out, err := run("ip", "netns", "list")
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if p, err := strconv.Atoi(pid); err != nil || p == os.Getpid() || alive(p) {
			continue
		}
		if err := runAll([]string{"ip", "netns", "del", name}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// alive reports whether a process pid exists.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Command returns a command that runs name with args on the host: under
// `ip netns exec`, which enters the namespace and then executes name in
// the same process, so the command's pid is the program's. On Self it
// runs name directly.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	if h.Name == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// AddrPort returns the host's address with port.
func (h *Host) AddrPort(port uint16) string { return netip.AddrPortFrom(h.Addr, port).String() }

// Do runs fn on an OS thread that has entered the host's namespace, and
// returns its error: a socket fn opens belongs to the host for its whole
// life, whichever thread uses it later. The thread is discarded after.
func (h *Host) Do(fn func() error) error {
	if h.Name == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's end then ends the thread, which
		// stays in the host's namespace.
		runtime.LockOSThread()
		ns, err := os.Open("/var/run/netns/" + h.Name)
		if err != nil {
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: entering %s: %w", h.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen listens on the host (Do).
func (h *Host) Listen(network, addr string) (l net.Listener, err error) {
	err = h.Do(func() error {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Dial dials from the host (Do).
func (h *Host) Dial(ctx context.Context, network, addr string) (c net.Conn, err error) {
	err = h.Do(func() error {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// run runs a command, bounded by 30 s, and returns its output.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// runAll runs commands in turn and stops at the first that fails.
func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}
