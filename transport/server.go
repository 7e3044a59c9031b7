package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Handler answers one request: a response body, or an error (an *Error
// for a code other than Internal).
type Handler func(ctx context.Context, t Type, payload []byte) ([]byte, error)

// Server accepts client connections and runs a Handler for each request,
// concurrently, up to MaxInFlight per connection.
type Server struct {
	Handler     Handler
	Logger      hclog.Logger
	MaxFrame    int // default DefaultMaxFrame
	MaxInFlight int // per connection; default 1024
	// MaxInFlightBytes bounds the request payloads held by running handlers
	// across all connections; a connection whose next request does not fit
	// waits before reading on. Default 256 MiB.
	MaxInFlightBytes int64

	budget *budget

	mu     sync.Mutex
	lis    net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Serve accepts connections on lis until Close. It returns nil after Close.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		lis.Close()
		return nil
	}
	s.lis = lis
	s.conns = map[net.Conn]struct{}{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.MaxFrame <= 0 {
		s.MaxFrame = DefaultMaxFrame
	}
	if s.MaxInFlight <= 0 {
		s.MaxInFlight = 1024
	}
	if s.MaxInFlightBytes <= 0 {
		s.MaxInFlightBytes = 256 << 20
	}
	s.budget = newBudget(s.MaxInFlightBytes)
	if s.Logger == nil {
		s.Logger = hclog.NewNullLogger()
	}
	s.mu.Unlock()
	for {
		c, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("transport: accept: %w", err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops accepting, closes every connection, and waits for handlers.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.lis != nil {
		s.lis.Close()
		s.cancel()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	log := s.Logger.With("remote", c.RemoteAddr().String())
	r := bufio.NewReaderSize(c, 64<<10)
	w := &frameWriter{c: c, w: bufio.NewWriterSize(c, 64<<10)}
	sem := make(chan struct{}, s.MaxInFlight)
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for {
		f, err := ReadFrame(r, s.MaxFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Warn("closing connection", "error", err)
				// Tell the client why before closing, where the stream allows it.
				if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed) {
					code := Invalid
					if errors.Is(err, ErrFrameTooLarge) {
						code = TooLarge
					}
					w.write(Frame{Type: ResponseBit, Payload: EncodeStatus(Errorf(code, "%v", err), nil)})
				}
			}
			return
		}
		if f.Type&ResponseBit != 0 {
			log.Warn("closing connection", "error", "client sent a response frame")
			return
		}
		sem <- struct{}{}
		n := int64(len(f.Payload))
		if !s.budget.take(s.ctx, n) {
			return // shutting down
		}
		handlers.Add(1)
		go func() {
			defer func() { s.budget.give(n); <-sem; handlers.Done() }()
			body, err := s.Handler(s.ctx, f.Type, f.Payload)
			if werr := w.write(Frame{Type: f.Type | ResponseBit, ID: f.ID, Payload: EncodeStatus(err, body)}); werr != nil {
				c.Close()
			}
		}()
	}
}

// frameWriter serialises response writes on one connection.
type frameWriter struct {
	mu sync.Mutex
	c  net.Conn
	w  *bufio.Writer
}

// writeTimeout bounds one response write: a client that stops reading has
// its connection closed instead of pinning handlers and their memory.
const writeTimeout = 30 * time.Second

func (fw *frameWriter) write(f Frame) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := WriteFrame(fw.w, f); err != nil {
		return err
	}
	return fw.w.Flush()
}

// budget is a pool of bytes shared by every connection's handlers.
type budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	free  int64
	total int64
}

func newBudget(total int64) *budget {
	b := &budget{free: total, total: total}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// take waits until n bytes are free (a request larger than the whole budget
// waits for all of it) and takes them; false if ctx ended first.
func (b *budget) take(ctx context.Context, n int64) bool {
	n = min(n, b.total)
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.free < n {
		if ctx.Err() != nil {
			return false
		}
		b.cond.Wait()
	}
	b.free -= n
	return true
}

func (b *budget) give(n int64) {
	n = min(n, b.total)
	b.mu.Lock()
	b.free += n
	b.cond.Broadcast()
	b.mu.Unlock()
}
