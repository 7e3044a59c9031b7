package netns

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// mtu bounds a packet the switch carries: a TUN device's default MTU.
const mtu = 1500

// Switch forwards IPv4 packets between ports, each port the TUN device of
// one host (or, in tests, an in-memory pipe), after the model of the link
// from the sending host to the receiving one. It runs as goroutines of the
// test process rather than as a process of its own: a TUN device lives as
// long as a descriptor of it, so a test process that dies takes its
// network with it, and the test changes links with a method call rather
// than over a control socket.
//
// One goroutine per port reads what its host sends and queues it; one
// more, the clock, writes each packet when it falls due. The clock sleeps
// in ppoll(2) on an OS thread of its own with a timer slack of 1 µs,
// rather than on a Go timer: the runtime's timers wake up to a millisecond
// late when the process is idle (its poller waits in whole milliseconds),
// which would add most of a millisecond to every link's delay.
type Switch struct {
	mu       sync.Mutex
	rng      *rand.Rand
	ports    map[netip.Addr]*port
	lanes    map[[2]netip.Addr]*lane
	def      Link
	stats    Stats
	queue    due  // every packet on its way, soonest first
	sleeping bool // the clock waits: a new soonest packet must wake it
	closed   bool
	wake     int // an eventfd that wakes the clock
	wg       sync.WaitGroup
}

// Stats counts what a switch did with the packets it read.
type Stats struct {
	Forwarded int64 // queued for their destination's port
	Lost      int64 // dropped by a link's loss
	Cut       int64 // dropped by a link that is down
	Unrouted  int64 // for no port of the switch, or not IPv4
}

// port is one host's device.
type port struct {
	addr netip.Addr
	dev  io.ReadWriteCloser
}

// packet is one packet on its way to a port, due at at; seq keeps the
// order of packets due at the same time.
type packet struct {
	at  time.Time
	seq uint64
	to  *port
	b   []byte
}

type due []packet

func (q due) Len() int { return len(q) }
func (q due) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q due) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *due) Push(x any)   { *q = append(*q, x.(packet)) }
func (q *due) Pop() any {
	old := *q
	p := old[len(old)-1]
	*q = old[:len(old)-1]
	return p
}

// NewSwitch returns a switch without ports whose links are all the zero
// Link; seed seeds its losses and jitter.
func NewSwitch(seed uint64) (*Switch, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("netns: eventfd: %w", err)
	}
	s := &Switch{rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		ports: map[netip.Addr]*port{}, lanes: map[[2]netip.Addr]*lane{}, wake: efd}
	s.wg.Add(1)
	go s.clock()
	return s, nil
}

// ErrClosed is what Attach answers on a closed switch.
var ErrClosed = errors.New("netns: switch closed")

// Attach adds a port for the host at addr: the switch reads packets from
// dev (one packet a Read) and writes it the packets to addr (one a
// Write). Close closes dev.
func (s *Switch) Attach(addr netip.Addr, dev io.ReadWriteCloser) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.ports[addr]; ok {
		return errors.New("netns: a port for " + addr.String() + " already exists")
	}
	p := &port{addr: addr, dev: dev}
	s.ports[addr] = p
	s.wg.Add(1)
	go s.read(p)
	return nil
}

// SetDefault sets the model of every link that has none of its own
// (SetLink), both directions.
func (s *Switch) SetDefault(l Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = l
	for _, ln := range s.lanes {
		if !ln.own {
			ln.Link = l
		}
	}
}

// SetLink sets the model of the link from one host to another (one
// direction; call it twice for both).
func (s *Switch) SetLink(from, to netip.Addr, l Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln := s.lane(from, to)
	ln.Link, ln.own = l, true
}

// SetDown cuts (down) or restores every link between from and to, both
// directions, keeping their models otherwise.
func (s *Switch) SetDown(a, b netip.Addr, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lane(a, b).Down = down
	s.lane(b, a).Down = down
}

