package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
)

// handshake runs the TLS handshake of c, an admitted connection, within
// HandshakeTimeout. On failure it closes c, having told a client that
// does not speak TLS why when its first bytes allow, and returns the
// handshake's error.
func (s *Server) handshake(c net.Conn) (*tls.Conn, error) {
	tc := tls.Server(c, s.TLS)
	ctx, cancel := context.WithTimeout(s.ctx, s.HandshakeTimeout)
	defer cancel()
	err := tc.HandshakeContext(ctx)
	if err == nil {
		return tc, nil
	}
	if s.ctx.Err() != nil { // the server is closing
		c.Close()
		return nil, err
	}
	s.handshakesFailed.Add(1)
	log := s.Logger.With("remote", c.RemoteAddr().String())
	if re, ok := errors.AsType[tls.RecordHeaderError](err); ok && re.Conn != nil {
		// Plaintext: most likely a client of this protocol without TLS,
		// whose frame header crypto/tls just read as a record header.
		log.Debug("refusing a connection that does not speak tls", "error", err)
		if newFrameWriter(c, 256).writeError(Errorf(Invalid, "this port requires TLS"), lingerTimeout) == nil {
			lingerClose(c)
		} else {
			c.Close()
		}
		return nil, err
	}
	switch {
	case ctx.Err() != nil:
		log.Debug("tls handshake timed out", "timeout", s.HandshakeTimeout)
		c.Close() // already, by HandshakeContext
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		log.Debug("connection closed during its tls handshake", "error", err)
		c.Close()
	default:
		// A certificate refused, by either side: the alert is sent, and
		// closing gently keeps a reset from destroying it before the
		// client reads it (in TLS 1.3 a client learns of a refused
		// certificate only on its first read).
		if ok, suppressed := s.handshakeLog.Allow(); ok {
			log.Warn("tls handshake failed", "error", err, "suppressed", suppressed)
		}
		lingerClose(c)
	}
	return nil, err
}
