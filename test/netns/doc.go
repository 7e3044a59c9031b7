// Package netns runs a test's servers on hosts of their own: Linux network
// namespaces that the test creates, joined by an emulated network whose
// links have a latency, a jitter, a loss rate, an order and a state (up or
// down) of their own.
//
// The machine's kernel has no netem (CONFIG_NET_SCH_NETEM is not set), so
// the network is emulated in userspace: each host has one TUN device, and
// a Switch in the test process reads every IP packet its hosts send and
// writes it to the destination host's TUN after the link's model (link.go)
// has delayed, dropped or reordered it. The test process is a host too (a
// TUN device at .254 in the machine's own namespace), so its clients see
// the same network as the servers. Both ends of every connection are the kernel's
// own TCP stacks; only the wire is emulated.
//
//	net := netns.New(t, seed)        // the switch and the test's own host
//	a, b := net.Host(), net.Host()   // qmqt-<pid>-h1, -h2: 10.213.X.1, .2
//	net.SetLinks(netns.Link{Delay: time.Millisecond, Loss: 0.005})
//	cmd := a.Command("qmqd", …)      // ip netns exec qmqt-<pid>-h1 qmqd …
//	net.Cut(b, true)                 // b's host cut off: a partition
//
// Namespaces are named qmqt-<pid>-h<N> and removed when the test ends
// (t.Cleanup, on failure too); New deletes those of a test process that
// no longer runs. Creating them needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN) and /dev/net/tun: New fails the test with a clear
// message where the machine has neither, and Available says so before.
// The link model and the switch work without root (their tests attach
// in-memory ports).
package netns