// Link returns the model of the link from one host to another.
func (s *Switch) Link(from, to netip.Addr) Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lane(from, to).Link
}

// lane returns the lane from one host to another, made from the default
// on first use. s.mu is held.
func (s *Switch) lane(from, to netip.Addr) *lane {
	k := [2]netip.Addr{from, to}
	ln := s.lanes[k]
	if ln == nil {
		ln = &lane{Link: s.def}
		s.lanes[k] = ln
	}
	return ln
}

// Stats returns what the switch did so far.
func (s *Switch) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close closes every port's device, stops the clock and waits for the
// switch's goroutines.
func (s *Switch) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var errs []error
	for _, p := range s.ports {
		errs = append(errs, p.dev.Close())
	}
	s.mu.Unlock()
	s.signal()
	s.wg.Wait()
	unix.Close(s.wake)
	return errors.Join(errs...)
}

// read forwards what p's host sends until its device fails (is closed).
func (s *Switch) read(p *port) {
	defer s.wg.Done()
	for {
		b := make([]byte, mtu+64)
		n, err := p.dev.Read(b)
		if err != nil {
			return
		}
		if d := s.route(p.addr, b[:n], time.Now()); d != nil {
			d.to.dev.Write(d.b) // an error drops the packet, as a wire would
		}
	}
}

// route puts one packet from the host at src on the lane to its
// destination. A packet due at once while nothing else is on its way is
// returned instead, for the caller to write without waking the clock
// (which costs tens of microseconds): nothing sent before it can then
// still be waiting.
func (s *Switch) route(src netip.Addr, b []byte, now time.Time) (direct *packet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(b) < 20 || b[0]>>4 != 4 {
		s.stats.Unrouted++ // IPv6 (the kernel's solicitations) or junk
		return nil
	}
	dst := s.ports[netip.AddrFrom4([4]byte(b[16:20]))]
	if dst == nil {
		s.stats.Unrouted++
		return nil
	}
	ln := s.lane(src, dst.addr)
	at, ok := ln.pass(now, len(b), s.rng)
	switch {
	case !ok && ln.Down:
		s.stats.Cut++
		return nil
	case !ok:
		s.stats.Lost++
		return nil
	}
	s.stats.Forwarded++
	if !at.After(now) && len(s.queue) == 0 {
		return &packet{at: at, to: dst, b: b}
	}
	heap.Push(&s.queue, packet{at: at, seq: uint64(s.stats.Forwarded), to: dst, b: b})
	if s.sleeping && s.queue[0].seq == uint64(s.stats.Forwarded) {
		s.sleeping = false
		s.signal()
	}
	return nil
}

// signal wakes the clock.
func (s *Switch) signal() {
	one := [8]byte{1}
	unix.Write(s.wake, one[:])
}

// clock writes every packet when it falls due, until Close.
func (s *Switch) clock() {
	defer s.wg.Done()
	// Never unlocked: the thread's timer slack is changed, so it ends with
	// the goroutine rather than serve others.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	var ready []packet
	for {
		ready = ready[:0]
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		now := time.Now()
		for len(s.queue) > 0 && !s.queue[0].at.After(now) {
			ready = append(ready, heap.Pop(&s.queue).(packet))
		}
		var timeout *unix.Timespec // nil: until woken
		if len(ready) == 0 && len(s.queue) > 0 {
			ts := unix.NsecToTimespec(int64(s.queue[0].at.Sub(now)))
			timeout = &ts
		}
		s.sleeping = len(ready) == 0
		s.mu.Unlock()
		for _, p := range ready {
			p.to.dev.Write(p.b) // an error drops the packet, as a wire would
		}
		if len(ready) > 0 {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(s.wake), Events: unix.POLLIN}}
		if n, err := unix.Ppoll(fds, timeout, nil); err == nil && n > 0 {
			var buf [8]byte
			unix.Read(s.wake, buf[:])
		}
	}
}
