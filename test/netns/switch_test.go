package netns

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/poll"
)

// pipe is an in-memory port: what the test writes to in comes out of the
// switch's Reads, and what the switch Writes arrives on out, stamped.
type pipe struct {
	in     chan []byte
	out    chan arrival
	closed chan struct{}
	once   sync.Once
}

type arrival struct {
	at time.Time
	b  []byte
}

func newPipe() *pipe {
	return &pipe{in: make(chan []byte, 1024), out: make(chan arrival, 1024), closed: make(chan struct{})}
}

func (p *pipe) Read(b []byte) (int, error) {
	select {
	case pkt := <-p.in:
		return copy(b, pkt), nil
	case <-p.closed:
		return 0, errors.New("closed")
	}
}

func (p *pipe) Write(b []byte) (int, error) {
	p.out <- arrival{time.Now(), append([]byte(nil), b...)}
	return len(b), nil
}

func (p *pipe) Close() error { p.once.Do(func() { close(p.closed) }); return nil }

// ipv4 returns a bare IPv4 header from src to dst whose identification
// field carries id.
func ipv4(src, dst netip.Addr, id uint16) []byte {
	b := make([]byte, 20)
	b[0] = 0x45
	b[4], b[5] = byte(id>>8), byte(id)
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return b
}

var hostA, hostB = netip.MustParseAddr("10.213.0.1"), netip.MustParseAddr("10.213.0.2")

func twoPorts(t *testing.T) (*Switch, *pipe, *pipe) {
	s := newSwitch(t)
	a, b := newPipe(), newPipe()
	if err := s.Attach(hostA, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(hostB, b); err != nil {
		t.Fatal(err)
	}
	return s, a, b
}

// newSwitch returns a switch that the test closes when it ends.
func newSwitch(tb testing.TB) *Switch {
	s, err := NewSwitch(1)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func receive(t *testing.T, p *pipe) arrival {
	t.Helper()
	select {
	case a := <-p.out:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no packet arrived within 5s")
		return arrival{}
	}
}

// A packet reaches the port of its destination address, not before the
// link's delay, and only that link's: the way back has its own.
func TestSwitchDelays(t *testing.T) {
	s, a, b := twoPorts(t)
	s.SetLink(hostA, hostB, Link{Delay: 20 * time.Millisecond})
	for i := range 5 {
		sent := time.Now()
		a.in <- ipv4(hostA, hostB, uint16(i))
		got := receive(t, b)
		if d := got.at.Sub(sent); d < 20*time.Millisecond {
			t.Fatalf("packet %d arrived after %s, before the link's 20ms", i, d)
		}
		if id := uint16(got.b[4])<<8 | uint16(got.b[5]); id != uint16(i) {
			t.Fatalf("packet %d arrived as %d", i, id)
		}
	}
	sent := time.Now()
	b.in <- ipv4(hostB, hostA, 9)
	receive(t, a)
	if d := time.Since(sent); d >= 20*time.Millisecond {
		t.Logf("the way back took %s (it has no delay; a slow machine?)", d)
	}
	if st := s.Stats(); st.Forwarded != 6 {
		t.Fatalf("stats %+v, want 6 forwarded", st)
	}
}

// A link that is down drops everything, one way only when set one way,
// and carries again once restored; packets for no port, or not IPv4, are
// counted and dropped.
func TestSwitchDownAndUnrouted(t *testing.T) {
	s, a, b := twoPorts(t)
	s.SetDown(hostA, hostB, true)
	for i := range 10 {
		a.in <- ipv4(hostA, hostB, uint16(i))
		b.in <- ipv4(hostB, hostA, uint16(i))
	}
	a.in <- ipv4(hostA, netip.MustParseAddr("10.213.0.9"), 0)
	v6 := make([]byte, 40)
	v6[0] = 0x60
	a.in <- v6
	poll.Until(t, 5*time.Second, "20 packets cut and 2 unrouted", func() bool {
		st := s.Stats()
		return st.Cut >= 20 && st.Unrouted >= 2
	})
	select {
	case got := <-b.out:
		t.Fatalf("a packet crossed a cut link: % x", got.b)
	case got := <-a.out:
		t.Fatalf("a packet crossed a cut link: % x", got.b)
	default:
	}
	s.SetDown(hostA, hostB, false)
	a.in <- ipv4(hostA, hostB, 42)
	receive(t, b)
}

// With jitter, packets keep their order unless Reorder lets them pass
// each other.
func TestSwitchOrder(t *testing.T) {
	for _, reorder := range []bool{false, true} {
		s, a, b := twoPorts(t)
		s.SetLink(hostA, hostB, Link{Delay: 5 * time.Millisecond, Jitter: 4 * time.Millisecond, Reorder: reorder})
		const n = 500
		for i := range n {
			a.in <- ipv4(hostA, hostB, uint16(i))
		}
		inversions, last := 0, -1
		for range n {
			got := receive(t, b)
			id := int(got.b[4])<<8 | int(got.b[5])
			if id < last {
				inversions++
			}
			last = max(last, id)
		}
		switch {
		case !reorder && inversions > 0:
			t.Fatalf("without Reorder, %d packets overtook an earlier one", inversions)
		case reorder && inversions == 0:
			t.Fatalf("with Reorder and ±4ms jitter, no packet of %d overtook another", n)
		}
	}
}

// Loss drops about its share of packets; the rest arrive.
func TestSwitchLoss(t *testing.T) {
	s, a, b := twoPorts(t)
	s.SetDefault(Link{Loss: 0.2})
	const n = 1000
	go func() {
		for i := range n {
			a.in <- ipv4(hostA, hostB, uint16(i))
		}
	}()
	poll.Until(t, 5*time.Second, "every packet forwarded or lost", func() bool {
		st := s.Stats()
		return st.Forwarded+st.Lost >= n
	})
	st := s.Stats()
	// 0.2 of 1000: 200 ± 6 standard deviations (12.6).
	if st.Lost < 124 || st.Lost > 276 {
		t.Fatalf("%d of %d lost at a loss of 0.2", st.Lost, n)
	}
	for range st.Forwarded {
		receive(t, b)
	}
}
