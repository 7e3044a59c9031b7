package netns

import (
	"container/heap"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"
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
type Switch struct {
	mu     sync.Mutex
	rng    *rand.Rand
	ports  map[netip.Addr]*port
	lanes  map[[2]netip.Addr]*lane
	def    Link
	stats  Stats
	closed bool
	wg     sync.WaitGroup
}

// Stats counts what a switch did with the packets it read.
type Stats struct {
	Forwarded int64 // written to their destination's port
	Lost      int64 // dropped by a link's loss
	Cut       int64 // dropped by a link that is down
	Unrouted  int64 // for no port of the switch, or not IPv4
}

// port is one host's device and the packets due to it, soonest first.
type port struct {
	addr   netip.Addr
	dev    io.ReadWriteCloser
	queue  due
	wake   chan struct{} // a packet joined the queue
	closed chan struct{}
}

// packet is one packet on its way, due at at; seq keeps the order of
// packets due at the same time.
type packet struct {
	at  time.Time
	seq uint64
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
func NewSwitch(seed uint64) *Switch {
	return &Switch{rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		ports: map[netip.Addr]*port{}, lanes: map[[2]netip.Addr]*lane{}}
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
	p := &port{addr: addr, dev: dev, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	s.ports[addr] = p
	s.wg.Add(2)
	go s.read(p)
	go s.deliver(p)
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

// Close closes every port's device and waits for the switch's goroutines.
func (s *Switch) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var errs []error
	for _, p := range s.ports {
		close(p.closed)
		errs = append(errs, p.dev.Close())
	}
	s.mu.Unlock()
	s.wg.Wait()
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
		s.route(p.addr, b[:n], time.Now())
	}
}

// route puts one packet from the host at src on the lane to its
// destination.
func (s *Switch) route(src netip.Addr, b []byte, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(b) < 20 || b[0]>>4 != 4 {
		s.stats.Unrouted++ // IPv6 (the kernel's solicitations) or junk
		return
	}
	dst := s.ports[netip.AddrFrom4([4]byte(b[16:20]))]
	if dst == nil {
		s.stats.Unrouted++
		return
	}
	ln := s.lane(src, dst.addr)
	at, ok := ln.pass(now, len(b), s.rng)
	switch {
	case !ok && ln.Down:
		s.stats.Cut++
		return
	case !ok:
		s.stats.Lost++
		return
	}
	s.stats.Forwarded++
	seq := uint64(s.stats.Forwarded)
	heap.Push(&dst.queue, packet{at: at, seq: seq, b: b})
	select {
	case dst.wake <- struct{}{}:
	default:
	}
}

// deliver writes the packets due to p's host as they fall due.
func (s *Switch) deliver(p *port) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var next *packet
		if len(p.queue) > 0 {
			next = &p.queue[0]
		}
		var wait time.Duration
		var pkt []byte
		if next != nil {
			if wait = time.Until(next.at); wait <= 0 {
				pkt = heap.Pop(&p.queue).(packet).b
			}
		}
		s.mu.Unlock()
		if pkt != nil {
			if _, err := p.dev.Write(pkt); err != nil && isClosed(p.closed) {
				return
			}
			continue
		}
		var fire <-chan time.Time
		if next != nil {
			timer.Reset(wait)
			fire = timer.C
		}
		select {
		case <-p.closed:
			return
		case <-p.wake:
		case <-fire:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
