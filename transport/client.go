package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/qmqgo/qmq/internal/version"
)

// ErrClosed means the connection was closed; requests in flight on it fail
// with it (wrapped in an Unavailable *Error, since another connection may
// succeed).
var ErrClosed = errors.New("transport: connection closed")

// Conn is a client connection: any number of goroutines may Call on it at
// once; requests are multiplexed by id and answered in any order.
type Conn struct {
	addr     string
	c        net.Conn
	maxFrame int

	wmu sync.Mutex // serialises frame writes
	w   *bufio.Writer

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan Frame
	err     error // set once the connection failed or was closed
	done    chan struct{}

	vmu      sync.Mutex     // one Hello for the versions at a time
	versions *version.Range // the node's, once a Hello's answer said
}

// newConn starts a Conn on c, a connection to addr. (A *tls.Conn is not a
// *net.TCPConn, but Go sets TCP_NODELAY on every TCP connection anyway.)
func newConn(addr string, c net.Conn) *Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	conn := &Conn{
		addr: addr, c: c, maxFrame: DefaultMaxFrame,
		w:       bufio.NewWriterSize(c, 64<<10),
		pending: map[uint64]chan Frame{},
		done:    make(chan struct{}),
	}
	go conn.readLoop()
	return conn
}

// Addr returns the address dialled.
func (c *Conn) Addr() string { return c.addr }

// Done is closed when the connection has failed or been closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

func (c *Conn) readLoop() {
	r := bufio.NewReaderSize(c.c, 64<<10)
	for {
		f, err := ReadFrame(r, c.maxFrame)
		if err != nil {
			c.fail(err)
			return
		}
		if f.ID == 0 {
			// The server's word on the connection itself (over a limit, a
			// frame it refused) before it closes: the error of every call.
			if _, err := DecodeStatus(f.Payload); err != nil {
				c.fail(err)
				return
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[f.ID]
		delete(c.pending, f.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- f // buffered: never blocks
		}
	}
}

// fail closes the connection and fails every request in flight with err,
// and every later one.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	c.c.Close()
	close(c.done)
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
}

// Close closes the connection.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Call sends a request and waits for its response body. A server error is
// returned as an *Error; so is a broken connection (Unavailable, or the
// error the server gave for the connection on request id 0, such as
// TOO_MANY_CONNECTIONS) and an expired context (Timeout, whose outcome is
// unknown).
func (c *Conn) Call(ctx context.Context, t Type, payload []byte) ([]byte, error) {
	ch := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.unavailable()
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	if err := c.write(Frame{Type: t, ID: id, Payload: payload}); err != nil {
		c.fail(err)
		return nil, c.unavailable()
	}
	select {
	case f, ok := <-ch:
		if !ok {
			return nil, c.unavailable()
		}
		if f.Type != t|ResponseBit {
			c.fail(fmt.Errorf("%w: response of type %s to a %s request", ErrMalformed, f.Type, t))
			return nil, c.unavailable()
		}
		return DecodeStatus(f.Payload)
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, &Error{Code: Timeout, Message: fmt.Sprintf("%s to %s: %v", t, c.addr, ctx.Err())}
	}
}

func (c *Conn) write(f Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := WriteFrame(c.w, f); err != nil {
		return err
	}
	return c.w.Flush()
}

// unavailable is the error of a call on a failed connection: the server's
// own, if it sent one before closing; ErrTLS if the connection failed on a
// TLS alert (a TLS 1.3 server refusing the client's certificate says so
// only on the client's first read); else Unavailable.
func (c *Conn) unavailable() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if isTLSError(err) {
		return fmt.Errorf("%w: connection to %s: %v", ErrTLS, c.addr, err)
	}
	if e, ok := err.(*Error); ok {
		return &Error{Code: e.Code, Message: fmt.Sprintf("connection to %s: %s", c.addr, e.Message), Leader: e.Leader}
	}
	return &Error{Code: Unavailable, Message: fmt.Sprintf("connection to %s: %v", c.addr, err)}
}
