package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/poll"
)

// serve runs s on a loopback port (on lis, if given); it stops at cleanup.
func serve(t *testing.T, s *Server, lis net.Listener) string {
	t.Helper()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func echo(_ context.Context, _ Type, p []byte) ([]byte, error) { return p, nil }

// eventually polls cond until it holds, or fails the test after 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 20*time.Second, what, cond)
}

// frameHeaderBytes is a frame's header claiming a payload of n bytes.
func frameHeaderBytes(t Type, id uint64, n int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(9+n))
	b = append(b, byte(t))
	return binary.LittleEndian.AppendUint64(b, id)
}

// readConnError reads the error frame a server sends on request id 0
// before closing c, then the end of the stream.
func readConnError(t *testing.T, c net.Conn) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	f, err := ReadFrame(r, DefaultMaxFrame)
	if err != nil {
		t.Fatalf("no error frame: %v", err)
	}
	if f.ID != 0 || f.Type != ResponseBit {
		t.Fatalf("frame of type %s, id %d; want the connection's error on id 0", f.Type, f.ID)
	}
	_, ferr := DecodeStatus(f.Payload)
	if _, err := ReadFrame(r, DefaultMaxFrame); !errors.Is(err, io.EOF) {
		t.Fatalf("connection not closed after its error frame: %v", err)
	}
	return ferr
}

