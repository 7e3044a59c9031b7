package netns

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// needHosts fails the test where namespaces cannot be made, unless
// QMQ_HOSTS=off opts out, which skips it saying so.
func needHosts(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("QMQ_HOSTS") == "off" {
			t.Skipf("QMQ_HOSTS=off: %v", err)
		}
		t.Fatalf("%v (run as root, or set QMQ_HOSTS=off to leave the tests across hosts out)", err)
	}
}

// echo serves one line back for each line on every connection to l.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// rtts dials addr from h and returns n round trips of one byte, sorted.
func rtts(t *testing.T, h *Host, addr string, n int) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := h.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadByte(); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// Two hosts in namespaces of their own: a TCP round trip between them
// crosses the switch and takes twice the links' one-way delay (and never
// less); the test process reaches them as a host too; a host cut off can
// be neither reached nor reach out until its links are restored; and the
// namespaces exist while the network does.
func TestHostsRoundTrip(t *testing.T) {
	needHosts(t)
	n := New(t, 1)
	a, b := n.Host(), n.Host()
	for _, h := range []*Host{a, b} {
		if _, err := os.Stat("/var/run/netns/" + h.Name); err != nil {
			t.Fatalf("host %s has no namespace: %v", h.Name, err)
		}
	}
	l, err := a.Listen("tcp", a.AddrPort(7000))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echo(l)

	// At no configured delay: the switch's own cost.
	base := rtts(t, b, a.AddrPort(7000), 200)
	t.Logf("round trip through the switch at 0 ms: p50 %s, p99 %s", base[len(base)/2], base[len(base)*99/100])
	self := rtts(t, n.Self(), a.AddrPort(7000), 50)
	t.Logf("from the test process's host: p50 %s", self[len(self)/2])
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	go echo(lo)
	loop := rtts(t, n.Self(), lo.Addr().String(), 200)
	t.Logf("on loopback, for comparison: p50 %s, p99 %s", loop[len(loop)/2], loop[len(loop)*99/100])

	n.SetLinks(Link{Delay: 2 * time.Millisecond})
	slow := rtts(t, b, a.AddrPort(7000), 50)
	p50 := slow[len(slow)/2]
	t.Logf("round trip at 2 ms each way: p50 %s, min %s", p50, slow[0])
	if slow[0] < 4*time.Millisecond {
		t.Fatalf("a round trip took %s over links of 2 ms each way (at least 4 ms)", slow[0])
	}
	if p50 > 4*time.Millisecond+base[len(base)/2]+20*time.Millisecond {
		t.Fatalf("round trips at 2 ms each way take %s (median): the switch adds far more than its own cost (%s)", p50, base[len(base)/2])
	}

	// Half a millisecond each way: the switch's clock must keep to it (the
	// runtime's timers, a millisecond coarse when idle, would make it 2 ms).
	n.SetLinks(Link{Delay: 500 * time.Microsecond})
	fine := rtts(t, b, a.AddrPort(7000), 50)
	t.Logf("round trip at 0.5 ms each way: p50 %s, min %s", fine[len(fine)/2], fine[0])
	if p50 := fine[len(fine)/2]; p50 < time.Millisecond || p50 > 1500*time.Microsecond {
		t.Fatalf("round trips at 0.5 ms each way take %s (median), want 1–1.5 ms", p50)
	}

	n.SetLinks(Link{})
	n.Cut(a, true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if c, err := b.Dial(ctx, "tcp", a.AddrPort(7000)); err == nil {
		c.Close()
		t.Fatal("a host cut off accepted a connection")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("dial to a host cut off: %v", err)
	}
	cancel()
	if st := n.Switch().Stats(); st.Cut == 0 {
		t.Fatalf("the cut dropped nothing: %+v", st)
	}
	n.Cut(a, false)
	rtts(t, b, a.AddrPort(7000), 5)
}

// Sweep deletes a namespace of a process that no longer runs and keeps
// one of a process that does (this one's).
func TestSweep(t *testing.T) {
	needHosts(t)
	// A pid above the kernel's maximum never runs.
	dead := prefix + "4194305-h1"
	if err := runAll([]string{"ip", "netns", "add", dead}); err != nil {
		t.Fatal(err)
	}
	n := New(t, 1)
	h := n.Host()
	if _, err := os.Stat("/var/run/netns/" + dead); !os.IsNotExist(err) {
		runAll([]string{"ip", "netns", "del", dead})
		t.Fatalf("New left the stale namespace %s (%v)", dead, err)
	}
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/run/netns/" + h.Name); err != nil {
		t.Fatalf("Sweep deleted %s of a running process: %v", h.Name, err)
	}
}
