package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// serverConn is one client connection of a Server: a reader that takes
// each frame's memory from the budget before reading it, and a handler
// goroutine per request.
type serverConn struct {
	s        *Server
	c        net.Conn
	r        *bufio.Reader
	w        *frameWriter
	log      hclog.Logger
	ctx      context.Context // ends when the connection fails or the server closes
	cancel   context.CancelFunc
	handlers sync.WaitGroup
}

// serveConn serves raw, the connection admit counted, until it ends.
func (s *Server) serveConn(raw net.Conn, ip string) {
	defer s.wg.Done()
	c := raw
	peer := &Peer{Addr: raw.RemoteAddr().String()}
	if s.TLS != nil {
		tc, err := s.handshake(raw)
		if err != nil {
			s.forget(raw, ip)
			return
		}
		c = tc
		if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 {
			peer.Certificate = st.VerifiedChains[0][0]
		}
	}
	sc := &serverConn{s: s, c: c, r: bufio.NewReaderSize(c, 64<<10), w: newFrameWriter(c, 64<<10),
		log: s.Logger.With("remote", peer.Addr)}
	sc.ctx, sc.cancel = context.WithCancel(WithPeer(s.ctx, peer))
	if s.Identified != nil && s.IdentifyTimeout > 0 {
		deadline := time.AfterFunc(s.IdentifyTimeout, func() {
			if !s.Identified(peer) {
				s.unidentified.Add(1)
				sc.log.Debug("closing a connection that did not identify itself", "within", s.IdentifyTimeout)
				sc.cancel()
				sc.c.Close()
			}
		})
		defer deadline.Stop()
	}
	if err := sc.readRequests(); err != nil {
		sc.fail(err)
	}
	sc.handlers.Wait()
	sc.cancel()
	s.forget(raw, ip)
	c.Close()
}

// readRequests reads frames and starts their handlers until the client
// ends the connection cleanly (nil), the server closes, or an error.
func (sc *serverConn) readRequests() error {
	s := sc.s
	slots := make(chan struct{}, s.MaxInFlight)
	for {
		select {
		case slots <- struct{}{}:
		default:
			s.inFlightFull.Add(1)
			select {
			case slots <- struct{}{}:
			case <-sc.ctx.Done():
				return nil
			}
		}
		// Between frames a connection may stay idle for ever; once a
		// frame's first byte is here, the rest has FrameTimeout.
		if _, err := sc.r.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		start := time.Now()
		sc.c.SetReadDeadline(start.Add(s.FrameTimeout))
		h, err := ReadFrameHeader(sc.r, s.MaxFrame)
		if err != nil {
			return err
		}
		if h.Type&ResponseBit != 0 {
			return fmt.Errorf("%w: the client sent a response frame (%s)", ErrMalformed, h.Type)
		}
		charge := int64(h.PayloadLen) + requestOverhead
		res := &reservation{b: s.budget, charge: min(charge, s.budget.total)}
		waitFrom := time.Now()
		if !s.budget.take(sc.ctx, charge) {
			return nil // the server is closing or the connection failed
		}
		res.add(charge)
		sc.c.SetReadDeadline(start.Add(s.FrameTimeout + time.Since(waitFrom)))
		payload := make([]byte, h.PayloadLen)
		if _, err := io.ReadFull(sc.r, payload); err != nil {
			res.release()
			return noEOF(err)
		}
		sc.c.SetReadDeadline(time.Time{})
		sc.handlers.Add(1)
		go func() {
			defer func() { res.release(); <-slots; sc.handlers.Done() }()
			ctx := context.WithValue(sc.ctx, reservationKey{}, res)
			body, err := s.Handler(ctx, h.Type, payload)
			// A reply its handler did not reserve (a status page, a listing)
			// is charged now, before it waits to be written.
			if unreserved := int64(len(body)) - (res.holding() - charge); unreserved > 0 {
				if !s.budget.take(sc.ctx, unreserved) {
					sc.cancel()
					sc.c.Close()
					return
				}
				if !res.add(unreserved) {
					s.budget.give(unreserved)
				}
			}
			if werr := sc.w.writeResponse(h.Type|ResponseBit, h.ID, err, body); werr != nil {
				sc.cancel()
				sc.c.Close()
			}
		}()
	}
}

// fail ends the connection after a read error: the handlers still running
// on it are cancelled and, where the stream allows, the client is told why
// with an error frame on request id 0.
func (sc *serverConn) fail(err error) {
	sc.cancel()
	if errors.Is(err, net.ErrClosed) {
		return // closed by Close, or by a failed response write
	}
	var e *Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		sc.s.framesTimedOut.Add(1)
		e = Errorf(Timeout, "a frame took longer than %s to arrive", sc.s.FrameTimeout)
		err = fmt.Errorf("transport: a frame took longer than %s to arrive: %w", sc.s.FrameTimeout, err)
	case errors.Is(err, ErrFrameTooLarge):
		e = Errorf(TooLarge, "%v", err)
	case errors.Is(err, ErrMalformed):
		e = Errorf(Invalid, "%v", err)
	}
	sc.log.Warn("closing connection", "error", err)
	if e != nil && sc.w.writeError(e, lingerTimeout) == nil {
		lingerClose(sc.c)
		return
	}
	sc.c.Close()
}

// lingerTimeout and lingerBytes bound how long, and how much, input is
// read and discarded from a connection closed after an error frame:
// closing with unread input resets the connection, and a reset can destroy
// the error frame before the client reads it.
const (
	lingerTimeout = time.Second
	lingerBytes   = 1 << 20
)

// lingerClose sends FIN, discards the peer's input until it closes too
// (within lingerTimeout and lingerBytes), then closes c.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.CopyN(io.Discard, c, lingerBytes)
	}
	c.Close()
}

// frameWriter serialises response writes on one connection.
type frameWriter struct {
	turn chan struct{} // holds a token while a frame is being written
	c    net.Conn
	w    *bufio.Writer
}

func newFrameWriter(c net.Conn, size int) *frameWriter {
	return &frameWriter{turn: make(chan struct{}, 1), c: c, w: bufio.NewWriterSize(c, size)}
}

// writeTimeout bounds one response write: a client that stops reading has
// its connection closed instead of pinning handlers and their memory.
const writeTimeout = 30 * time.Second

// writeResponse writes the response with status err and body, without
// copying body.
func (fw *frameWriter) writeResponse(t Type, id uint64, err error, body []byte) error {
	fw.turn <- struct{}{}
	defer func() { <-fw.turn }()
	fw.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := writeFrameParts(fw.w, t, id, EncodeStatus(err, nil), body); err != nil {
		return err
	}
	return fw.w.Flush()
}

var errWriterBusy = errors.New("transport: a response write is under way")

// writeError writes e as the error of request id 0: the connection's, not
// a request's. It gives up after timeout, counting the wait for a response
// being written (to a client that may not be reading).
func (fw *frameWriter) writeError(e *Error, timeout time.Duration) error {
	until := time.Now().Add(timeout)
	expired := time.NewTimer(timeout)
	defer expired.Stop()
	select {
	case fw.turn <- struct{}{}:
	case <-expired.C:
		return errWriterBusy
	}
	defer func() { <-fw.turn }()
	fw.c.SetWriteDeadline(until)
	if err := writeFrameParts(fw.w, ResponseBit, 0, EncodeStatus(e, nil)); err != nil {
		return err
	}
	return fw.w.Flush()
}
