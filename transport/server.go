package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/lograte"
	"github.com/qmqgo/qmq/internal/wait"
)

// Handler answers one request: a response body, or an error (an *Error
// for a code other than Internal).
//
// ctx ends when the request's connection fails or the server closes. The
// request's payload counts against the server's memory budget
// (MaxInFlightBytes) until its response is written, and so must the body:
// a handler that builds a body of more than a few kilobytes reserves its
// bytes with Reserve or TryReserve before building it, so that the replies
// waiting for slow readers stay within the budget. A reply that cannot go
// without its first part (a pull's first message) waits for it with
// Reserve; each further part is taken with TryReserve, and the handler
// stops adding parts at the first that fails. The server gives every
// reservation back once the response is written or the connection failed;
// one made after the handler returned fails. While it holds a reservation
// a handler should wait for nothing but memory: handlers waiting on each
// other's bytes stall until their contexts end.
type Handler func(ctx context.Context, t Type, payload []byte) ([]byte, error)

// Defaults of the Server's limits.
const (
	DefaultMaxInFlight      = 1024
	DefaultMaxInFlightBytes = 256 << 20
	DefaultFrameTimeout     = 30 * time.Second
	DefaultMaxConnsPerAddr  = 256
	DefaultMaxConns         = 8192
	DefaultHandshakeTimeout = 10 * time.Second
)

// Server accepts client connections and runs a Handler for each request,
// concurrently, up to MaxInFlight per connection. Every resource a client
// can make it hold is bounded: connections by MaxConnsPerAddr and
// MaxConns, memory by MaxInFlightBytes, the time a frame takes to arrive
// by FrameTimeout, TLS handshakes by HandshakeTimeout.
type Server struct {
	Handler Handler
	Logger  hclog.Logger
	// MaxFrame is the largest frame accepted (its length field); a larger
	// one is answered TOO_LARGE and the connection closed. Default
	// DefaultMaxFrame (16 MiB).
	MaxFrame int
	// Identified, if set, says whether a connection's peer has identified
	// itself (a handler decides how: a Hello, a certificate); a connection
	// whose peer has not within IdentifyTimeout of its start is closed, so
	// that nobody can hold connections, and their buffers, without
	// proving who they are. Nil (the default): connections are never
	// asked to.
	Identified      func(*Peer) bool
	IdentifyTimeout time.Duration
	// MaxInFlight bounds the requests handled at once on one connection;
	// its reader waits for one to finish before reading on (TCP then
	// holds the client back: the client is slowed, never failed, and the
	// waits are counted in ServerStats.InFlightFull). Default 1024.
	MaxInFlight int
	// MaxInFlightBytes is the memory budget shared by every connection:
	// each request's payload (plus 4 KiB for its handler) from the moment
	// its header is read until its response is written, and the reply
	// bytes handlers Reserve. A connection whose next frame does not fit
	// waits, before allocating it, until it does; a frame larger than the
	// whole budget waits for all of it. Default 256 MiB.
	MaxInFlightBytes int64
	// FrameTimeout bounds the time a frame may take to arrive once its
	// first byte has: a connection whose frame is not complete by then is
	// answered TIMEOUT and closed, and the frame's budget returned. The
	// clock stops while the server itself waits for budget. A connection
	// between frames has no deadline (consumers long-poll, producers may
	// be idle). Default 30 s.
	FrameTimeout time.Duration
	// MaxConnsPerAddr bounds the open connections from one remote IP
	// address; a connection past it is answered TOO_MANY_CONNECTIONS and
	// closed. Default 256.
	MaxConnsPerAddr int
	// MaxConns bounds the open connections in all, likewise. Default 8192.
	MaxConns int
	// TLS, if set, makes every connection TLS; a tlsconf.Reloader's Server
	// config picks up rotated certificate files on each handshake. A
	// connection's handshake runs once MaxConnsPerAddr and MaxConns have
	// admitted it, so that they bound handshakes too; a connection over a
	// limit is answered TOO_MANY_CONNECTIONS over TLS. A client that does
	// not speak TLS is answered INVALID on request id 0, in plaintext,
	// where its first bytes allow. Nil (the default): plaintext.
	TLS *tls.Config
	// HandshakeTimeout bounds a connection's TLS handshake: a connection
	// whose handshake has not completed by then is closed and its slot
	// returned. Default 10 s.
	HandshakeTimeout time.Duration

	budget *budget

	mu       sync.Mutex
	lis      net.Listener
	conns    map[net.Conn]string // open connection → its remote IP
	perAddr  map[string]int      // remote IP → its open connections
	refusing map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc

	refusedPerAddr   atomic.Uint64
	refusedTotal     atomic.Uint64
	framesTimedOut   atomic.Uint64
	inFlightFull     atomic.Uint64
	unidentified     atomic.Uint64
	handshakesFailed atomic.Uint64
	handshakeLog     *lograte.Limiter // failed handshakes log once a second
}