// TestStartedFramesHoldNoMoreThanTheBudget: eight connections that each
// send only a header claiming a 16 MiB payload hold no more than the
// memory budget (the readers of those that do not fit wait before
// allocating), and each is closed with TIMEOUT once FrameTimeout has passed
// since its frame began, while an idle connection lives on.
func TestStartedFramesHoldNoMoreThanTheBudget(t *testing.T) {
	const budget = 40 << 20 // room for two 16 MiB frames, not three
	s := &Server{Handler: echo, MaxFrame: DefaultMaxFrame, MaxInFlightBytes: budget, FrameTimeout: time.Second}
	addr := serve(t, s, nil)
	idle, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := idle.Call(context.Background(), TypeStatus, nil); err != nil {
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const payload = DefaultMaxFrame - 9
	var conns []net.Conn
	for i := range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(frameHeaderBytes(TypeSend, uint64(i+1), payload)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	charge := int64(payload + requestOverhead)
	eventually(t, "two frames holding the budget and six waiting", func() bool {
		st := s.Stats()
		return st.InFlightBytes == 2*charge && st.WaitingForMemory == 6
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > budget+8<<20 {
		t.Fatalf("eight started frames hold %d MiB of heap; the budget is %d MiB", grown>>20, budget>>20)
	}

	for i, c := range conns {
		if err := readConnError(t, c); CodeOf(err) != Timeout {
			t.Fatalf("connection %d: %v, want TIMEOUT", i, err)
		}
	}
	eventually(t, "the budget returned", func() bool {
		st := s.Stats()
		return st.InFlightBytes == 0 && st.Conns == 1
	})
	if st := s.Stats(); st.FramesTimedOut != 8 {
		t.Fatalf("FramesTimedOut = %d, want 8", st.FramesTimedOut)
	}
	// The idle connection was silent for longer than FrameTimeout between
	// frames: it is still served.
	if b, err := idle.Call(context.Background(), TypeStatus, []byte("x")); err != nil || string(b) != "x" {
		t.Fatalf("idle connection after the timeouts: %q, %v", b, err)
	}
}

// TestFrameClockStopsWhileWaitingForMemory: a frame whose reader waited
// for the budget longer than FrameTimeout is still read in full, because
// the wait is the server's, not the client's.
func TestFrameClockStopsWhileWaitingForMemory(t *testing.T) {
	const payload = 200 << 10 // more than the reader's buffer: the rest comes from the socket
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := &Server{MaxFrame: DefaultMaxFrame, FrameTimeout: 300 * time.Millisecond,
		MaxInFlightBytes: payload + requestOverhead + 8<<10, // one such frame, and a small one
		Handler: func(_ context.Context, _ Type, p []byte) ([]byte, error) {
			if len(p) > 0 && p[0] == 'A' {
				started <- struct{}{}
				<-release
			}
			return []byte("ok"), nil
		}}
	addr := serve(t, s, nil)
	call := func(first byte) chan error {
		done := make(chan error, 1)
		c, err := Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		p := bytes.Repeat([]byte{first}, payload)
		go func() {
			_, err := c.Call(context.Background(), TypeSend, p)
			done <- err
		}()
		return done
	}
	a := call('A')
	<-started
	b := call('B')
	eventually(t, "the second frame waiting for memory", func() bool { return s.Stats().WaitingForMemory == 1 })

	// A small frame that never completes times out: FrameTimeout has passed
	// since the waiting frame began.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(frameHeaderBytes(TypeSend, 1, 1024))
	if err := readConnError(t, c); CodeOf(err) != Timeout {
		t.Fatalf("small frame: %v, want TIMEOUT", err)
	}
	close(release)
	if err := <-a; err != nil {
		t.Fatalf("first frame: %v", err)
	}
	if err := <-b; err != nil {
		t.Fatalf("frame that waited for memory: %v", err)
	}
}

// dialFrom opens a Conn to addr from the local IP address local.
func dialFrom(t *testing.T, local, addr string) *Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn := newConn(addr, c)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestConnectionLimits: under and at MaxConnsPerAddr and MaxConns a
// connection is served; just over, its call fails with
// TOO_MANY_CONNECTIONS (and so does every later call on it), and a
// connection closed makes room again.
func TestConnectionLimits(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name         string
		perAddr, all int
		// the address the connection over the limit comes from; one from
		// 127.0.0.2 is always served, or refused by MaxConns
		overFrom  string
		other     bool // whether 127.0.0.2 is then served
		perAddrNo uint64
		totalNo   uint64
	}{
		{"per address", 2, 100, "127.0.0.1", true, 1, 0},
		{"in all", 100, 2, "127.0.0.2", false, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{Handler: echo, MaxConnsPerAddr: tt.perAddr, MaxConns: tt.all}
			addr := serve(t, s, nil)
			var ok []*Conn
			for i := range 2 { // under the limit, then at it
				c := dialFrom(t, "127.0.0.1", addr)
				if _, err := c.Call(ctx, TypeStatus, nil); err != nil {
					t.Fatalf("connection %d of 2: %v", i+1, err)
				}
				ok = append(ok, c)
			}
			over := dialFrom(t, tt.overFrom, addr)
			_, err := over.Call(ctx, TypeStatus, nil)
			if CodeOf(err) != TooManyConnections || !errors.Is(err, &Error{Code: TooManyConnections}) {
				t.Fatalf("connection over the limit: %v, want TOO_MANY_CONNECTIONS", err)
			}
			if !err.(*Error).Retriable() {
				t.Fatal("TOO_MANY_CONNECTIONS is not retriable")
			}
			if _, err := over.Call(ctx, TypeStatus, nil); CodeOf(err) != TooManyConnections {
				t.Fatalf("later call on the refused connection: %v, want TOO_MANY_CONNECTIONS", err)
			}
			other := dialFrom(t, "127.0.0.2", addr)
			_, err = other.Call(ctx, TypeStatus, nil)
			if tt.other && err != nil {
				t.Fatalf("connection from another address: %v", err)
			}
			if !tt.other && CodeOf(err) != TooManyConnections {
				t.Fatalf("connection from another address: %v, want TOO_MANY_CONNECTIONS", err)
			}
			if st := s.Stats(); st.RefusedPerAddr != tt.perAddrNo || st.RefusedTotal != tt.totalNo {
				t.Fatalf("refused per address %d, in all %d; want %d, %d", st.RefusedPerAddr, st.RefusedTotal, tt.perAddrNo, tt.totalNo)
			}

			ok[0].Close()
			eventually(t, "the closed connection forgotten", func() bool { return s.Stats().Conns < 2+btoi(tt.other) })
			again := dialFrom(t, "127.0.0.1", addr)
			if _, err := again.Call(ctx, TypeStatus, nil); err != nil {
				t.Fatalf("after a connection closed: %v", err)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestClientTakesTheConnectionsError: an error frame on request id 0 is
// the error of every call pending on the connection and of every later one.
func TestClientTakesTheConnectionsError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for range 2 { // both calls are pending
			if _, err := ReadFrame(r, DefaultMaxFrame); err != nil {
				return
			}
		}
		w := bufio.NewWriter(c)
		WriteFrame(w, Frame{Type: ResponseBit, Payload: EncodeStatus(Errorf(Invalid, "no"), nil)})
		w.Flush()
		lingerClose(c)
	}()
	c, err := Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Call(context.Background(), TypeStatus, nil)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; CodeOf(err) != Invalid {
			t.Fatalf("pending call: %v, want INVALID", err)
		}
	}
	if _, err := c.Call(context.Background(), TypeStatus, nil); CodeOf(err) != Invalid {
		t.Fatalf("later call: %v, want INVALID", err)
	}
}

// TestFrameSizeLimit: frames of MaxFrame-1 and MaxFrame bytes are served;
// one of MaxFrame+1 fails its call, and every later call on the
// connection, with TOO_LARGE.
func TestFrameSizeLimit(t *testing.T) {
	const maxFrame = 1 << 16
	addr := serve(t, &Server{Handler: func(_ context.Context, _ Type, p []byte) ([]byte, error) {
		return []byte(fmt.Sprint(len(p))), nil
	}, MaxFrame: maxFrame}, nil)
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, frame := range []int{maxFrame - 1, maxFrame} {
		b, err := c.Call(context.Background(), TypeSend, make([]byte, frame-9))
		if err != nil || string(b) != fmt.Sprint(frame-9) {
			t.Fatalf("frame of %d bytes: %q, %v", frame, b, err)
		}
	}
	if _, err := c.Call(context.Background(), TypeSend, make([]byte, maxFrame+1-9)); CodeOf(err) != TooLarge {
		t.Fatalf("frame of MaxFrame+1 bytes: %v, want TOO_LARGE", err)
	}
	if _, err := c.Call(context.Background(), TypeSend, nil); CodeOf(err) != TooLarge {
		t.Fatalf("later call: %v, want TOO_LARGE", err)
	}
}

// gatedListener's connections write nothing until gate is closed: clients
// that do not read.
type gatedListener struct {
	net.Listener
	gate chan struct{}
}

func (l gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, gate: l.gate, closed: make(chan struct{})}, nil
}

type gatedConn struct {
	net.Conn
	gate   chan struct{}
	once   sync.Once
	closed chan struct{}
}

func (c *gatedConn) Write(p []byte) (int, error) {
	select {
	case <-c.gate:
		return c.Conn.Write(p)
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *gatedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestRepliesStayWithinTheBudget: handlers that reserve their replies as
// the Handler contract says never hold more reply bytes, waiting for
// clients that do not read, than the budget; once the clients read, every
// request is answered and the budget is whole again.
func TestRepliesStayWithinTheBudget(t *testing.T) {
	const (
		budget = 1 << 20
		chunk  = 64 << 10
		conns  = 4
		calls  = 8 // per connection
	)
	var started, blocked, answered, held atomic.Int64
	handler := func(ctx context.Context, _ Type, _ []byte) ([]byte, error) {
		started.Add(1)
		blocked.Add(1)
		err := Reserve(ctx, chunk) // the first chunk: the reply cannot go without it
		blocked.Add(-1)
		if err != nil {
			return nil, err
		}
		n := 1
		for n < 4 && TryReserve(ctx, chunk) {
			n++
		}
		held.Add(int64(n * chunk))
		answered.Add(1)
		return make([]byte, n*chunk), nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	s := &Server{Handler: handler, MaxInFlightBytes: budget}
	addr := serve(t, s, gatedListener{lis, gate})

	errs := make(chan error, conns*calls)
	for range conns {
		c, err := Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range calls {
			go func() {
				b, err := c.Call(context.Background(), TypePull, nil)
				if err == nil && (len(b) == 0 || len(b)%chunk != 0) {
					err = fmt.Errorf("reply of %d bytes", len(b))
				}
				errs <- err
			}()
		}
	}
	// Wait until the budget is spent (or, without reservations, until
	// every request is answered): no handler can reserve more then.
	eventually(t, "the budget spent", func() bool {
		if answered.Load() == conns*calls {
			return true
		}
		return answered.Load()+blocked.Load() == started.Load() && s.Stats().InFlightBytes > budget-chunk
	})
	if h := held.Load() + started.Load()*requestOverhead; h > budget {
		t.Fatalf("requests and the replies waiting for their readers hold %d KiB; the budget is %d KiB", h>>10, budget>>10)
	}
	if answered.Load() == 0 {
		t.Fatal("no handler answered")
	}
	close(gate)
	for range conns * calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the budget whole again", func() bool { return s.Stats().InFlightBytes == 0 })
}

// TestReserveBounds: a reservation just under, at and just over what is
// free; none outside a Server's handler, none after the handler returned.
func TestReserveBounds(t *testing.T) {
	b := newBudget(100)
	r := &reservation{b: b}
	ctx := context.WithValue(context.Background(), reservationKey{}, r)
	if !TryReserve(ctx, 59) || !TryReserve(ctx, 1) { // under, then at 60 of 100
		t.Fatal("TryReserve failed with the bytes free")
	}
	if TryReserve(ctx, 41) { // over: 40 free
		t.Fatal("TryReserve of 41 bytes with 40 free succeeded")
	}
	if !TryReserve(ctx, 40) { // at
		t.Fatal("TryReserve of the 40 free bytes failed")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Reserve(cctx, 1); CodeOf(err) != Unavailable {
		t.Fatalf("Reserve with no bytes free and its context ended: %v, want UNAVAILABLE", err)
	}
	r.release()
	if inUse, _ := b.usage(); inUse != 0 {
		t.Fatalf("after release %d bytes in use", inUse)
	}
	if TryReserve(ctx, 1) || Reserve(ctx, 1) == nil {
		t.Fatal("a reservation after the response was written succeeded")
	}
	if inUse, _ := b.usage(); inUse != 0 {
		t.Fatalf("a refused late reservation kept %d bytes", inUse)
	}
	if !TryReserve(context.Background(), 1<<40) || Reserve(context.Background(), 1<<40) != nil {
		t.Fatal("outside a Server's handler, reservations must succeed at once")
	}
	// More than the whole budget waits for all of it.
	r = &reservation{b: b}
	ctx = context.WithValue(context.Background(), reservationKey{}, r)
	if err := Reserve(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if inUse, _ := b.usage(); inUse != 100 {
		t.Fatalf("Reserve of more than the budget took %d of 100 bytes", inUse)
	}
	r.release()
}

// flakyListener fails its first Accept as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestServeSurvivesAcceptErrors: running out of file descriptors for a
// moment does not stop the listener.
func TestServeSurvivesAcceptErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &Server{Handler: echo}, &flakyListener{Listener: lis})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if b, err := c.Call(ctx, TypeStatus, []byte("x")); err != nil || string(b) != "x" {
		t.Fatalf("after an accept error: %q, %v", b, err)
	}
}

// TestUnreservedRepliesCountToo: a reply its handler did not reserve (a
// status page, a listing) is charged to the budget before it waits for a
// reader, so replies piling up for readers that do not read stay within
// the budget (they used to be held outside it, 1,024 per connection).
func TestUnreservedRepliesCountToo(t *testing.T) {
	const (
		budget = 1 << 20
		reply  = 200 << 10
		calls  = 16
	)
	var answered atomic.Int64
	handler := func(context.Context, Type, []byte) ([]byte, error) {
		answered.Add(1)
		return make([]byte, reply), nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	s := &Server{Handler: handler, MaxInFlightBytes: budget}
	addr := serve(t, s, gatedListener{lis, gate})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := c.Call(context.Background(), TypeStatus, nil)
			errs <- err
		}()
	}
	// Replies built and unread take the budget: later ones, or the
	// requests behind them, wait for memory.
	eventually(t, "replies waiting for memory", func() bool { return answered.Load() > 0 && s.Stats().WaitingForMemory > 0 })
	if inUse := s.Stats().InFlightBytes; inUse > budget {
		t.Fatalf("replies held %d KiB; the budget is %d KiB", inUse>>10, budget>>10)
	}
	close(gate)
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the budget whole again", func() bool { return s.Stats().InFlightBytes == 0 })
}