// ServerStats is what a Server holds and what it refused, for metrics.
type ServerStats struct {
	Conns            int    // connections open
	InFlightBytes    int64  // budget taken by requests and reserved replies
	WaitingForMemory int    // connection readers and handlers waiting for budget
	RefusedPerAddr   uint64 // connections refused by MaxConnsPerAddr, ever
	RefusedTotal     uint64 // connections refused by MaxConns, ever
	FramesTimedOut   uint64 // connections closed by FrameTimeout, ever
	HandshakesFailed uint64 // connections closed because their TLS handshake failed or timed out, ever
	InFlightFull     uint64 // times a connection's reader waited because MaxInFlight requests were being handled, ever
	Unidentified     uint64 // connections closed because they did not identify themselves within IdentifyTimeout, ever
}

// Stats reports the server's counters; all zero before Serve.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	st := ServerStats{Conns: len(s.conns)}
	b := s.budget
	s.mu.Unlock()
	if b != nil {
		st.InFlightBytes, st.WaitingForMemory = b.usage()
	}
	st.RefusedPerAddr = s.refusedPerAddr.Load()
	st.RefusedTotal = s.refusedTotal.Load()
	st.FramesTimedOut = s.framesTimedOut.Load()
	st.HandshakesFailed = s.handshakesFailed.Load()
	st.InFlightFull = s.inFlightFull.Load()
	st.Unidentified = s.unidentified.Load()
	return st
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
	s.conns, s.perAddr, s.refusing = map[net.Conn]string{}, map[string]int{}, map[net.Conn]struct{}{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.setDefaults()
	s.budget = newBudget(s.MaxInFlightBytes)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("transport: accept: %w", err)
			}
			// Out of file descriptors, or a connection aborted before it
			// was accepted: keep serving those open and try again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.Logger.Warn("accept failed", "error", err, "retry-in", backoff)
			wait.Sleep(s.ctx, backoff)
			continue
		}
		backoff = 0
		s.admit(c)
	}
}

func (s *Server) setDefaults() {
	if s.MaxFrame <= 0 {
		s.MaxFrame = DefaultMaxFrame
	}
	if s.MaxInFlight <= 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.MaxInFlightBytes <= 0 {
		s.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if s.FrameTimeout <= 0 {
		s.FrameTimeout = DefaultFrameTimeout
	}
	if s.MaxConnsPerAddr <= 0 {
		s.MaxConnsPerAddr = DefaultMaxConnsPerAddr
	}
	if s.MaxConns <= 0 {
		s.MaxConns = DefaultMaxConns
	}
	if s.HandshakeTimeout <= 0 {
		s.HandshakeTimeout = DefaultHandshakeTimeout
	}
	s.handshakeLog = lograte.New(time.Second)
	if s.Logger == nil {
		s.Logger = hclog.NewNullLogger()
	}
}

// admit serves c, or refuses it if it is over a connection limit.
func (s *Server) admit(c net.Conn) {
	ip := remoteIP(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return
	}
	switch {
	case len(s.conns) >= s.MaxConns:
		s.refusedTotal.Add(1)
		s.refuseLocked(c, Errorf(TooManyConnections, "the server has %d connections open, its limit", len(s.conns)))
	case s.perAddr[ip] >= s.MaxConnsPerAddr:
		s.refusedPerAddr.Add(1)
		s.refuseLocked(c, Errorf(TooManyConnections, "%s has %d connections open, the limit per address", ip, s.perAddr[ip]))
	default:
		s.conns[c] = ip
		s.perAddr[ip]++
		s.wg.Add(1)
		go s.serveConn(c, ip)
	}
}

// maxRefusing bounds the refused connections being told why at once; past
// it, a refused connection is closed without an answer.
const maxRefusing = 64

// refuseLocked answers c with e on request id 0 and closes it; with TLS,
// the handshake and the answer together have lingerTimeout. The caller
// holds mu.
func (s *Server) refuseLocked(c net.Conn, e *Error) {
	s.Logger.Debug("refusing connection", "remote", c.RemoteAddr().String(), "error", e.Message)
	if len(s.refusing) >= maxRefusing {
		c.Close()
		return
	}
	s.refusing[c] = struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		conn := c
		if s.TLS != nil {
			c.SetDeadline(time.Now().Add(lingerTimeout))
			conn = tls.Server(c, s.TLS)
		}
		fw := newFrameWriter(conn, 256)
		if fw.writeError(e, lingerTimeout) == nil {
			lingerClose(conn)
		} else {
			conn.Close()
		}
		s.mu.Lock()
		delete(s.refusing, c)
		s.mu.Unlock()
	}()
}

// forget drops a closed connection from the counts.
func (s *Server) forget(c net.Conn, ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.perAddr[ip]--; s.perAddr[ip] <= 0 {
		delete(s.perAddr, ip)
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
	for c := range s.refusing {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// remoteIP is the IP address c comes from, the key of MaxConnsPerAddr.
func remoteIP(c net.Conn) string {
	addr := c.RemoteAddr()
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}
